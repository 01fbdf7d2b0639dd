package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
)

// The spool keeps the events a stopping daemon could not send, for the
// next start to send. It is one small JSON file, written whole (a temporary
// file renamed over it) and read and removed at start. It names each
// receiver by the SHA-256 of its URL, never the URL (which may hold a
// credential) nor its secret: an event goes again to the configured
// receiver of that URL, signed with the secret configured then, and is
// dropped if no receiver has that URL any more.
//
// Bounds: at most MaxSpoolEvents events and MaxSpoolBytes of them; more
// are dropped and counted. At start, an event queued more than
// MaxSpoolAge ago is dropped: a receiver is told of a ref move at most a
// day late, or not at all.
const (
	MaxSpoolEvents = 1000
	MaxSpoolBytes  = 8 << 20
	MaxSpoolAge    = 24 * time.Hour
)

type spooled struct {
	Receiver string    `json:"receiver"` // hex SHA-256 of the URL
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	Queued   time.Time `json:"queued"`
	Body     []byte    `json:"body"`
	target   config.NotifyTarget
}

func receiverKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:])
}

func spoolEntry(d delivery) spooled {
	return spooled{Receiver: receiverKey(d.target.URL), ID: d.id, Type: d.event, Queued: d.queued, Body: d.body, target: d.target}
}

// saveSpool writes what is left at a stop to the spool, within its
// bounds; without a spool, it is dropped.
func (n *Notifier) saveSpool(left []spooled) {
	if len(left) == 0 {
		return
	}
	if n.opts.SpoolFile == "" {
		for _, e := range left {
			n.drop(e.target, 1)
		}
		n.log.Warn("notifications still queued at exit are dropped (no notify_spool)", zap.Int("events", len(left)))
		return
	}
	var keep []spooled
	size := 0
	for _, e := range left {
		if len(keep) >= MaxSpoolEvents || size+len(e.Body) > MaxSpoolBytes {
			n.drop(e.target, 1)
			continue
		}
		keep = append(keep, e)
		size += len(e.Body)
	}
	if err := writeSpool(n.opts.SpoolFile, keep); err != nil {
		for _, e := range keep {
			n.drop(e.target, 1)
		}
		n.log.Error("notifications not spooled; dropped", zap.String("spool", n.opts.SpoolFile), zap.Int("events", len(keep)), zap.Error(err))
		return
	}
	n.log.Info("notifications still queued at exit spooled, to be sent at the next start",
		zap.String("spool", n.opts.SpoolFile), zap.Int("events", len(keep)), zap.Int("dropped", len(left)-len(keep)))
}

func writeSpool(path string, entries []spooled) error {
	raw, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".notify-spool-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// LoadSpool queues the events a previous stop spooled, for the receivers
// of targets with the same URL, and removes the spool. It returns how
// many it queued.
func (n *Notifier) LoadSpool(targets []config.NotifyTarget) int {
	if n == nil || n.opts.SpoolFile == "" {
		return 0
	}
	entries, err := readSpool(n.opts.SpoolFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	// Read or not, it is not read twice: a spool that cannot be parsed
	// must not stop every later start.
	os.Remove(n.opts.SpoolFile)
	if err != nil {
		n.log.Error("notification spool unreadable; removed", zap.String("spool", n.opts.SpoolFile), zap.Error(err))
		return 0
	}
	byKey := map[string]config.NotifyTarget{}
	for _, t := range targets {
		byKey[receiverKey(t.URL)] = t
	}
	queued, stale, gone := 0, 0, 0
	now := time.Now()
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	for _, e := range entries {
		t, ok := byKey[e.Receiver]
		switch {
		case closed:
			return queued
		case !ok:
			gone++
		case now.Sub(e.Queued) > MaxSpoolAge:
			n.drop(t, 1)
			stale++
		default:
			n.enqueue(delivery{target: t, body: e.Body, event: e.Type, id: e.ID, queued: e.Queued}, "(spool)")
			queued++
		}
	}
	n.log.Info("notifications spooled at the last stop queued again", zap.String("spool", n.opts.SpoolFile),
		zap.Int("queued", queued), zap.Int("too_old", stale), zap.Int("receiver_gone", gone))
	return queued
}

func readSpool(path string) ([]spooled, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The JSON of MaxSpoolBytes of bodies, base64, with room for the rest.
	limit := int64(MaxSpoolBytes*4/3 + MaxSpoolEvents*512)
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	var entries []spooled
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(entries) > MaxSpoolEvents {
		entries = entries[:MaxSpoolEvents]
	}
	return entries, nil
}
