package mirror

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
)

// carried says where a field of config.Mirror lands: the path of a field
// in the sync's Job and in the prune's PruneJob, "" where that job has no
// use for it. A field in neither is the daemon's (its schedule, its
// receivers) and names why.
type carried struct{ sync, prune, neither string }

func both(path string) carried { return carried{sync: path, prune: path} }

// inStores is a field both jobs take from their one Stores (StoresOf).
func inStores(path string) carried { return both("Stores." + path) }

var configToJob = map[string]carried{
	"Name":                  both("Name"),
	"Source":                inStores("Source"),
	"Sink":                  inStores("Sink"),
	"Sinks":                 {sync: "Sinks"}, // a prune runs per sink, its Sink set to each (cmd/fdl-mirror)
	"HTTPHeaders":           inStores("HTTPHeaders"),
	"HTTPAllowRedirects":    inStores("HTTPAllowRedirects"),
	"HTTPAllowInsecureAuth": inStores("HTTPAllowInsecureAuth"),
	"CAFile":                inStores("CAFile"),
	"LockWait":              inStores("LockWait"),
	"LockTTL":               inStores("LockTTL"),
	"Retries":               inStores("Retries"),
	"CatalogMaxFiles":       inStores("CatalogLimits.MaxFiles"),
	"CatalogTimeout":        inStores("CatalogLimits.Timeout"),
	"CatalogMemoryLimit":    inStores("CatalogLimits.MemoryLimit"),
	"CatalogMaxSize":        inStores("CatalogLimits.MaxSize"),
	"RequireSandbox":        inStores("CatalogLimits.RequireSandbox"),
	"TrustedSigners":        {sync: "TrustedSigners"},
	"RequireSignatures":     {sync: "RequireSignatures"},
	"SignatureNamespace":    {sync: "SignatureNamespace"},
	"Concurrency":           {sync: "Concurrency"},
	"BWLimit":               {sync: "BWLimit"},
	"Refs":                  {sync: "Refs.Include"},
	"ExcludeRefs":           {sync: "Refs.Exclude"},
	"AllowRewind":           {sync: "AllowRewind"},
	"MaxUpstreamAge":        {sync: "MaxUpstreamAge"},
	"Repair":                {sync: "Repair"},
	"Force":                 {sync: "Force"},
	"PruneMaxDelete":        {prune: "MaxDelete"},
	"PruneGrace":            {prune: "Grace"},
	"Scrub":                 {neither: "when the daemon runs the mirror with Repair"},
	"Schedule":              {neither: "when the daemon runs the mirror"},
	"Prune":                 {neither: "whether the daemon prunes after a sync"},
	"Notify":                {neither: "the notifier's receivers"},
	"Line":                  {neither: "where config errors point"},
}

// Each field of a configured mirror, set alone, changes its jobs in the
// place the table names and nowhere else: a field added to config.Mirror
// and not carried (or not named as the daemon's) fails here, and so does
// one carried to the wrong field.
func TestEveryMirrorSettingReachesItsJob(t *testing.T) {
	zeroSync, zeroPrune := SyncJob(config.Mirror{}), PruneJobOf(config.Mirror{})
	typ := reflect.TypeFor[config.Mirror]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		where, ok := configToJob[f.Name]
		if !ok {
			t.Errorf("config.Mirror.%s is carried into no job: set it in StoresOf, SyncJob or PruneJobOf (config.go) and name it in configToJob", f.Name)
			continue
		}
		var m config.Mirror
		value := filled(t, f.Type, i)
		reflect.ValueOf(&m).Elem().Field(i).Set(value)

		wantSync := zeroSync
		if where.sync != "" {
			setPath(t, &wantSync, where.sync, value)
		}
		if got := SyncJob(m); !reflect.DeepEqual(got, wantSync) {
			t.Errorf("config.Mirror.%s = %v: SyncJob = %+v, want %+v", f.Name, value, got, wantSync)
		}
		wantPrune := zeroPrune
		if where.prune != "" {
			setPath(t, &wantPrune, where.prune, value)
		}
		if got := PruneJobOf(m); !reflect.DeepEqual(got, wantPrune) {
			t.Errorf("config.Mirror.%s = %v: PruneJobOf = %+v, want %+v", f.Name, value, got, wantPrune)
		}
		if s, p := SyncJob(m).Stores, PruneJobOf(m).Stores; !reflect.DeepEqual(s, p) {
			t.Errorf("config.Mirror.%s = %v: the sync reaches the stores as %+v, the prune as %+v", f.Name, value, s, p)
		}
		if (where.sync == "" && where.prune == "") != (where.neither != "") {
			t.Errorf("config.Mirror.%s: the table names a job and a reason for none, or neither", f.Name)
		}
	}
	for name := range configToJob {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("configToJob names %s, which config.Mirror no longer has", name)
		}
	}
}

// The other way: with every setting of a mirror given, every field of
// its jobs is set, Stores' each, but for what only the command line sets
// (a dry run, a prune at once) and what no config says (the refs a prune
// may remove: all).
func TestEveryJobFieldComesFromTheMirror(t *testing.T) {
	var m config.Mirror
	v := reflect.ValueOf(&m).Elem()
	for i := range v.NumField() {
		v.Field(i).Set(filled(t, v.Field(i).Type(), i))
	}
	for _, job := range []struct {
		value  any
		unread map[string]bool
	}{
		{SyncJob(m), map[string]bool{"DryRun": true}},
		{PruneJobOf(m), map[string]bool{"DryRun": true, "Selected": true, "Now": true, "NowUnsafe": true}},
	} {
		for name, field := range fields(reflect.ValueOf(job.value), "") {
			if zero := field.IsZero(); zero != job.unread[name] {
				t.Errorf("%T.%s: zero = %v with every mirror setting given", job.value, name, zero)
			}
		}
	}
	if SyncJob(m).DryRun || PruneJobOf(m).DryRun {
		t.Error("a configured mirror's job is a dry run")
	}
}

// fields are a job's fields by name, those of a struct it embeds
// (Stores) each on its own ("Stores.LockTTL"): an embedded struct with one
// field set is not zero, and would hide the others.
func fields(v reflect.Value, prefix string) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for name, field := range fields(v.Field(i), prefix+f.Name+".") {
				out[name] = field
			}
			continue
		}
		out[prefix+f.Name] = v.Field(i)
	}
	return out
}

// filled is a value of type t that is not its zero, made from n so that
// no two fields of a struct get the same one.
func filled(t *testing.T, typ reflect.Type, n int) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("value-" + strings.Repeat("x", n+1))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n + 1))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 1, 1))
		v.Index(0).Set(filled(t, typ.Elem(), n))
	case reflect.Struct:
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				v.Field(i).Set(filled(t, typ.Field(i).Type, n+i))
			}
		}
	default:
		t.Fatalf("filled: no value for a %s; add one", typ)
	}
	return v
}

// setPath sets the field at path ("CatalogLimits.MaxFiles") of *job.
func setPath(t *testing.T, job any, path string, value reflect.Value) {
	t.Helper()
	v := reflect.ValueOf(job).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			t.Fatalf("%T has no field %s", job, path)
		}
	}
	v.Set(value)
}
