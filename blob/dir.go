package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// headerLen is the size of the header at the start of every file Dir writes: the content type,
// a newline and zero padding. Keeping it in the object's own file makes the rename that publishes
// an object publish its type with it (a sidecar file would be a second write that can be half
// done), and a fixed size lets Stat and listings compute the object's size from the file's.
const headerLen = MaxContentTypeLen + 56

// tmpDir is where Dir writes objects before renaming them into place: inside the root, so the
// rename stays on one file system, and named so no key can reach it (keys' segments never start
// with '.').
const tmpDir = ".tmp"

// Dir is a Store in a directory on local disk: each object is one file, its path the key.
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// OpenDir opens, creating it if need be, the directory root as a Store. Temporary files that a
// crash left behind are removed.
func OpenDir(root string) (*Dir, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open blob dir %s: %w", root, err)
	}
	// Nothing is mid-write while the store is being opened, so whatever is in tmpDir is debris.
	if err := os.RemoveAll(filepath.Join(root, tmpDir)); err != nil {
		return nil, fmt.Errorf("open blob dir %s: clear temporary files: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(root, tmpDir), 0o750); err != nil {
		return nil, fmt.Errorf("open blob dir %s: %w", root, err)
	}
	return &Dir{root: root}, nil
}

// path returns the file of key, which ValidateKey keeps inside the root.
func (d *Dir) path(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

// Put writes the object to a temporary file, syncs it and renames it into place, so a reader or
// a crash sees the whole object or none.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := validateContentType(contentType); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Join(d.root, tmpDir), "put-")
	if err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	published := false
	defer func() {
		if !published {
			_ = tmp.Close()           // it may be closed already; the write failed either way
			_ = os.Remove(tmp.Name()) // nothing half-written stays behind
		}
	}()
	header := make([]byte, headerLen)
	copy(header, contentType+"\n")
	if _, err := tmp.Write(header); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	n, err := io.Copy(tmp, ctxReader{ctx, r})
	if err != nil {
		return Info{}, fmt.Errorf("put %s after %d bytes: %w", key, n, err)
	}
	if size >= 0 && n != size {
		return Info{}, fmt.Errorf("put %s: read %d bytes, expected %d", key, n, size)
	}
	if err := tmp.Sync(); err != nil { // the data is on disk before its name is
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	dst := d.path(key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	published = true
	// The rename is durable once its directory is synced: a send may reference the object as
	// soon as Put returns, and must not find it gone after a crash.
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	info, err := os.Stat(dst)
	if err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	return Info{Key: key, Size: n, ContentType: contentType, Modified: info.ModTime()}, nil
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close() // read-only: its Sync is what matters
	return d.Sync()
}

// Get opens the object's file past its header.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	f, info, err := d.open(key)
	if err != nil {
		return nil, Info{}, fmt.Errorf("get %s: %w", key, err)
	}
	return dirObject{ctxReader{ctx, f}, f}, info, nil
}

// dirObject reads an object's file and closes it.
type dirObject struct {
	io.Reader
	io.Closer
}

// Stat reads the object's header.
func (d *Dir) Stat(_ context.Context, key string) (Info, error) {
	f, info, err := d.open(key)
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	_ = f.Close() // only read from
	return info, nil
}

// open opens the object's file and reads its header, leaving the file at the object's first byte.
func (d *Dir) open(key string) (*os.File, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, ErrNotFound
	}
	if err != nil {
		return nil, Info{}, err
	}
	info, err := readHeader(f, key)
	if err != nil {
		_ = f.Close()
		return nil, Info{}, err
	}
	return f, info, nil
}

// readHeader reads the header of an object's file and describes the object.
func readHeader(f *os.File, key string) (Info, error) {
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	if !st.Mode().IsRegular() {
		return Info{}, ErrNotFound // a directory of longer keys is no object
	}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(f, header); err != nil {
		return Info{}, fmt.Errorf("read header of %s: %w", key, err)
	}
	ct, _, ok := bytes.Cut(header, []byte("\n"))
	if !ok {
		return Info{}, fmt.Errorf("read header of %s: no content type", key)
	}
	return Info{Key: key, Size: st.Size() - headerLen, ContentType: string(ct), Modified: st.ModTime()}, nil
}

// Delete removes the object's file.
func (d *Dir) Delete(_ context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// ListOlder walks the directory that holds every key with the prefix.
func (d *Dir) ListOlder(ctx context.Context, prefix string, before time.Time) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		if err := validatePrefix(prefix, true); err != nil {
			yield(Info{}, fmt.Errorf("list %s: %w", prefix, err))
			return
		}
		// The prefix may end inside a segment ("uploads/ab" lists "uploads/abc"): walk its
		// directory part and match the rest.
		start := d.root
		if i := strings.LastIndex(prefix, "/"); i >= 0 {
			start = d.path(prefix[:i])
		}
		stopped := errors.New("stopped")
		err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && p == start {
					return fs.SkipAll // nothing stored under the prefix yet
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rel, _ := filepath.Rel(d.root, p) // p is under the root: WalkDir started there
			key := filepath.ToSlash(rel)
			if e.IsDir() {
				if key == tmpDir {
					return fs.SkipDir
				}
				return nil
			}
			if !strings.HasPrefix(key, prefix) {
				return nil
			}
			st, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listed
			}
			if err != nil {
				return err
			}
			if !st.ModTime().Before(before) {
				return nil
			}
			if !yield(Info{Key: key, Size: st.Size() - headerLen, Modified: st.ModTime()}, nil) {
				return stopped
			}
			return nil
		})
		if err != nil && !errors.Is(err, stopped) {
			yield(Info{}, fmt.Errorf("list %s: %w", prefix, err))
		}
	}
}
