package daemon

import (
	"strings"
	"time"

	"go.uber.org/zap"

	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A scrub is a run of a mirror with the repair's check (sync --repair):
// a plain sync trusts what it published before, as git and restic do, so
// a data file lost out of band (a disk, a lifecycle rule, a hand) stays
// lost until a repair copies it back. A mirror's `scrub` schedule makes
// the daemon run one on its own. It is a run like any other: it takes
// the mirror's place in d.running, so it never runs beside a sync of the
// mirror in this daemon, and the sink's lock, so never beside one of
// another replica or a manual sync. Every run of a mirror with
// `repair: true` makes the same check, and counts as a scrub too.

// scrubTick runs a scrub of the mirror now, or after the run going. A
// scrub that finds the sink locked (another replica, a manual sync) stays
// due, and the mirror's next run is one.
func (d *Daemon) scrubTick(gen int, name string) {
	m, ok := d.lockLive(gen, name)
	if !ok {
		return
	}
	if d.scrubDue == nil {
		d.scrubDue = map[string]bool{}
	}
	d.scrubDue[name] = true
	if d.running[name] {
		if d.queued == nil {
			d.queued = map[string]bool{}
		}
		d.queued[name] = true
		d.mu.Unlock()
		d.log.Info("scrub due while a run goes on; it runs after it", zap.String("mirror", name))
		return
	}
	d.running[name] = true
	d.runs.Add(1)
	d.mu.Unlock()
	d.runThenQueued(m)
}

// takeScrub says whether the mirror's next run is a scrub, and clears it.
func (d *Daemon) takeScrub(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	due := d.scrubDue[name]
	delete(d.scrubDue, name)
	return due
}

// scrubAgain keeps a scrub due that did not get to check the mirror
// because another run held the sink's lock.
func (d *Daemon) scrubAgain(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return
	}
	if _, ok := d.cfg.Mirror(name); !ok {
		return
	}
	if d.scrubDue == nil {
		d.scrubDue = map[string]bool{}
	}
	d.scrubDue[name] = true
}

// ScrubStatus is a mirror's last scrub, on the status page and in
// /status.json.
type ScrubStatus struct {
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Result is success (every data file of every complete version was
	// checked, and each one missing copied back), refused (some could not
	// be checked or copied back: see the run's refusals), or the run's
	// own result when it did not get to the end (failed, canceled,
	// locked).
	Result string `json:"result"`
	// FilesMissing counts the data files found missing or of another size
	// than their catalog records; FilesRestored those copied back.
	FilesMissing  int `json:"files_missing"`
	FilesRestored int `json:"files_restored"`
}

// repairPrefix starts every refusal internal/sync's repair makes.
const repairPrefix = "repair: "

// scrubOutcome sums up what a run with the repair's check found, from its
// report and its result (one of the runs_total results).
func scrubOutcome(rep *fdlsync.Report, result string, start, end time.Time) ScrubStatus {
	s := ScrubStatus{Started: start, Ended: end, Result: result}
	if rep == nil {
		return s
	}
	// Found missing: what the repair copied back and what it could not;
	// the report counts both, so no message is parsed for them.
	s.FilesRestored = len(rep.Repaired)
	s.FilesMissing = s.FilesRestored + len(rep.Unrepaired)
	checkFailed := len(rep.Unrepaired) > 0
	for _, r := range rep.Refused {
		// The repair's other refusals are of a check it could not make
		// (a catalog of the mirror's unreadable, a file not asked).
		if strings.HasPrefix(r.Message, repairPrefix) {
			checkFailed = true
		}
	}
	if result == ResultSuccess || result == ResultRefused {
		// A refusal of the sync's own (a new version upstream) does not
		// make the scrub fail: the check went to the end.
		s.Result = ResultSuccess
		if checkFailed {
			s.Result = ResultRefused
		}
	}
	return s
}
