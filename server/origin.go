package server

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// maxLoggedOrigin bounds how much of a refused Origin header reaches the log.
const maxLoggedOrigin = 200

// checkOrigin is the Origin rule of websocket.Accept (coder/websocket's authenticateOrigin), run
// before the token is even looked at: no Origin (tools) passes; a browser's must be the request's
// own host or match one of patterns (path.Match, case-insensitive, against the origin's host, or
// against scheme://host for a pattern with "://"). Accept checks it again.
func checkOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	shown := origin // for the log: the header is the client's to choose, its length too
	if len(shown) > maxLoggedOrigin {
		shown = shown[:maxLoggedOrigin] + "..."
	}
	u, err := url.Parse(origin)
	if err != nil {
		return fmt.Errorf("origin %q is not a URL", shown)
	}
	if strings.EqualFold(r.Host, u.Host) {
		return nil
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return nil
		}
	}
	return fmt.Errorf("origin %q is not allowed for host %q", shown, r.Host)
}
