package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// k8sObject is one object of a manifest, decoded into its Kubernetes type.
type k8sObject struct {
	File string
	Kind string
	Name string
	Obj  any // *appsv1.Deployment, *batchv1.CronJob, ...
}

func (o k8sObject) String() string { return fmt.Sprintf("%s: %s/%s", o.File, o.Kind, o.Name) }

// k8sTypes maps apiVersion/kind to a new object of the Kubernetes type.
// A kind not listed here is an error: a new kind in deploy/kubernetes
// gets a type here, so that it is checked too.
var k8sTypes = map[string]func() any{
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"batch/v1/CronJob":              func() any { return &batchv1.CronJob{} },
	"batch/v1/Job":                  func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeK8s decodes every document of a manifest strictly into its
// Kubernetes type: a field the type does not have (a misspelling, a field
// at the wrong level) is an error, as are a duplicate field and an unknown
// kind.
func decodeK8s(file string, data []byte) ([]k8sObject, error) {
	var objs []k8sObject
	for i, doc := range documentSeparator.Split(string(data), -1) {
		var probe map[string]any
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if len(probe) == 0 {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		key := tm.APIVersion + "/" + tm.Kind
		newObj, ok := k8sTypes[key]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: kind %s is not one this test knows; add its k8s.io/api type to k8sTypes", file, i+1, key)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", file, i+1, key, err)
		}
		meta := obj.(metav1.Object)
		if meta.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d (%s): no metadata.name", file, i+1, key)
		}
		objs = append(objs, k8sObject{File: file, Kind: tm.Kind, Name: meta.GetName(), Obj: obj})
	}
	return objs, nil
}

func allManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	var all []k8sObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeK8s(f, data)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) == 0 {
			t.Errorf("%s: no objects", f)
		}
		all = append(all, objs...)
	}
	return all
}

// podTemplate returns the pod template of a workload, nil for other kinds.
func podTemplate(o k8sObject) *corev1.PodTemplateSpec {
	switch w := o.Obj.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *batchv1.CronJob:
		return &w.Spec.JobTemplate.Spec.Template
	case *batchv1.Job:
		return &w.Spec.Template
	}
	return nil
}

// podProblems lists what in a pod template breaks the security rules: a
// non-root user, a read-only root file system, no privilege escalation,
// no privileged container, every capability dropped.
func podProblems(o k8sObject) []string {
	tmpl := podTemplate(o)
	if tmpl == nil {
		return nil
	}
	var ps []string
	spec := tmpl.Spec
	psc := spec.SecurityContext
	podNonRoot := psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		ps = append(ps, "pod runs as user 0")
	}
	containers := append(slices.Clone(spec.InitContainers), spec.Containers...)
	if len(spec.Containers) == 0 {
		ps = append(ps, "no containers")
	}
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil {
			ps = append(ps, fmt.Sprintf("container %s: no securityContext", c.Name))
			continue
		}
		if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
			ps = append(ps, fmt.Sprintf("container %s: runAsNonRoot not true (neither pod nor container)", c.Name))
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			ps = append(ps, fmt.Sprintf("container %s: runs as user 0", c.Name))
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			ps = append(ps, fmt.Sprintf("container %s: readOnlyRootFilesystem not true", c.Name))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			ps = append(ps, fmt.Sprintf("container %s: allowPrivilegeEscalation not false", c.Name))
		}
		if sc.Privileged != nil && *sc.Privileged {
			ps = append(ps, fmt.Sprintf("container %s: privileged", c.Name))
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			ps = append(ps, fmt.Sprintf("container %s: capabilities not all dropped", c.Name))
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		// The pods never call the Kubernetes API.
		ps = append(ps, "automountServiceAccountToken not false: an API token the pod does not need")
	}
	if cj, ok := o.Obj.(*batchv1.CronJob); ok && cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		ps = append(ps, fmt.Sprintf("concurrencyPolicy %q, want Forbid: two runs at once would only wait on the sink's lock", cj.Spec.ConcurrencyPolicy))
	}
	return ps
}

// Every object of every manifest decodes strictly into its Kubernetes type,
// every workload runs confined, and every CronJob forbids overlapping runs.
func TestKubernetesManifestsDecodeIntoKubernetesTypes(t *testing.T) {
	objs := allManifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind]++
		for _, p := range podProblems(o) {
			t.Errorf("%v: %s", o, p)
		}
	}
	for _, want := range []string{"CronJob", "Deployment", "ConfigMap", "Secret", "ServiceAccount", "Service"} {
		if kinds[want] == 0 {
			t.Errorf("no %s in deploy/kubernetes (found %v)", want, kinds)
		}
	}
}

// Selectors find their pods: a Service or PodDisruptionBudget that selects
// no workload's pods, or a Deployment whose selector misses its own
// template, would do nothing, silently.
func TestKubernetesSelectorsMatchTheirPods(t *testing.T) {
	objs := allManifests(t)
	var pods []labels.Set
	for _, o := range objs {
		tmpl := podTemplate(o)
		if tmpl == nil {
			continue
		}
		pods = append(pods, labels.Set(tmpl.Labels))
		if d, ok := o.Obj.(*appsv1.Deployment); ok {
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
				t.Errorf("%v: selector %v does not match its template's labels %v (%v)", o, d.Spec.Selector, tmpl.Labels, err)
			}
		}
	}
	selects := func(sel labels.Selector) bool {
		return slices.ContainsFunc(pods, func(l labels.Set) bool { return sel.Matches(l) })
	}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.Service:
			if len(v.Spec.Selector) == 0 || !selects(labels.SelectorFromSet(v.Spec.Selector)) {
				t.Errorf("%v: selector %v selects no pod of the manifests", o, v.Spec.Selector)
			}
		case *policyv1.PodDisruptionBudget:
			sel, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			if err != nil || v.Spec.Selector == nil || !selects(sel) {
				t.Errorf("%v: selector %v selects no pod of the manifests (%v)", o, v.Spec.Selector, err)
			}
		}
	}
}

// The checks have teeth: a misspelt field, a field at the wrong level, an
// unknown kind, a writable root file system and an allowed overlap are all
// caught.
func TestKubernetesChecksCatchMistakes(t *testing.T) {
	data, err := os.ReadFile("kubernetes/cronjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"misspelt field", "\n  concurrencyPolicy: Forbid\n", "\n  concurrencyPolicyy: Forbid\n", `unknown field "concurrencyPolicyy"`},
		{"field at the wrong level", "      backoffLimit: 0", "      backoffLimitt: 0", `unknown field "backoffLimitt"`},
		{"wrong type", "runAsUser: 65532", "runAsUser: nobody", "runAsUser"},
		{"unknown kind", "kind: CronJob", "kind: CronJobs", "batch/v1/CronJobs is not one this test knows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(bad, data) {
				t.Fatalf("%q not in cronjob.yaml", tc.from)
			}
			_, err := decodeK8s("cronjob.yaml", bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ from, to, want string }{
		{"readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem not true"},
		{"allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation not false"},
		{"runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot not true"},
		{"\n  concurrencyPolicy: Forbid\n", "\n  concurrencyPolicy: Allow\n", "concurrencyPolicy"},
		{"          automountServiceAccountToken: false\n", "", "automountServiceAccountToken not false"},
	} {
		bad := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("%q not in cronjob.yaml", tc.from)
		}
		objs, err := decodeK8s("cronjob.yaml", bad)
		if err != nil {
			t.Fatal(err)
		}
		var problems []string
		for _, o := range objs {
			problems = append(problems, podProblems(o)...)
		}
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("with %s: problems %v, want one with %q", tc.to, problems, tc.want)
		}
	}
}
