// Package web holds the bundled demo page: plain HTML, CSS and JavaScript embedded in the binary,
// with no build step and no CDN, and the handler that serves it with its security headers,
// compressed when the browser accepts it, and with validators so a reload costs a 304.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Files is the page's file tree, rooted at index.html.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time; this cannot fail at run time
	}
	return sub
}

// Headers of every answer, each with its reason.
const (
	// cacheControl makes browsers revalidate every time: the file names carry no content hash,
	// so a cached app.js must not outlive a deploy; the ETag makes the check a 304.
	cacheControl = "no-cache"
	// minGzipBytes is the smallest file worth compressing: below it the gzip header and the
	// Vary costs more than it saves.
	minGzipBytes = 512
)

// csp is the page's Content-Security-Policy, with the WebSocket origins of the host filled in:
// no inline script or style, nothing from elsewhere, connections only to the page's own server
// (CSP 3 counts ws/wss of the same host as 'self'; older browsers need them named), no framing.
// The favicon is a data: URL. %[1]s is the request's host.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'%[1]s; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// hostPattern is what a Host may look like to be named in the CSP; anything else (a header the
// client made up) leaves the policy at 'self'.
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

// asset is one file, read once at start.
type asset struct {
	name        string
	contentType string
	plain       []byte
	gzipped     []byte // nil when not worth it
	etag        string // of the plain bytes; the gzipped variant's ends in -gz
}

// buildTime stands in for the embedded files' modification time, which embed does not keep:
// Last-Modified tells a browser the page changed no earlier than this process started.
var buildTime = time.Now().UTC().Truncate(time.Second)

// Handler serves the page's files, "/" being index.html; anything else is 404.
func Handler() http.Handler {
	assets, err := load(Files())
	if err != nil {
		panic(err) // the embedded tree is fixed at build time; this cannot fail at run time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		h := w.Header()
		h.Set("Content-Security-Policy", policy(r.Host))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY") // frame-ancestors for browsers that predate it
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.Set("Cache-Control", cacheControl)
		h.Set("Content-Type", a.contentType)
		body, etag := a.plain, a.etag
		if a.gzipped != nil {
			h.Add("Vary", "Accept-Encoding")
			if acceptsGzip(r) {
				body, etag = a.gzipped, strings.TrimSuffix(a.etag, `"`)+`-gz"`
				h.Set("Content-Encoding", "gzip")
			}
		}
		h.Set("ETag", etag)
		// ServeContent answers If-None-Match / If-Modified-Since with 304, and HEAD and ranges.
		http.ServeContent(w, r, a.name, buildTime, bytes.NewReader(body))
	})
}

func policy(host string) string {
	extra := ""
	if hostPattern.MatchString(host) {
		extra = " ws://" + host + " wss://" + host
	}
	return fmt.Sprintf(csp, extra)
}

// acceptsGzip reports whether the request's Accept-Encoding lists gzip without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
				return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
			}
		}
	}
	return false
}

// load reads every file of fsys, compresses those worth it and computes their ETags.
func load(fsys fs.FS) (map[string]*asset, error) {
	assets := make(map[string]*asset)
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		plain, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		sum := sha256.Sum256(plain)
		a := &asset{name: name, plain: plain,
			etag:        `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`,
			contentType: mime.TypeByExtension(path.Ext(name))}
		if a.contentType == "" {
			a.contentType = http.DetectContentType(plain)
		}
		if len(plain) >= minGzipBytes {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // the level is valid
			if _, err := zw.Write(plain); err != nil {
				return fmt.Errorf("compress %s: %w", name, err)
			}
			if err := zw.Close(); err != nil {
				return fmt.Errorf("compress %s: %w", name, err)
			}
			if buf.Len() < len(plain) {
				a.gzipped = buf.Bytes()
			}
		}
		assets[name] = a
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load the page's files: %w", err)
	}
	return assets, nil
}
