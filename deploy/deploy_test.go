// Tests of the deployment files (systemd units, Dockerfile, Kubernetes
// manifests): that they parse, that their tools accept them where the tools
// are here, and that they hold what the operator was promised.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"gopkg.in/yaml.v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

var units = []string{"fdl-mirror.service", "fdl-mirror-sync.service", "fdl-mirror-sync.timer"}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdAnalyzeVerifyAcceptsTheUnits runs systemd-analyze verify in a
// scratch root holding the system's own units, the ones under test, and a
// stand-in for the binary (verify checks that ExecStart is executable).
// verify exits 0 on unknown keys and bad values, only printing them: any
// output at all fails the test.
func TestSystemdAnalyzeVerifyAcceptsTheUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd): unit files not verified")
	}
	const systemUnits = "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(systemUnits, "sysinit.target")); err != nil {
		t.Skipf("no system units in %s to verify against: %v", systemUnits, err)
	}
	root := t.TempDir()
	entries, err := os.ReadDir(systemUnits)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(systemUnits, e.Name()), filepath.Join(root, systemUnits, e.Name()), 0o644)
		}
	}
	for _, u := range units {
		copyFile(t, filepath.Join("..", "systemd", u), filepath.Join(root, "etc/systemd/system", u), 0o644)
	}
	stub, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, stub, filepath.Join(root, "usr/local/bin/fdl-mirror"), 0o755)
	copyFile(t, stub, filepath.Join(root, "bin/kill"), 0o755)

	cmd := exec.Command(analyze, append([]string{"verify", "--root=" + root}, units...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The check has teeth: a misspelt key is reported.
	bad := filepath.Join(root, "etc/systemd/system", "fdl-mirror.service")
	data, _ := os.ReadFile(bad)
	os.WriteFile(bad, bytes.Replace(data, []byte("ProtectSystem=strict"), []byte("ProtectSytem=strict"), 1), 0o644)
	out, _ = exec.Command(analyze, "verify", "--root="+root, "fdl-mirror.service").CombinedOutput()
	if !strings.Contains(string(out), "ProtectSytem") {
		t.Errorf("verify did not report a misspelt key; output:\n%s", out)
	}
}

// unitSettings reads a unit file's Key=Value lines, section by section.
func unitSettings(t *testing.T, name string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		settings[section+"."+k] = append(settings[section+"."+k], v)
	}
	return settings
}

func TestServiceUnitsAreConfined(t *testing.T) {
	for _, name := range []string{"fdl-mirror.service", "fdl-mirror-sync.service"} {
		s := unitSettings(t, name)
		want := map[string]string{
			"Service.ProtectSystem":         "strict",
			"Service.NoNewPrivileges":       "yes",
			"Service.PrivateTmp":            "yes",
			"Service.CapabilityBoundingSet": "",
			"Service.DynamicUser":           "yes",
		}
		for k, v := range want {
			got, ok := s[k]
			if !ok || got[len(got)-1] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got, v)
			}
		}
		if len(s["Service.StateDirectory"]) == 0 {
			t.Errorf("%s: no StateDirectory for temporary files", name)
		}
		if tmp := s["Service.Environment"]; len(tmp) == 0 || !strings.HasPrefix(tmp[0], "TMPDIR=/var/lib/fdl-mirror") {
			t.Errorf("%s: temporary files not in the state directory: Environment=%q", name, tmp)
		}
	}
	d := unitSettings(t, "fdl-mirror.service")
	if typ := d["Service.Type"]; len(typ) != 1 || (typ[0] != "exec" && typ[0] != "notify") {
		t.Errorf("daemon Type = %q", typ)
	}
	if r := d["Service.Restart"]; len(r) != 1 || r[0] != "on-failure" {
		t.Errorf("daemon Restart = %q", r)
	}
	if start := d["Service.ExecStart"]; len(start) != 1 || !strings.Contains(start[0], "fdl-mirror daemon --config ") {
		t.Errorf("daemon ExecStart = %q", start)
	}
	if reload := d["Service.ExecReload"]; len(reload) != 1 || !strings.Contains(reload[0], "-HUP $MAINPID") {
		t.Errorf("daemon ExecReload = %q", reload)
	}
	o := unitSettings(t, "fdl-mirror-sync.service")
	if typ := o["Service.Type"]; len(typ) != 1 || typ[0] != "oneshot" {
		t.Errorf("sync Type = %q", typ)
	}
	if start := o["Service.ExecStart"]; len(start) != 1 || !strings.Contains(start[0], "fdl-mirror sync --config ") {
		t.Errorf("sync ExecStart = %q", start)
	}
	tm := unitSettings(t, "fdl-mirror-sync.timer")
	if len(tm["Timer.OnUnitInactiveSec"])+len(tm["Timer.OnCalendar"]) == 0 {
		t.Error("timer has no schedule")
	}
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	froms := regexp.MustCompile(`(?m)^FROM `).FindAllStringIndex(text, -1)
	if len(froms) < 2 {
		t.Errorf("not multi-stage: %d FROM lines", len(froms))
	}
	for _, want := range []string{
		"CGO_ENABLED=1", "ca-certificates", `ENTRYPOINT ["fdl-mirror"]`, "COPY --from=build",
		"/out/fdl-mirror-catalog-reader /usr/local/bin/", // beside fdl-mirror
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	// The last USER of the runtime stage is not root.
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(text[froms[len(froms)-1][0]:], -1)
	if len(users) == 0 {
		t.Fatal("runtime stage sets no USER: it would run as root")
	}
	if u := users[len(users)-1][1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		t.Errorf("runtime USER is %s", u)
	}
}

