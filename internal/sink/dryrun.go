package sink

import (
	"context"
	"io"
	"strings"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// planned is a dry run's store, as restic's dry-run backend is: every
// read goes to the store underneath, and every write or removal is told
// to plan (the mirror's own files under .fdl-mirror/ are not part of the
// plan) and reported done, without a byte reaching the store. The sink's
// typed operations then run as in a real run, with no branch of their
// own. It says it has no conditional writes, so that backend.ConditionalOf
// finds none past it (a write conditional on a version token is a Put
// here, as on backend.ReadOnly), and is its own Copier, so that As[Copier]
// finds it before the store.
//
// It says it cannot write (Properties().CanWrite), so that the state
// files' writers in internal/sink/lock, which write a local folder
// through its path, find no folder past it: a state file written here
// is planned like any write (lock.writableFolder).
type planned struct {
	backend.Backend
	plan func(name string)
}

func (p planned) note(name string) {
	if !strings.HasPrefix(name, backend.ReservedPrefix) {
		p.plan(name)
	}
}

func (p planned) Put(_ context.Context, name string, _ io.Reader, _ int64) error {
	p.note(name)
	return nil
}

func (p planned) Create(_ context.Context, name string, _ io.Reader, _ int64) error {
	p.note(name)
	return nil
}

func (p planned) Remove(_ context.Context, name string) error {
	p.note(name)
	return nil
}

// Properties: no conditional writes, so that a write conditional on a
// version token is a plain Put here; no writes, so that nothing reaches
// past it to a local folder.
func (p planned) Properties() backend.Properties {
	props := p.Backend.Properties()
	props.CanWrite, props.ConditionalWrite = false, false
	return props
}

// CanCopyFrom answers as the store would; CopyFrom plans the copy.
func (p planned) CanCopyFrom(src backend.Reader) bool {
	c, ok := backend.As[backend.Copier](p.Backend)
	return ok && c.CanCopyFrom(src)
}

func (p planned) CopyFrom(_ context.Context, _ backend.Reader, _, dstName string, _ int64) (bool, error) {
	p.note(dstName)
	return true, nil
}

func (p planned) Unwrap() backend.Reader { return p.Backend }
