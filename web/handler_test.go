package web_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/chatd/chatd/web"
)

func get(t *testing.T, h http.Handler, path string, header map[string]string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = "chat.example:8080"
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// TestPageHeaders: the page and its assets come with a CSP that allows no inline code and
// connects only to its own server, no framing, nosniff and no referrer; unknown paths are 404.
func TestPageHeaders(t *testing.T) {
	h := web.Handler()
	for _, path := range []string{"/", "/index.html", "/app.js", "/style.css", "/no-such-file"} {
		resp := get(t, h, path, nil)
		want := http.StatusOK
		if path == "/no-such-file" {
			want = http.StatusNotFound
		}
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d; want %d", path, resp.StatusCode, want)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, must := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'",
			"connect-src 'self' ws://chat.example:8080 wss://chat.example:8080", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, must) {
				t.Errorf("GET %s: CSP %q lacks %q", path, csp, must)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("GET %s: CSP %q allows unsafe code", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
	}
	if ct := get(t, h, "/app.js", nil).Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("app.js served as %q", ct)
	}
}

// TestPageHasNoInlineCode: the CSP would block it, so the page must not need it.
func TestPageHasNoInlineCode(t *testing.T) {
	html, err := fs.ReadFile(web.Files(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for what, re := range map[string]*regexp.Regexp{
		"inline script":      regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`),
		"script without src": regexp.MustCompile(`(?i)<script(?:(?:\s(?:type|defer|async)(?:="[^"]*")?)*)\s*>`),
		"style element":      regexp.MustCompile(`(?i)<style`),
		"style attribute":    regexp.MustCompile(`(?i)\sstyle\s*=`),
		"event attribute":    regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		"javascript: URL":    regexp.MustCompile(`(?i)javascript:`),
	} {
		if m := re.Find(html); m != nil {
			t.Errorf("index.html has an %s: %q", what, m)
		}
	}
}

// TestAssetsCompressedAndValidated: gzip when accepted (the same bytes once decoded), an ETag per
// variant that makes a revalidation a 304, Last-Modified.
func TestAssetsCompressedAndValidated(t *testing.T) {
	h := web.Handler()
	plain := get(t, h, "/app.js", nil)
	plainBody, _ := io.ReadAll(plain.Body)
	if plain.Header.Get("Content-Encoding") != "" || plain.Header.Get("ETag") == "" || plain.Header.Get("Last-Modified") == "" {
		t.Fatalf("plain app.js headers: %v", plain.Header)
	}
	zipped := get(t, h, "/app.js", map[string]string{"Accept-Encoding": "br, gzip;q=0.8"})
	if zipped.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(zipped.Header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("app.js with gzip accepted: headers %v", zipped.Header)
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, _ := io.ReadAll(zr)
	if !bytes.Equal(unzipped, plainBody) || len(plainBody) == 0 {
		t.Fatalf("gzipped app.js decodes to %d bytes; the plain one has %d", len(unzipped), len(plainBody))
	}
	if zipped.Header.Get("ETag") == plain.Header.Get("ETag") {
		t.Fatal("the gzipped and plain variants share an ETag")
	}
	if refused := get(t, h, "/app.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); refused.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzip sent although refused with q=0")
	}
	for _, v := range []struct {
		etag, enc string
	}{{plain.Header.Get("ETag"), ""}, {zipped.Header.Get("ETag"), "gzip"}} {
		again := get(t, h, "/app.js", map[string]string{"If-None-Match": v.etag, "Accept-Encoding": v.enc})
		if again.StatusCode != http.StatusNotModified {
			t.Fatalf("revalidation with ETag %s: %d; want 304", v.etag, again.StatusCode)
		}
	}
	if again := get(t, h, "/app.js", map[string]string{"If-None-Match": `"stale"`}); again.StatusCode != http.StatusOK {
		t.Fatalf("revalidation with a stale ETag: %d; want 200", again.StatusCode)
	}
}