// manifests decodes a multi-document YAML file into generic objects by kind/name.
func manifests(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(f)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj["apiVersion"] == nil || obj["kind"] == nil {
			t.Fatalf("%s: object without apiVersion or kind: %v", path, obj)
		}
		key := obj["kind"].(string) + "/" + get(t, obj, "metadata", "name").(string)
		objs[key] = obj
	}
	return objs
}

// get walks maps by key and lists by index (int).
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not a mapping: %v", path, v)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: not a list with item %d: %v", path, k, v)
			}
			v = l[k]
		}
	}
	return v
}

// checkPodConfig checks a pod's config ConfigMap: it parses as fdl-mirror
// config (trusted_signers files given to it under the keys mount), and the
// container's --config path and the keys' paths are where the volumes are
// mounted. It returns the parsed config.
func checkPodConfig(t *testing.T, objs map[string]map[string]any, pod map[string]any, configMap string) *config.Config {
	t.Helper()
	container := get(t, pod, "containers", 0).(map[string]any)
	args := get(t, container, "args").([]any)
	configPath := ""
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			configPath = args[i+1].(string)
		}
	}
	if configPath == "" {
		t.Fatalf("container args %v have no --config", args)
	}
	mounts := map[string]string{} // mount path -> volume
	for _, m := range get(t, container, "volumeMounts").([]any) {
		mm := m.(map[string]any)
		mounts[mm["mountPath"].(string)] = mm["name"].(string)
	}
	volumes := map[string]map[string]any{}
	for _, v := range get(t, pod, "volumes").([]any) {
		vm := v.(map[string]any)
		volumes[vm["name"].(string)] = vm
	}
	// mountedFrom finds the ConfigMap and key behind a file path.
	mountedFrom := func(path string) (cm, key string) {
		for mp, vol := range mounts {
			var k string
			switch {
			case mp == path:
				k = filepath.Base(path)
			case strings.HasPrefix(path, mp+"/"):
				k = strings.TrimPrefix(path, mp+"/")
			default:
				continue
			}
			src, ok := volumes[vol]["configMap"].(map[string]any)
			if !ok {
				t.Fatalf("%s is mounted from volume %s, not a ConfigMap", path, vol)
			}
			return src["name"].(string), k
		}
		t.Fatalf("nothing mounted at %s", path)
		return "", ""
	}
	cm, key := mountedFrom(configPath)
	if cm != configMap {
		t.Errorf("--config %s comes from ConfigMap %s, want %s", configPath, cm, configMap)
	}
	text, ok := get(t, objs["ConfigMap/"+cm], "data", key).(string)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm, key)
	}
	if _, ok := mounts["/tmp"]; !ok {
		t.Error("no writable /tmp for DuckDB with a read-only root filesystem")
	}

	// Put every trusted_signers file the config names where the pod would
	// have it, from the ConfigMap that holds it.
	dir := t.TempDir()
	for _, line := range strings.Split(text, "\n") {
		_, p, ok := strings.Cut(line, "trusted_signers:")
		if !ok {
			continue
		}
		p = strings.TrimSpace(p)
		keysCM, keysKey := mountedFrom(p)
		keys, ok := get(t, objs["ConfigMap/"+keysCM], "data", keysKey).(string)
		if !ok {
			t.Fatalf("trusted_signers %s: ConfigMap %s has no key %s", p, keysCM, keysKey)
		}
		local := filepath.Join(dir, filepath.Base(p))
		os.WriteFile(local, []byte(keys), 0o644)
		text = strings.ReplaceAll(text, p, local)
	}
	env := func(name string) (string, bool) { return "set-in-the-secret", true }
	cfg, err := config.Parse([]byte(text), configMap, env)
	if err != nil {
		t.Fatalf("ConfigMap %s does not validate:\n%v", configMap, err)
	}
	sc := get(t, container, "securityContext").(map[string]any)
	if sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true {
		t.Errorf("container securityContext = %v", sc)
	}
	if get(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod does not require a non-root user")
	}
	if get(t, container, "resources", "requests") == nil {
		t.Error("no resource requests")
	}
	if get(t, container, "envFrom", 0, "secretRef", "name") == nil {
		t.Error("credentials not taken from a Secret")
	}
	return cfg
}

