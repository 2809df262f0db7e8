package blob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/testenv"
)

// stores opens a fresh, empty store of each implementation for a test.
var stores = []struct {
	name string
	open func(t testing.TB) blob.Store
}{
	{"dir", func(t testing.TB) blob.Store { return openDir(t, t.TempDir()) }},
	{"s3", openS3},
}

func openDir(t testing.TB, root string) *blob.Dir {
	t.Helper()
	d, err := blob.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openS3 starts a real S3 server for the test (versitygw starts in well under a second) and
// opens a fresh bucket on it.
func openS3(t testing.TB) blob.Store {
	t.Helper()
	srv := testenv.StartS3(t)
	s, err := blob.OpenS3(ctxT(t), blob.S3Config{
		Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// TestOpenS3RefusesAMissingBucket: a misconfigured bucket shows when the store opens.
func TestOpenS3RefusesAMissingBucket(t *testing.T) {
	srv := testenv.StartS3(t)
	_, err := blob.OpenS3(ctxT(t), blob.S3Config{
		Endpoint: srv.Endpoint, Bucket: "no-such-bucket", Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	})
	if err == nil || !strings.Contains(err.Error(), "no such bucket") {
		t.Fatalf("open: %v, want no such bucket", err)
	}
	_, err = blob.OpenS3(ctxT(t), blob.S3Config{
		Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: "wrong",
	})
	if err == nil {
		t.Fatal("opened with a wrong secret")
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// forEachStore runs test against a fresh store of every implementation.
func forEachStore(t *testing.T, test func(t *testing.T, s blob.Store)) {
	for _, impl := range stores {
		t.Run(impl.name, func(t *testing.T) { test(t, impl.open(t)) })
	}
}

// payload is n bytes that say where they are, so a reordered or shifted copy does not match.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func put(t *testing.T, s blob.Store, key string, data []byte, ct string) blob.Info {
	t.Helper()
	info, err := s.Put(ctxT(t), key, bytes.NewReader(data), int64(len(data)), ct)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

func get(t *testing.T, s blob.Store, key string) ([]byte, blob.Info) {
	t.Helper()
	rc, info, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data, info
}

func checkMissing(t *testing.T, s blob.Store, key string) {
	t.Helper()
	if _, err := s.Stat(ctxT(t), key); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("stat %s: %v, want ErrNotFound", key, err)
	}
	if _, _, err := s.Get(ctxT(t), key); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("get %s: %v, want ErrNotFound", key, err)
	}
}

func TestPutGetStatDelete(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		data := payload(300_000)
		before := time.Now().Add(-time.Minute)
		info := put(t, s, "uploads/u1/f1", data, "image/png")
		if info.Key != "uploads/u1/f1" || info.Size != int64(len(data)) || info.ContentType != "image/png" || info.Modified.Before(before) {
			t.Fatalf("put returned %+v", info)
		}
		got, ginfo := get(t, s, "uploads/u1/f1")
		if !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes back, not the %d stored", len(got), len(data))
		}
		if ginfo.Size != info.Size || ginfo.ContentType != "image/png" {
			t.Fatalf("get says %+v, put said %+v", ginfo, info)
		}
		sinfo, err := s.Stat(ctxT(t), "uploads/u1/f1")
		if err != nil || sinfo.Size != info.Size || sinfo.ContentType != "image/png" {
			t.Fatalf("stat: %+v, %v", sinfo, err)
		}

		// A second Put under the key replaces the object whole.
		put(t, s, "uploads/u1/f1", []byte("short"), "text/plain; charset=utf-8")
		if got, info := get(t, s, "uploads/u1/f1"); string(got) != "short" || info.ContentType != "text/plain; charset=utf-8" {
			t.Fatalf("after replacing: %q, %+v", got, info)
		}

		if err := s.Delete(ctxT(t), "uploads/u1/f1"); err != nil {
			t.Fatal(err)
		}
		checkMissing(t, s, "uploads/u1/f1")
		if err := s.Delete(ctxT(t), "uploads/u1/f1"); err != nil {
			t.Fatalf("deleting again: %v", err)
		}
	})
}

func TestEmptyObject(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		put(t, s, "empty", nil, "application/octet-stream")
		if got, info := get(t, s, "empty"); len(got) != 0 || info.Size != 0 {
			t.Fatalf("empty object: %d bytes, %+v", len(got), info)
		}
	})
}

func TestInvalidKeysAreRefused(t *testing.T) {
	bad := []string{"", "/abs", "a//b", "a/", "../escape", "a/../../b", "./a", ".tmp/x", "a/.hidden", "a b", "a\\b", "ü", string(make([]byte, blob.MaxKeyLen+1))}
	forEachStore(t, func(t *testing.T, s blob.Store) {
		for _, key := range bad {
			if _, err := s.Put(ctxT(t), key, bytes.NewReader([]byte("x")), 1, "text/plain"); !errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("put %q: %v, want ErrInvalidKey", key, err)
			}
			if _, _, err := s.Get(ctxT(t), key); !errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("get %q: %v, want ErrInvalidKey", key, err)
			}
			if err := s.Delete(ctxT(t), key); !errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("delete %q: %v, want ErrInvalidKey", key, err)
			}
		}
		for _, prefix := range []string{"../", "/", "a//"} {
			for _, err := range s.ListOlder(ctxT(t), prefix, time.Now()) {
				if !errors.Is(err, blob.ErrInvalidKey) {
					t.Errorf("list %q: %v, want ErrInvalidKey", prefix, err)
				}
			}
		}
	})
}

