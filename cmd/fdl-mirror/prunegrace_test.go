package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// On an object store a plain prune removes the withdrawn ref and holds
// the rest as candidates for the grace period, listed under .fdl-mirror/;
// --now is refused there, naming the flag that takes the risk, and
// removes nothing; --now-unsafe-on-object-stores removes at once. (That
// candidates go after the grace, by a clock the test holds, is
// internal/prune's TestACandidateGoesOnlyAfterItsGrace.)
func TestAPruneOfAnObjectStoreHoldsItsRemovalsForTheGrace(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	for _, sk := range []struct{ name, addr string }{
		{"s3", s3.URL(s3.Bucket(t), "mirror")},
		{"gcs", gcs.URL(gcs.Bucket(t), "mirror")},
	} {
		t.Run(sk.name, func(t *testing.T) {
			up := filepath.Join(t.TempDir(), "upstream")
			r := newBranchedRepo(t, up, 3, "gone")
			if res := run(t, "sync", "--log-level", "error", up, sk.addr); res.code != 0 {
				t.Fatalf("sync: exit %d\n%s", res.code, res.stdout)
			}
			gone := r.branches["refs/heads/gone"]
			r.deleteBranch(t, "refs/heads/gone")
			before := listStore(t, sk.addr)
			// The sync wrote the list back, empty (sink/claims.go).
			listed := readObject(t, sk.addr, backend.ReservedPrefix+sink.CandidatesFile)

			res := run(t, "prune", "--now", up, sk.addr)
			if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "--now-unsafe-on-object-stores") {
				t.Fatalf("prune --now on an object store: exit %d, want a refusal naming --now-unsafe-on-object-stores\n%s%s", res.code, res.stdout, res.stderr)
			}
			if d := diffStores(before, listStore(t, sk.addr)); len(d) > 0 {
				t.Fatalf("the refused prune --now changed the mirror: %v", d)
			}
			if readObject(t, sk.addr, backend.ReservedPrefix+sink.CandidatesFile) != listed {
				t.Fatal("the refused prune --now wrote the candidates")
			}

			rep, res := pruneJSON(t, up, sk.addr)
			if res.code != 0 {
				t.Fatalf("prune: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			if len(rep.RefsRemoved) != 1 || len(rep.VersionsRemoved) != 0 || len(rep.DataFilesRemoved) != 0 || rep.Candidates == 0 || rep.NextDue == nil {
				t.Fatalf("prune: refs %v, versions %v, data files %v, %d candidates, next due %v; want the ref removed and the rest held",
					rep.RefsRemoved, rep.VersionsRemoved, rep.DataFilesRemoved, rep.Candidates, rep.NextDue)
			}
			record := repo.VersionFile(gone, repo.RecordFile)
			if readObject(t, sk.addr, record) == "" {
				t.Fatalf("%s removed at once", record)
			}
			var list sink.Candidates
			if err := json.Unmarshal([]byte(readObject(t, sk.addr, backend.ReservedPrefix+sink.CandidatesFile)), &list); err != nil {
				t.Fatal(err)
			}
			for _, f := range append([]string{record}, r.only[gone]...) {
				if _, ok := list.Objects[f]; !ok {
					t.Errorf("%s is not a candidate: %v", f, list.Objects)
				}
			}
			if v := run(t, "verify", sk.addr); v.code != 0 {
				t.Errorf("verify after the prune: exit %d\n%s", v.code, v.stdout)
			}

			rep, res = pruneJSON(t, "--now-unsafe-on-object-stores", up, sk.addr)
			if res.code != 0 || len(rep.VersionsRemoved) != 1 || len(rep.DataFilesRemoved) != len(r.only[gone]) {
				t.Fatalf("prune --now-unsafe-on-object-stores: exit %d, versions %v, data files %v\n%s", res.code, rep.VersionsRemoved, rep.DataFilesRemoved, res.stderr)
			}
			if readObject(t, sk.addr, record) != "" {
				t.Fatalf("%s stayed", record)
			}
			// What went at once leaves the list: copied again later with
			// the same token, it must count its grace afresh.
			list = sink.Candidates{}
			if err := json.Unmarshal([]byte(readObject(t, sk.addr, backend.ReservedPrefix+sink.CandidatesFile)), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Objects) != 0 {
				t.Errorf("the candidates removed at once are still listed: %v", list.Objects)
			}
		})
	}
}
