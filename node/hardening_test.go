package node_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/embedded"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file are the regressions of issue 12 (hardening): each failed on the code
// before its fix.

// hardeningSecret is the identity provider's secret of the production-mode nodes below.
var hardeningSecret = []byte("hardening-secret-hardening-secret-0123")

// adminSecret turns on the admin API of the nodes below.
const adminSecret = "admin-secret-admin-secret-admin-secret!"

// startProductionNode starts a node that trusts only hardeningSecret's tokens, with the admin API on.
func startProductionNode(t *testing.T, env testenv.Env, id string, tune func(*node.Config)) *testenv.Node {
	t.Helper()
	cfg := env.NodeConfig()
	cfg.NodeID = id
	cfg.Sequencer.Partitions = securityPartitions
	cfg.DevMode = false
	cfg.JWTSecret = hardeningSecret
	cfg.AdminSecret = []byte(adminSecret)
	if tune != nil {
		tune(&cfg)
	}
	return testenv.StartNode(t, cfg)
}

// idpToken is what the identity provider would hand userID: issued at iat, valid for an hour.
func idpToken(t *testing.T, userID string, iat time.Time) string {
	t.Helper()
	tok, err := auth.SignClaims(hardeningSecret, jwt.RegisteredClaims{Subject: userID,
		IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(iat.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// everyEndpoint calls each authenticated endpoint with token and returns the statuses by name.
// The DELETE comes last: if it were let through it would delete the account.
func everyEndpoint(t *testing.T, n *testenv.Node, token string) map[string]int {
	t.Helper()
	got := map[string]int{"GET /ws": dialOrStatus(t, n, token)}
	got["GET /api/badge"] = apiStatus(t, http.MethodGet, n.URL()+"/api/badge", token, "")
	got["POST /api/read"] = apiStatus(t, http.MethodPost, n.URL()+"/api/read", token, `{"conversationId":"c1","seq":1}`)
	got["POST /api/read?token="] = apiStatus(t, http.MethodPost, n.URL()+"/api/read?token="+url.QueryEscape(token), "", `{"conversationId":"c1","seq":1}`)
	got["DELETE /api/account"] = apiStatus(t, http.MethodDelete, n.URL()+"/api/account", token, "")
	return got
}

// dialOrStatus dials with token: 101 when a socket opened (and closes it), else the refusal's status.
func dialOrStatus(t *testing.T, n *testenv.Node, token string) int {
	t.Helper()
	c, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, nil)
	if err == nil {
		_ = c.Close()
		return http.StatusSwitchingProtocols
	}
	de, ok := err.(*client.DialError)
	if !ok {
		t.Fatalf("dial failed without an HTTP status: %v", err)
	}
	return de.Status
}

func wantAll(t *testing.T, what string, got map[string]int, want int) {
	t.Helper()
	for ep, status := range got {
		if status != want {
			t.Errorf("%s: %s answered %d; want %d (all: %v)", what, ep, status, want, got)
		}
	}
}

// TestHardeningConcurrentFirstConnections: 8 simultaneous upgrades of a user never seen before,
// with a production token, all connect (the account is created once; a duplicate key is "already
// created"). Before the fix 1 to 7 of 8 got 503.
func TestHardeningConcurrentFirstConnections(t *testing.T) {
	env := testenv.NewEnv(t)
	n := startProductionNode(t, env, "hardening", nil)
	const conns = 8
	for round := range 3 {
		user := fmt.Sprintf("newcomer-%d", round)
		token := idpToken(t, user, time.Now())
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		start := make(chan struct{})
		for range conns {
			wg.Go(func() {
				<-start
				c, err := client.Dial(ctxT(t, 20*time.Second), n.WSURL(), token, nil)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				if _, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypePing}); err != nil {
					errs <- fmt.Errorf("ping: %w", err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		var failed []string
		for err := range errs {
			failed = append(failed, err.Error())
		}
		if len(failed) > 0 {
			t.Fatalf("%s: %d of %d first connections failed: %s", user, len(failed), conns, strings.Join(failed, "; "))
		}
	}
}

// TestHardeningDeletedAccountIsRefusedEverywhere: after DELETE /api/account every endpoint answers
// 401 to the account's token (before the fix: badge 200, read 403, a second delete 204), in dev
// mode and in production, where the token must not create an empty account again.
func TestHardeningDeletedAccountIsRefusedEverywhere(t *testing.T) {
	t.Run("dev mode", func(t *testing.T) {
		n, _ := startSecurityNode(t, nil)
		token := login(t, n, "alice")
		alice := dialWith(t, n, token, nil)
		if got := apiStatus(t, http.MethodDelete, n.URL()+"/api/account", token, ""); got != http.StatusNoContent {
			t.Fatalf("delete account: HTTP %d", got)
		}
		<-alice.Done()
		wantAll(t, "deleted account", everyEndpoint(t, n, token), http.StatusUnauthorized)

		// Signing in with the name again makes a new, empty account; the old token stays dead.
		fresh := login(t, n, "alice")
		waitStatus(t, func() int { return dialOrStatus(t, n, fresh) }, http.StatusSwitchingProtocols, "the new account's token")
		wantAll(t, "old token after a new sign-in", everyEndpoint(t, n, token), http.StatusUnauthorized)
	})
	t.Run("production", func(t *testing.T) {
		env := testenv.NewEnv(t)
		n := startProductionNode(t, env, "hardening", nil)
		token := idpToken(t, "alice", time.Now())
		alice := dialWith(t, n, token, nil)
		if got := apiStatus(t, http.MethodDelete, n.URL()+"/api/account", token, ""); got != http.StatusNoContent {
			t.Fatalf("delete account: HTTP %d", got)
		}
		<-alice.Done()
		wantAll(t, "deleted account", everyEndpoint(t, n, token), http.StatusUnauthorized)
		// Not even a token the identity provider signs afterwards brings back an empty account.
		later := idpToken(t, "alice", time.Now().Add(2*time.Second))
		wantAll(t, "a later token of the deleted account", everyEndpoint(t, n, later), http.StatusUnauthorized)
		store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
		if _, err := store.User(ctxT(t, 10*time.Second), "alice"); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("alice's account after her deletion and two refused tokens: %v; want none", err)
		}
	})
}

// waitStatus polls status until it returns want, and fails with the last status after 10 s.
func waitStatus(t *testing.T, status func() int, want int, what string) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if got := status(); got != want {
			return fmt.Errorf("%s: HTTP %d; want %d", what, got, want)
		}
		return nil
	})
}

// TestHardeningReadyzSaysWhatInWords: /readyz names the dependency that is down and nothing of
// its internals (before the fix it printed the driver's error with the store's address).
func TestHardeningReadyzSaysWhatInWords(t *testing.T) {
	store := testenv.StartRestartableStore(t, t.TempDir())
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown() })
	cfg := testenv.Env{NATSURL: ns.ClientURL(), MongoURI: store.URI, Database: "readyz"}.NodeConfig()
	cfg.Sequencer.Partitions = securityPartitions
	n := testenv.StartNode(t, cfg)
	if status, body := readyz(t, n); status != http.StatusOK || body != "ready" {
		t.Fatalf("/readyz with everything up: %d %q", status, body)
	}
	// Only the words: no address, port, or driver text.
	checkDown := func(want string) {
		t.Helper()
		var status int
		var body string
		waitStatus(t, func() int { status, body = readyz(t, n); return status }, http.StatusServiceUnavailable, "/readyz to see "+want)
		if body != "not ready: "+want {
			t.Fatalf("/readyz = %q; want %q", body, "not ready: "+want)
		}
	}

	store.Stop()
	checkDown("store not reachable")
	store.Restart(t)
	waitStatus(t, func() int { s, _ := readyz(t, n); return s }, http.StatusOK, "/readyz once the store is back")

	ns.Shutdown()
	checkDown("NATS not connected")
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, n *testenv.Node) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, n.URL()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// TestHardeningTokenClaimsAtTheNode: issuer, audience and maximum lifetime configured on a node
// are enforced on the upgrade and the HTTP API alike.
func TestHardeningTokenClaimsAtTheNode(t *testing.T) {
	env := testenv.NewEnv(t)
	n := startProductionNode(t, env, "hardening", func(c *node.Config) {
		c.JWTIssuer, c.JWTAudience, c.JWTMaxLifetime = "https://id.example", "chat", 2*time.Hour
	})
	now := time.Now()
	sign := func(tune func(*jwt.RegisteredClaims)) string {
		c := jwt.RegisteredClaims{Subject: "alice", Issuer: "https://id.example", Audience: jwt.ClaimStrings{"chat"},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
		tune(&c)
		tok, err := auth.SignClaims(hardeningSecret, c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := sign(func(*jwt.RegisteredClaims) {})
	if got := dialOrStatus(t, n, good); got != http.StatusSwitchingProtocols {
		t.Fatalf("a token as configured: HTTP %d", got)
	}
	for name, tok := range map[string]string{
		"wrong issuer":       sign(func(c *jwt.RegisteredClaims) { c.Issuer = "https://evil.example" }),
		"wrong audience":     sign(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"billing"} }),
		"too long a life":    sign(func(c *jwt.RegisteredClaims) { c.ExpiresAt = jwt.NewNumericDate(now.Add(3 * time.Hour)) }),
		"issued in future":   sign(func(c *jwt.RegisteredClaims) { c.IssuedAt = jwt.NewNumericDate(now.Add(time.Minute)) }),
		"no issuer at all":   sign(func(c *jwt.RegisteredClaims) { c.Issuer = "" }),
		"no audience at all": sign(func(c *jwt.RegisteredClaims) { c.Audience = nil }),
	} {
		if got := dialOrStatus(t, n, tok); got != http.StatusUnauthorized {
			t.Errorf("%s: upgrade HTTP %d; want 401", name, got)
		}
		if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge", tok, ""); got != http.StatusUnauthorized {
			t.Errorf("%s: badge HTTP %d; want 401", name, got)
		}
	}
}

