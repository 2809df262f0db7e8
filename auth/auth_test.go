package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	testSecret  = []byte("auth-test-secret-auth-test-secret!!")
	otherSecret = []byte("someone-else-secret-someone-else!!!")
)

func newAuth(t *testing.T, dev bool) *Authenticator {
	t.Helper()
	a, err := New(Config{Secret: testSecret, DevMode: dev})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// signClaims signs arbitrary claims with method and key, for tokens Sign would never make.
func signClaims(t *testing.T, method jwt.SigningMethod, key any, claims jwt.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyAcceptsSignedToken(t *testing.T) {
	a := newAuth(t, false)
	tok, err := Sign(testSecret, "alice", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Verify(tok)
	if err != nil || id.UserID != "alice" {
		t.Fatalf("Verify = %+v, %v; want alice", id, err)
	}
}

// TestVerifyRefuses lists every way a token can be wrong; each must be ErrUnauthenticated, the
// one error the server maps to 401.
func TestVerifyRefuses(t *testing.T) {
	hour := time.Now().Add(time.Hour)
	valid := func(sub string) jwt.RegisteredClaims {
		return jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(hour)}
	}
	mustSign := func(secret []byte, sub string, exp time.Time) string {
		s, err := Sign(secret, sub, exp)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := mustSign(testSecret, "alice", hour)
	parts := strings.Split(good, ".")
	notBefore := valid("alice")
	notBefore.NotBefore = jwt.NewNumericDate(hour)
	noExp := jwt.RegisteredClaims{Subject: "alice"}

	for _, tc := range []struct {
		name, token string
	}{
		{"forged with another secret", mustSign(otherSecret, "alice", hour)},
		{"expired", mustSign(testSecret, "alice", time.Now().Add(-time.Minute))},
		{"without expiry", signClaims(t, jwt.SigningMethodHS256, testSecret, noExp)},
		{"not valid yet", signClaims(t, jwt.SigningMethodHS256, testSecret, notBefore)},
		{"alg none", signClaims(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid("alice"))},
		{"HS512 with the right secret", signClaims(t, jwt.SigningMethodHS512, testSecret, valid("alice"))},
		{"signature stripped", parts[0] + "." + parts[1] + "."},
		{"payload swapped", parts[0] + "." + strings.Split(mustSign(testSecret, "bob", hour), ".")[1] + "." + parts[2]},
		{"empty", ""},
		{"garbage", "not-a-token"},
		{"three dots of nothing", ".."},
		{"bearer prefix inside", "Bearer " + good},
		{"empty subject", signClaims(t, jwt.SigningMethodHS256, testSecret, valid(""))},
		{"upper-case subject", signClaims(t, jwt.SigningMethodHS256, testSecret, valid("Alice"))},
		{"subject with a NATS token separator", signClaims(t, jwt.SigningMethodHS256, testSecret, valid("alice.bob"))},
		{"subject with a NATS wildcard", signClaims(t, jwt.SigningMethodHS256, testSecret, valid(">"))},
		{"subject with a path", signClaims(t, jwt.SigningMethodHS256, testSecret, valid("../alice"))},
		{"subject too long", signClaims(t, jwt.SigningMethodHS256, testSecret, valid(strings.Repeat("a", 65)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := newAuth(t, true).Verify(tc.token)
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", id, err)
			}
			if id.UserID != "" {
				t.Fatalf("a refused token still named user %q", id.UserID)
			}
		})
	}
}

// TestIssuedTokenExpiresAfterTTL moves the authenticator's clock: a dev-mode token works until its
// TTL and not after.
func TestIssuedTokenExpiresAfterTTL(t *testing.T) {
	a := newAuth(t, true)
	start := time.Now()
	a.now = func() time.Time { return start }
	tok, err := a.Issue("alice")
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return start.Add(DefaultTokenTTL - time.Minute) }
	if id, err := a.Verify(tok); err != nil || id.UserID != "alice" {
		t.Fatalf("just before the TTL: %+v, %v", id, err)
	}
	a.now = func() time.Time { return start.Add(DefaultTokenTTL + time.Minute) }
	if _, err := a.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("after the TTL: %v; want ErrUnauthenticated", err)
	}
}

func TestOnlyDevModeIssues(t *testing.T) {
	if _, err := newAuth(t, false).Issue("alice"); err == nil {
		t.Fatal("a production authenticator issued a token")
	}
	if newAuth(t, false).DevMode() || !newAuth(t, true).DevMode() {
		t.Fatal("DevMode does not report the mode")
	}
}

func TestNewRefusesShortSecret(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("short"), testSecret[:31]} {
		if _, err := New(Config{Secret: secret, DevMode: true}); err == nil {
			t.Fatalf("New accepted a %d-byte secret", len(secret))
		}
	}
	if _, err := New(Config{Secret: testSecret[:32]}); err != nil {
		t.Fatalf("New refused a 32-byte secret: %v", err)
	}
}

func TestUserIDFromName(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"alice", "alice"},
		{"  Alice  Smith ", "alice-smith"},
		{"bob_2", "bob_2"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
	} {
		if got, _, err := UserIDFromName(tc.name); err != nil || got != tc.want {
			t.Errorf("UserIDFromName(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "   ", "-alice", "a*", ">", "a/b", strings.Repeat("a", 65), strings.Repeat("é", 65)} {
		if got, _, err := UserIDFromName(bad); err == nil {
			t.Errorf("UserIDFromName(%q) = %q; want an error", bad, got)
		}
	}
}
