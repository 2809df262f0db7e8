package attach_test

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/storage"
)

// newTestService is a service with a fixed clock and no record store: enough for what does not
// touch records (links, limits, names, keys).
func newTestService(t *testing.T, now time.Time) *attach.Service {
	t.Helper()
	dir, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := attach.New(attach.Config{LinkSecret: bytes.Repeat([]byte("k"), 32)}, nil, dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	s.SetNow(func() time.Time { return now })
	return s
}

// TestSignedLinks: a link verifies for its user until it expires; another user, another file,
// the thumbnail's signature on the file, a later expiry or a missing part are refused.
func TestSignedLinks(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := newTestService(t, now)
	u := storage.Upload{ID: "f1", ThumbnailKey: "files/1/f1.thumb"}
	l := s.Link(u, "bob")
	if !l.ExpiresAt.Equal(now.Add(attach.DefaultLinkTTL)) || l.Thumbnail == "" {
		t.Fatalf("link %+v", l)
	}
	query := func(raw string) url.Values {
		t.Helper()
		p, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return p.Query()
	}
	if who, err := s.VerifyLink("f1", false, query(l.URL)); err != nil || who != "bob" {
		t.Fatalf("the link verifies as %q, %v", who, err)
	}
	if who, err := s.VerifyLink("f1", true, query(l.Thumbnail)); err != nil || who != "bob" {
		t.Fatalf("the thumbnail's link verifies as %q, %v", who, err)
	}
	forge := func(change func(q url.Values)) url.Values {
		q := query(l.URL)
		change(q)
		return q
	}
	for name, tc := range map[string]struct {
		id    string
		thumb bool
		q     url.Values
	}{
		"another user":           {"f1", false, forge(func(q url.Values) { q.Set("u", "carol") })},
		"another file":           {"f2", false, query(l.URL)},
		"the thumbnail's sig":    {"f1", false, query(l.Thumbnail)},
		"a later expiry":         {"f1", false, forge(func(q url.Values) { q.Set("exp", "99999999999") })},
		"no signature":           {"f1", false, forge(func(q url.Values) { q.Del("sig") })},
		"an expiry not a number": {"f1", false, forge(func(q url.Values) { q.Set("exp", "soon") })},
	} {
		if _, err := s.VerifyLink(tc.id, tc.thumb, tc.q); !errors.Is(err, attach.ErrBadLink) {
			t.Errorf("%s: %v; want attach.ErrBadLink", name, err)
		}
	}
	s.SetNow(func() time.Time { return now.Add(attach.DefaultLinkTTL) })
	if _, err := s.VerifyLink("f1", false, query(l.URL)); !errors.Is(err, attach.ErrBadLink) {
		t.Fatalf("an expired link: %v; want attach.ErrBadLink", err)
	}
}

// TestHourlyLimits: uploads and bytes are counted per user per hour; a failed upload gives its
// bytes back; the next hour starts afresh, and the refusal says when.
func TestHourlyLimits(t *testing.T) {
	h := attach.NewHourlyLimits(3, 100)
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	settle, err := h.Reserve("alice", 60, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reserve("alice", 60, t0.Add(time.Minute)); err == nil {
		t.Fatal("160 bytes in an hour passed a limit of 100")
	}
	settle(0) // the first upload failed: its 60 bytes come back
	if _, err := h.Reserve("alice", 60, t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("after a failed upload gave its bytes back: %v", err)
	}
	if _, err := h.Reserve("bob", 100, t0); err != nil {
		t.Fatalf("bob has a limit of his own: %v", err)
	}
	if _, err := h.Reserve("alice", 1, t0.Add(3*time.Minute)); err != nil {
		t.Fatalf("alice's third upload: %v", err)
	}
	_, err = h.Reserve("alice", 1, t0.Add(3*time.Minute))
	var limited *attach.RateLimitedError
	if !errors.As(err, &limited) || limited.What != "uploads" || limited.RetryAfter != 57*time.Minute {
		t.Fatalf("a fourth upload: %v; want too many uploads, retry in 57m", err)
	}
	if _, err := h.Reserve("alice", 100, t0.Add(time.Hour)); err != nil {
		t.Fatalf("the next hour: %v", err)
	}
}

// TestLimitedReader: a file of exactly the limit passes; one byte more fails with ErrTooLarge.
func TestLimitedReader(t *testing.T) {
	for size, want := range map[int]error{10: nil, 11: attach.ErrTooLarge} {
		l := attach.NewLimitedReader(strings.NewReader(strings.Repeat("x", size)), 10)
		n, err := io.Copy(io.Discard, l)
		if !errors.Is(err, want) || (want == nil && n != 10) {
			t.Errorf("%d bytes under a limit of 10: %d read, %v; want %v", size, n, err, want)
		}
	}
}

// TestCleanName: names are shown, never used as paths.
func TestCleanName(t *testing.T) {
	for name, ok := range map[string]bool{
		" beach.jpg ": true, "résumé.pdf": true, "": false, "  ": false, "a/b.txt": false, `a\b.txt`: false,
		"a\nb": false, strings.Repeat("x", 256): false, "\xff.txt": false,
	} {
		if _, err := attach.CleanName(name); (err == nil) != ok {
			t.Errorf("CleanName(%q) = %v; want ok %v", name, err, ok)
		}
	}
}

// TestKeysBySlot: an upload's objects sit under its time slot, and a key names its upload.
func TestKeysBySlot(t *testing.T) {
	s := newTestService(t, time.Time{})
	at := time.Unix(1_796_531_662, 0)
	key := s.KeyOf("f1", at)
	if key != "files/1796531640/f1" || attach.UploadIDOfKey(key+attach.ThumbSuffix) != "f1" {
		t.Fatalf("key %q", key)
	}
	if err := blob.ValidateKey(key + attach.ThumbSuffix); err != nil {
		t.Fatal(err)
	}
}