// revoke calls the admin API of n and returns the status.
func revoke(t *testing.T, n *testenv.Node, userID, secret string) int {
	t.Helper()
	return apiStatus(t, http.MethodPost, n.AdminURL()+"/admin/users/"+userID+"/revoke", secret, "")
}

// TestHardeningRevocation: an operator revokes alice through one node's admin API: her sockets on
// both nodes close with 4003 "session revoked", her earlier tokens are refused at once on that
// node and within seconds on the other, everywhere; a token issued after the revocation works.
func TestHardeningRevocation(t *testing.T) {
	env := testenv.NewEnv(t)
	a := startProductionNode(t, env, "node-a", nil)
	b := startProductionNode(t, env, "node-b", nil)
	old := idpToken(t, "alice", time.Now().Add(-time.Minute))
	onA, onB := dialWith(t, a, old, nil), dialWith(t, b, old, nil)
	bob := dialWith(t, b, idpToken(t, "bob", time.Now()), nil)
	// Both nodes have alice's account cached now.
	for _, n := range []*testenv.Node{a, b} {
		if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge", old, ""); got != http.StatusOK {
			t.Fatalf("badge before the revocation: HTTP %d", got)
		}
	}

	if got := revoke(t, a, "alice", ""); got != http.StatusUnauthorized {
		t.Fatalf("revoke without the admin secret: HTTP %d; want 401", got)
	}
	if got := revoke(t, a, "alice", adminSecret+"x"); got != http.StatusUnauthorized {
		t.Fatalf("revoke with a wrong admin secret: HTTP %d; want 401", got)
	}
	if got := revoke(t, a, "Alice.*", adminSecret); got != http.StatusBadRequest {
		t.Fatalf("revoke of a malformed id: HTTP %d; want 400", got)
	}
	roundTrip(t, onA) // nothing was revoked by the refused calls
	if got := revoke(t, a, "alice", adminSecret); got != http.StatusOK {
		t.Fatalf("revoke: HTTP %d", got)
	}
	// At once on the node that handled it.
	wantAll(t, "revoked token on the node that revoked", everyEndpoint(t, a, old), http.StatusUnauthorized)
	for name, c := range map[string]*client.Conn{"node-a": onA, "node-b": onB} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("alice's socket on %s still open 10 s after the revocation", name)
		}
		var ce websocket.CloseError
		if c.CloseStatus() != session.StatusRemoved || !errors.As(c.Err(), &ce) || ce.Reason != "session revoked" {
			t.Fatalf("alice's socket on %s closed with %v (%v); want 4003 session revoked", name, c.CloseStatus(), c.Err())
		}
	}
	// Within seconds on the other node.
	waitStatus(t, func() int { return apiStatus(t, http.MethodGet, b.URL()+"/api/badge", old, "") }, http.StatusUnauthorized, "the revoked token on the other node")
	wantAll(t, "revoked token on the other node", everyEndpoint(t, b, old), http.StatusUnauthorized)
	roundTrip(t, bob) // nobody else was cut

	// A token the identity provider issues after the revocation works.
	fresh := idpToken(t, "alice", time.Now().Add(time.Second))
	waitStatus(t, func() int { return dialOrStatus(t, b, fresh) }, http.StatusSwitchingProtocols, "a token issued after the revocation")
}