func TestKubernetesCronJob(t *testing.T) {
	objs := manifests(t, "kubernetes/cronjob.yaml")
	cj, ok := objs["CronJob/fdl-mirror"]
	if !ok {
		t.Fatalf("no CronJob/fdl-mirror; objects: %v", keys(objs))
	}
	if p := get(t, cj, "spec", "concurrencyPolicy"); p != "Forbid" {
		t.Errorf("concurrencyPolicy = %v", p)
	}
	pod := get(t, cj, "spec", "jobTemplate", "spec", "template", "spec").(map[string]any)
	args := get(t, pod, "containers", 0, "args").([]any)
	if args[0] != "sync" {
		t.Errorf("CronJob runs %v, want sync --config", args)
	}
	checkPodConfig(t, objs, pod, "fdl-mirror-config")
	if _, ok := objs["Secret/fdl-mirror-credentials"]; !ok {
		t.Error("no credentials Secret")
	}
}

func TestKubernetesDeployment(t *testing.T) {
	objs := manifests(t, "kubernetes/deployment.yaml")
	// The Deployment uses the keys ConfigMap of cronjob.yaml.
	for k, v := range manifests(t, "kubernetes/cronjob.yaml") {
		if strings.HasPrefix(k, "ConfigMap/fdl-mirror-keys") {
			objs[k] = v
		}
	}
	dep, ok := objs["Deployment/fdl-mirror"]
	if !ok {
		t.Fatalf("no Deployment/fdl-mirror; objects: %v", keys(objs))
	}
	pod := get(t, dep, "spec", "template", "spec").(map[string]any)
	cfg := checkPodConfig(t, objs, pod, "fdl-mirror-daemon-config")
	for _, m := range cfg.Mirrors {
		if m.Schedule == "" {
			t.Errorf("mirror %s has no schedule: the daemon would refuse the config", m.Name)
		}
	}
	c := get(t, pod, "containers", 0)
	if get(t, c, "args", 0) != "daemon" {
		t.Errorf("Deployment does not run the daemon: %v", get(t, c, "args"))
	}
	// Replicas for availability: two, on different nodes where there are
	// several, one always left by voluntary disruptions.
	if r := get(t, dep, "spec", "replicas"); r != 2 {
		t.Errorf("replicas = %v, want 2", r)
	}
	labels := get(t, dep, "spec", "template", "metadata", "labels").(map[string]any)
	anti := get(t, pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm").(map[string]any)
	if anti["topologyKey"] != "kubernetes.io/hostname" || fmt.Sprint(get(t, anti, "labelSelector", "matchLabels")) != fmt.Sprint(labels) {
		t.Errorf("pod anti-affinity %v does not keep the replicas (%v) apart by node", anti, labels)
	}
	pdb, ok := objs["PodDisruptionBudget/fdl-mirror"]
	if !ok {
		t.Fatalf("no PodDisruptionBudget/fdl-mirror; objects: %v", keys(objs))
	}
	if get(t, pdb, "spec", "minAvailable") != 1 || fmt.Sprint(get(t, pdb, "spec", "selector", "matchLabels")) != fmt.Sprint(labels) {
		t.Errorf("PodDisruptionBudget %v: want minAvailable 1 over the daemon's pods %v", get(t, pdb, "spec"), labels)
	}
	if get(t, c, "livenessProbe", "httpGet", "path") != "/healthz" || get(t, c, "readinessProbe", "httpGet", "path") != "/readyz" {
		t.Error("probes are not on /healthz (liveness) and /readyz (readiness)")
	}
	port := get(t, c, "ports", 0).(map[string]any)
	if port["name"] != "metrics" || get(t, c, "livenessProbe", "httpGet", "port") != "metrics" {
		t.Errorf("port %v, probes on %v", port, get(t, c, "livenessProbe", "httpGet", "port"))
	}
	// The probes' port is metrics_listen's, a listener of their own.
	if !strings.HasSuffix(cfg.MetricsListen, ":"+itoa(port["containerPort"])) || strings.HasPrefix(cfg.MetricsListen, "127.") {
		t.Errorf("config serves probes (metrics_listen) on %q, the pod exposes %v", cfg.MetricsListen, port["containerPort"])
	}
	if cfg.Listen == "" || cfg.Listen == cfg.MetricsListen {
		t.Errorf("config listens on %q beside metrics_listen %q", cfg.Listen, cfg.MetricsListen)
	}
}

// The sharded CronJob: an Indexed Job whose every pod is one shard of one
// ConfigMap, with --shards N matching the number of pods.
func TestKubernetesShardedCronJob(t *testing.T) {
	objs := manifests(t, "kubernetes/cronjob-sharded.yaml")
	for k, v := range manifests(t, "kubernetes/cronjob.yaml") {
		if strings.HasPrefix(k, "ConfigMap/fdl-mirror-keys") {
			objs[k] = v
		}
	}
	cj, ok := objs["CronJob/fdl-mirror-sharded"]
	if !ok {
		t.Fatalf("no CronJob/fdl-mirror-sharded; objects: %v", keys(objs))
	}
	// The Job's fields, from the strict decoding into Kubernetes' types.
	data, err := os.ReadFile("kubernetes/cronjob-sharded.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typed, err := decodeK8s("kubernetes/cronjob-sharded.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	var cronJob *batchv1.CronJob
	for _, o := range typed {
		if c, ok := o.Obj.(*batchv1.CronJob); ok && o.Name == "fdl-mirror-sharded" {
			cronJob = c
		}
	}
	if cronJob == nil {
		t.Fatalf("no CronJob/fdl-mirror-sharded among %v", typed)
	}
	if cronJob.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy = %q", cronJob.Spec.ConcurrencyPolicy)
	}
	js := cronJob.Spec.JobTemplate.Spec
	if js.CompletionMode == nil || *js.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode = %v, want Indexed (pods get JOB_COMPLETION_INDEX)", js.CompletionMode)
	}
	if js.Completions == nil || js.Parallelism == nil || *js.Completions < 2 || *js.Parallelism != *js.Completions {
		t.Fatalf("completions %s, parallelism %s: want the same number of shards, at least 2", int32Str(js.Completions), int32Str(js.Parallelism))
	}
	n := int(*js.Completions)
	// A failing shard must not stop the others (backoffLimit would end
	// the whole Job at the first failed pod).
	if js.BackoffLimitPerIndex == nil || *js.BackoffLimitPerIndex != 0 || js.BackoffLimit != nil {
		t.Errorf("backoffLimitPerIndex %s, backoffLimit %s: want 0 and unset", int32Str(js.BackoffLimitPerIndex), int32Str(js.BackoffLimit))
	}
	if js.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q: backoffLimitPerIndex needs Never", js.Template.Spec.RestartPolicy)
	}
	args := js.Template.Spec.Containers[0].Args
	i := slices.Index(args, "--shards")
	if len(args) < 3 || args[0] != "sync" || args[1] != "--config" || i < 0 || i+1 >= len(args) || args[i+1] != strconv.Itoa(n) {
		t.Errorf("args %q: want sync --config FILE --shards %d", args, n)
	}
	if slices.Contains(args, "--shard") {
		t.Errorf("args %q: --shard I/N would give every pod the same shard", args)
	}
	pod := get(t, cj, "spec", "jobTemplate", "spec", "template", "spec").(map[string]any)
	cfg := checkPodConfig(t, objs, pod, "fdl-mirror-sharded-config")
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		part := cfg.InShard(config.Shard{Index: i, Count: n})
		if len(part.Mirrors) == 0 {
			t.Errorf("shard %d/%d of the example holds no mirror", i, n)
		}
		t.Logf("shard %d/%d: %v", i, n, part.Names())
		for _, name := range part.Names() {
			seen[name]++
		}
	}
	for _, name := range cfg.Names() {
		if seen[name] != 1 {
			t.Errorf("mirror %s is in %d shards", name, seen[name])
		}
	}
}

// int32Str prints an optional field of a Kubernetes type.
func int32Str(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func itoa(v any) string {
	if n, ok := v.(int); ok {
		return strconv.Itoa(n)
	}
	return fmt.Sprint(v)
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
