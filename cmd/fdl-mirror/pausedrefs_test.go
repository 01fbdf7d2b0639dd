package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// The issue-42 interleaving of a ref, which moved a ref onto a removed
// version in 5 of 8 rounds before a sync made what it relies on its own:
// a sync paused just before its ref writes, upstream withdraws the
// branch (or expires its version X), a prune takes the expired lock over
// and removes X, and the sync's held ref write lands, conditional only on
// the ref file.
//
// The prune here has its clock past prune_grace for X: X's objects were
// listed before the sync read the list (a version upstream withdrew, that
// a prune listed, and that upstream then brought back), and the test
// backdates them by two days. A grace that starts while the sync is
// paused cannot pass within a pause shorter than it (docs/design.md), so
// this is how a prune can be due to remove X while the sync is paused
// before its refs. Each round:
//
//  1. the mirror holds main and feat → X; upstream withdraws feat and
//     expires X; a prune removes the ref and lists X; its grace is
//     backdated past;
//  2. upstream brings feat → X back; sync A (through the proxy) copies X
//     again and is stopped with its write of refs/heads/feat held;
//  3. upstream withdraws feat, and X's folder (even rounds) or marks X
//     expired (odd rounds; a version an upstream ref still names is
//     never removed, so expiring X alone would test nothing);
//  4. a prune takes A's expired lock over (it has a ref to remove:
//     upstream withdrew branch other too) and plans X's removal;
//  5. A resumes, its held ref write lands.
//
// Then: X is complete, every ref resolves to a complete version (verify,
// verify --deep in the first round), and the next plain sync exits 0 and
// leaves the mirror complete.
func TestASyncPausedBeforeItsRefsMovesNoRefToAVersionAPruneRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and takes over runs on the test servers")
	}
	const rounds = 4 // per store: two of each withdrawal
	const feat, other = "refs/heads/feat", "refs/heads/other"
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for round := range rounds {
				parent := t.TempDir()
				up := filepath.Join(parent, "upstream")
				r := newBranchedRepo(t, up, 3, "feat", "other")
				x := r.branches[feat]
				prefix := fmt.Sprintf("refclaims-%d", round)
				sinkAddr, env, configA, configB := st.configs(t, parent, up, prefix)
				if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Fatalf("round %d: first sync: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}

				// 1. Withdrawn, listed, and its grace past.
				r.expireBranch(t, feat)
				if res := run(t, "prune", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Fatalf("round %d: the prune that lists X: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}
				if n := backdateCandidates(t, sinkAddr, 48*time.Hour); n < len(r.only[x])+1 {
					t.Fatalf("round %d: %d candidates listed; want X's version.json and its %d data files at least", round, n, len(r.only[x]))
				}

				// 2. Brought back; A stopped at its ref write.
				if err := os.Remove(filepath.Join(up, "versions", x, repo.ExpiredFile)); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(up, feat), x+"\n")
				r.writeRefsJSON(t)
				a := startPaused(t, st.proxy, writeOf(func(key string) bool { return key == prefix+"/"+feat }),
					env, "sync", "--config", configA, "--mirror", "m", "--json", "--log-level", "debug")
				a.waitStopped(t)

				// 3. Withdrawn again.
				how := "feat and X's folder withdrawn"
				if round%2 == 0 {
					r.deleteBranch(t, feat)
				} else {
					how = "feat withdrawn, X expired"
					r.expireBranch(t, feat)
				}

				r.deleteBranch(t, other)

				// 4. The prune over the paused sync.
				pr, res := pruneJSON(t, "--config", configB, "--mirror", "m")
				if res.code != 0 {
					t.Fatalf("round %d: the prune over the paused sync: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}

				if len(pr.RefsRemoved) != 1 || pr.RefsRemoved[0].Ref != other {
					t.Fatalf("round %d: the prune over the paused sync removed refs %v, want %s alone: it took no lock over, and the round tests nothing", round, pr.RefsRemoved, other)
				}
				// It saw X's objects as the sync's own, which no prune
				// lists again within the grace.
				if pr.Rewritten < len(r.only[x])+1 {
					t.Errorf("round %d: the prune counts %d objects rewritten; want X's version.json and its %d data files at least", round, pr.Rewritten, len(r.only[x]))
				}

				// 5. A's held ref write lands.
				a.resumeAndWait(t)
				featFile := strings.TrimSpace(readObject(t, sinkAddr, feat))
				t.Logf("round %d (%s): A stopped at %s, exited %d; the prune removed %d versions, %d data files, held %d; feat in the mirror: %q",
					round, how, a.pause.Request, a.code, len(pr.VersionsRemoved), len(pr.DataFilesRemoved), pr.Candidates, idTail(featFile))
				if !strings.Contains(a.out.String(), `"claimed"`) {
					t.Errorf("round %d: the paused sync's report claims nothing:\n%s", round, tail(a.out.String(), 20))
				}
				if featFile != x {
					t.Errorf("round %d: feat in the mirror is %q, want X %s: the held ref write did not land, and the round tests nothing", round, featFile, x)
				}
				var missing []string
				for _, f := range append([]string{repo.VersionFile(x, repo.RecordFile)}, r.only[x]...) {
					if readObject(t, sinkAddr, f) == "" {
						missing = append(missing, f)
					}
				}
				if len(missing) > 0 {
					t.Errorf("round %d: feat names X, and the prune removed %d of its objects: %v\nthe prune removed versions %v, data files %v",
						round, len(missing), missing, pr.VersionsRemoved, pr.DataFilesRemoved)
				}
				verifyArgs := []string{"verify", sinkAddr}
				if round == 0 {
					verifyArgs = []string{"verify", "--deep", sinkAddr}
				}
				if res := run(t, verifyArgs...); res.code != 0 {
					t.Errorf("round %d: %s: exit %d\n%s%s", round, strings.Join(verifyArgs[:len(verifyArgs)-1], " "), res.code, res.stdout, res.stderr)
				}
				if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Errorf("round %d: the next plain sync: exit %d\n%s", round, res.code, tail(res.stdout+res.stderr, 12))
				}
				if res := run(t, "verify", sinkAddr); res.code != 0 {
					t.Errorf("round %d: verify after the next sync: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}
			}
		})
	}
}