// failingReader yields n bytes and then fails.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset by the uploader")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

// cancellingReader cancels its context after yielding n bytes, as a client that hangs up does.
type cancellingReader struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		c.cancel()
		time.Sleep(10 * time.Millisecond) // the cancellation reaches the request
		return 0, context.Canceled
	}
	n := min(len(p), c.n)
	c.n -= n
	return n, nil
}

func TestFailedPutLeavesNothing(t *testing.T) {
	const size = 1 << 20
	forEachStore(t, func(t *testing.T, s blob.Store) {
		cases := []struct {
			name string
			r    func(cancel context.CancelFunc) io.Reader
			size int64
		}{
			{"shorter than its size", func(context.CancelFunc) io.Reader { return bytes.NewReader(payload(size - 1)) }, size},
			{"longer than its size", func(context.CancelFunc) io.Reader { return bytes.NewReader(payload(size + 1)) }, size},
			{"reader fails", func(context.CancelFunc) io.Reader { return &failingReader{n: size / 2} }, size},
			{"reader fails, size unknown", func(context.CancelFunc) io.Reader { return &failingReader{n: size / 2} }, -1},
			{"context ends", func(cancel context.CancelFunc) io.Reader { return &cancellingReader{n: size / 2, cancel: cancel} }, size},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				key := fmt.Sprintf("failed/%d", i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if info, err := s.Put(ctx, key, c.r(cancel), c.size, "application/octet-stream"); err == nil {
					t.Fatalf("put succeeded: %+v", info)
				}
				checkMissing(t, s, key)
			})
		}
		if left := list(t, s, "", time.Now().Add(time.Hour)); left != nil {
			t.Fatalf("failed puts left %v", left)
		}
	})
}

func TestPutOfUnknownSize(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		data := payload(blob.S3PartSize + 12345) // more than one part
		if _, err := s.Put(ctxT(t), "unsized", bytes.NewReader(data), -1, "video/mp4"); err != nil {
			t.Fatal(err)
		}
		if got, info := get(t, s, "unsized"); !bytes.Equal(got, data) || info.Size != int64(len(data)) {
			t.Fatalf("got %d bytes (%+v), stored %d", len(got), info, len(data))
		}
	})
}

func list(t *testing.T, s blob.Store, prefix string, before time.Time) []string {
	t.Helper()
	var keys []string
	for info, err := range s.ListOlder(ctxT(t), prefix, before) {
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		if info.Size != 3 {
			t.Errorf("listed %+v, stored 3 bytes", info)
		}
		keys = append(keys, info.Key)
	}
	slices.Sort(keys)
	return keys
}

func TestListOlder(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		keys := []string{"pending/alice/1", "pending/alice/2", "pending/alicia/1", "pending/bob/1", "done/alice/1"}
		for _, k := range keys {
			put(t, s, k, []byte("abc"), "text/plain")
		}
		later := time.Now().Add(time.Hour)
		cases := []struct {
			prefix string
			want   []string
		}{
			{"pending/alice/", []string{"pending/alice/1", "pending/alice/2"}},
			{"pending/ali", []string{"pending/alice/1", "pending/alice/2", "pending/alicia/1"}},
			{"pending/", []string{"pending/alice/1", "pending/alice/2", "pending/alicia/1", "pending/bob/1"}},
			{"", []string{"done/alice/1", "pending/alice/1", "pending/alice/2", "pending/alicia/1", "pending/bob/1"}},
			{"nothing/", nil},
		}
		for _, c := range cases {
			if got := list(t, s, c.prefix, later); !slices.Equal(got, c.want) {
				t.Errorf("list %q: %v, want %v", c.prefix, got, c.want)
			}
		}
		// Everything was stored after an hour ago: nothing is older.
		if got := list(t, s, "pending/", time.Now().Add(-time.Hour)); got != nil {
			t.Errorf("listed %v as older than an hour", got)
		}
		// Breaking out of the loop ends the listing.
		n := 0
		for _, err := range s.ListOlder(ctxT(t), "pending/", later) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			break
		}
		if n != 1 {
			t.Fatalf("the loop ran %d times", n)
		}
	})
}

// TestDirStaysInsideItsRoot: whatever the key, Dir writes only under its root, leaves no
// temporary file behind a failed write, and a crash's leftovers go at the next open.
func TestDirStaysInsideItsRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "blobs")
	d := openDir(t, root)
	for _, key := range []string{"../escape", "a/../../escape"} {
		if _, err := d.Put(ctxT(t), key, bytes.NewReader([]byte("x")), 1, "text/plain"); err == nil {
			t.Fatalf("put %q succeeded", key)
		}
	}
	if _, err := d.Put(ctxT(t), "x", &failingReader{n: 10}, -1, "text/plain"); err == nil {
		t.Fatal("put of a failing reader succeeded")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 || entries[0].Name() != "blobs" {
		t.Fatalf("the root's parent holds %v", entries)
	}
	tmp, _ := os.ReadDir(filepath.Join(root, ".tmp"))
	if len(tmp) != 0 {
		t.Fatalf("temporary files left behind: %v", tmp)
	}
	if err := os.WriteFile(filepath.Join(root, ".tmp", "put-crashed"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	openDir(t, root)
	if tmp, _ := os.ReadDir(filepath.Join(root, ".tmp")); len(tmp) != 0 {
		t.Fatalf("a reopened store kept %v", tmp)
	}
}
