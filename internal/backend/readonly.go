package backend

import (
	"context"
	"fmt"
	"io"
)

// ReadOnly wraps a store so that every write fails with ErrNotSupported:
// what a dry run is given as its sink, so that a write it should not make
// is an error, never a change to the mirror. It forwards no Copier (a
// server-side copy is a write too); Unwrap still reaches the store.
func ReadOnly(r Reader) Backend { return readOnly{r} }

type readOnly struct{ Reader }

func (r readOnly) Put(_ context.Context, name string, _ io.Reader, _ int64) error {
	return fmt.Errorf("%s: read-only (dry run): refusing to write %s: %w", r.Location(), name, ErrNotSupported)
}

func (r readOnly) Create(_ context.Context, name string, _ io.Reader, _ int64) error {
	return fmt.Errorf("%s: read-only (dry run): refusing to write %s: %w", r.Location(), name, ErrNotSupported)
}

func (r readOnly) Remove(_ context.Context, name string) error {
	return fmt.Errorf("%s: read-only (dry run): refusing to remove %s: %w", r.Location(), name, ErrNotSupported)
}

func (r readOnly) Properties() Properties {
	p := r.Reader.Properties()
	// No ConditionalWrite: ConditionalOf then finds no way past this
	// wrapper to the store's conditional writes.
	p.CanWrite, p.AtomicCreate, p.ConditionalWrite = false, false, false
	return p
}

// CanCopyFrom is false: As[Copier] finds this wrapper before the store
// underneath, so a server-side copy is never tried through it.
func (r readOnly) CanCopyFrom(Reader) bool { return false }

func (r readOnly) CopyFrom(_ context.Context, _ Reader, _, dstName string, _ int64) (bool, error) {
	return false, fmt.Errorf("%s: read-only (dry run): refusing to write %s: %w", r.Location(), dstName, ErrNotSupported)
}

func (r readOnly) Unwrap() Reader { return r.Reader }

// Empty is a store that holds nothing, at location: a dry run's view of a
// local mirror that does not exist yet, which the dry run must not make.
func Empty(location string) Reader { return empty(location) }

type empty string

func (e empty) Open(_ context.Context, name string) (io.ReadCloser, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: open %s: %w", string(e), name, ErrNotExist)
}

func (e empty) Stat(_ context.Context, name string) (FileInfo, error) {
	if err := CheckName(name); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{}, fmt.Errorf("%s: stat %s: %w", string(e), name, ErrNotExist)
}

func (e empty) List(_ context.Context, prefix string, _ func(FileInfo) error) error {
	return CheckPrefix(prefix)
}

func (e empty) Properties() Properties { return Properties{CanList: true} }
func (e empty) Location() string       { return string(e) }
