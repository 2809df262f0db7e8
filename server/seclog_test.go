package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv/logtest"
)

var testSecret = []byte("server-test-secret-server-test-secret!")

// noUsers is a store with no accounts (dev mode: every valid token is of an unknown account).
type noUsers struct{}

func (noUsers) EnsureUser(context.Context, storage.User) (storage.User, error) {
	return storage.User{}, storage.ErrDeleted
}
func (noUsers) User(context.Context, string) (storage.User, error) {
	return storage.User{}, storage.ErrNotFound
}
func (noUsers) ReviveUser(context.Context, storage.User) (storage.User, error) {
	return storage.User{}, storage.ErrNotFound
}
func (noUsers) RevokeTokens(context.Context, string, time.Time) (time.Time, error) {
	return time.Time{}, nil
}

// checkServer is a Server with just what check needs, logging to buf with a clock the test moves.
func checkServer(t *testing.T, buf *logtest.Buffer, now *time.Time) *Server {
	t.Helper()
	a, err := auth.New(auth.Config{Secret: testSecret, DevMode: true})
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(buf)
	s := &Server{auth: a, users: noUsers{}, log: log, seclog: newSecurityLog(log), accounts: newAccountCache()}
	s.seclog.now = func() time.Time { return *now }
	return s
}

// TestSecurityLogIsRateLimitedAndHoldsNoToken floods check with refused tokens: each kind writes at
// most securityLogPerSecond lines a second, the next line counts what was dropped, and no line
// holds a token.
func TestSecurityLogIsRateLimitedAndHoldsNoToken(t *testing.T) {
	var buf logtest.Buffer
	now := time.Unix(1_800_000_000, 0)
	s := checkServer(t, &buf, &now)
	forged, _ := auth.Sign([]byte("another-secret-another-secret-another!"), "mallory", now.Add(time.Hour))
	valid, _ := auth.Sign(testSecret, "ghost", time.Now().Add(time.Hour)) // a valid token of no account
	request := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/badge", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	const flood = 200
	for range flood {
		if _, refused := s.check(request(forged)); refused != errNoToken {
			t.Fatalf("forged token: %v", refused)
		}
	}
	if _, refused := s.check(request(valid)); refused != errNoAccount {
		t.Fatalf("token of no account: %v", refused)
	}
	lines := buf.Lines(t, "")
	byKind := map[string]int{}
	for _, l := range lines {
		byKind[l["event"].(string)]++
		if l["remote"] != "203.0.113.7:4711" || l["level"] != "warn" {
			t.Fatalf("line without the remote address at warn: %v", l)
		}
	}
	if byKind[eventToken] != securityLogPerSecond || byKind[eventAccount] != 1 {
		t.Fatalf("lines by kind after %d refused tokens and one refused account: %v; want %d and 1 (a flood of one kind must not silence another)",
			flood, byKind, securityLogPerSecond)
	}
	if out := buf.String(); strings.Contains(out, forged) || strings.Contains(out, valid) ||
		strings.Contains(out, strings.Split(forged, ".")[2]) || strings.Contains(out, strings.Split(valid, ".")[1]) {
		t.Fatalf("the log holds a token or part of one:\n%s", out)
	}

	now = now.Add(time.Second)
	s.check(request(forged))
	lines = buf.Lines(t, "")
	last := lines[len(lines)-1]
	if got, want := last["suppressed"], float64(flood-securityLogPerSecond); got != want {
		t.Fatalf("the first line a second later says suppressed=%v; want %v: %v", got, want, last)
	}
	if !strings.Contains(last["reason"].(string), "signature") {
		t.Fatalf("the line does not say why the token was refused: %v", last)
	}
}

// TestTokenFromSubprotocol: the browser's subprotocol carries the token; the header wins over
// it, and it over the query parameter.
func TestTokenFromSubprotocol(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/ws?token=from-query", nil)
	if got := requestToken(r); got != "from-query" {
		t.Fatalf("query only: %q", got)
	}
	r.Header.Add("Sec-WebSocket-Protocol", "chatd, chatd.token.aaa.bbb.ccc")
	if got := requestToken(r); got != "aaa.bbb.ccc" {
		t.Fatalf("subprotocol: %q", got)
	}
	r.Header.Set("Authorization", "Bearer from-header")
	if got := requestToken(r); got != "from-header" {
		t.Fatalf("header: %q", got)
	}
}

// TestCheckOrigin mirrors the cases of coder/websocket's own check, which runs again in Accept.
func TestCheckOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, host string
		patterns     []string
		ok           bool
	}{
		{"", "chat.example", nil, true},
		{"https://chat.example", "chat.example", nil, true},
		{"https://CHAT.example", "chat.example", nil, true},
		{"https://evil.example", "chat.example", nil, false},
		{"null", "chat.example", nil, false},
		{"https://app.example", "chat.example", []string{"*.example"}, true},
		{"https://app.example", "chat.example", []string{"https://app.example"}, true},
		{"http://app.example", "chat.example", []string{"https://app.example"}, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/ws", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if err := checkOrigin(r, tc.patterns); (err == nil) != tc.ok {
			t.Errorf("origin %q host %q patterns %v: %v; want ok=%v", tc.origin, tc.host, tc.patterns, err, tc.ok)
		}
	}
}