// TestHardeningAdminAPIOffWithoutSecret: with no admin secret there is no admin API.
func TestHardeningAdminAPIOffWithoutSecret(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	for _, secret := range []string{"", adminSecret} {
		if got := revoke(t, n, "alice", secret); got != http.StatusNotFound {
			t.Fatalf("revoke on a node without an admin secret: HTTP %d; want 404", got)
		}
	}
}

// TestHardeningTokenAsSubprotocol: a browser sends its token as a WebSocket subprotocol and the
// server answers the chatd subprotocol; the query parameter keeps working for tools.
func TestHardeningTokenAsSubprotocol(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	token := login(t, n, "alice")
	ctx := ctxT(t, 10*time.Second)
	c, resp, err := websocket.Dial(ctx, n.WSURL(), &websocket.DialOptions{Subprotocols: []string{"chatd", "chatd.token." + token}})
	if err != nil {
		t.Fatalf("dial with the token as a subprotocol: %v (HTTP %v)", err, resp)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "chatd" {
		t.Fatalf("server answered subprotocol %q; want chatd", c.Subprotocol())
	}
	_, data, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"hello"`) || !strings.Contains(string(data), `"alice"`) {
		t.Fatalf("first frame %s, %v; want alice's hello", data, err)
	}
	_, resp, err = websocket.Dial(ctx, n.WSURL(), &websocket.DialOptions{Subprotocols: []string{"chatd", "chatd.token." + token + "x"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged subprotocol token: %v, %v; want 401", err, resp)
	}
	if got := dialOrStatus(t, n, token); got != http.StatusSwitchingProtocols { // ?token=
		t.Fatalf("the token as a query parameter: HTTP %d", got)
	}
}

// TestHardeningNginxKeepsOperatorEndpointsPrivate renders the shipped nginx configuration in
// front of a node: health, readiness, debug and admin endpoints answer 404 through it (the node
// itself still answers them), while the page and the API pass.
func TestHardeningNginxKeepsOperatorEndpointsPrivate(t *testing.T) {
	env := testenv.NewEnv(t)
	n := startProductionNode(t, env, "behind-nginx", nil)
	lb := testenv.StartNginx(t, t.TempDir(), "server "+n.Addr()+";").URL
	get := func(base, path string) int { return apiStatus(t, http.MethodGet, base+path, "", "") }

	for _, path := range []string{"/healthz", "/readyz"} {
		if got := get(lb, path); got != http.StatusNotFound {
			t.Errorf("GET %s through nginx: %d; want 404", path, got)
		}
		if got := get(n.URL(), path); got != http.StatusOK {
			t.Errorf("GET %s on the node's own port: %d; want 200", path, got)
		}
	}
	// Operators' endpoints exist only on the admin listener.
	for _, path := range []string{"/metrics", "/debug/partitions", "/debug/pprof/"} {
		for _, base := range []string{lb, n.URL()} {
			if got := get(base, path); got != http.StatusNotFound {
				t.Errorf("GET %s via %s: %d; want 404", path, base, got)
			}
		}
		if got := get(n.AdminURL(), path); got != http.StatusOK {
			t.Errorf("GET %s on the admin listener: %d; want 200", path, got)
		}
	}
	for _, tc := range []struct {
		base, secret string
		want         int
	}{
		{lb, adminSecret, http.StatusNotFound},
		{n.URL(), adminSecret, http.StatusNotFound},
		{n.AdminURL(), "", http.StatusUnauthorized},
		{n.AdminURL(), "wrong-secret-wrong-secret-wrong-secret", http.StatusUnauthorized},
		{n.AdminURL(), adminSecret, http.StatusOK},
	} {
		if got := apiStatus(t, http.MethodPost, tc.base+"/admin/users/alice/revoke", tc.secret, ""); got != tc.want {
			t.Errorf("POST /admin/users/alice/revoke via %s with secret %q: %d; want %d", tc.base, tc.secret, got, tc.want)
		}
	}
	if got := get(lb, "/"); got != http.StatusOK {
		t.Errorf("the page through nginx: %d", got)
	}
	if got := apiStatus(t, http.MethodGet, lb+"/api/badge", idpToken(t, "bob", time.Now()), ""); got != http.StatusOK {
		t.Errorf("the API through nginx: %d", got)
	}
}
