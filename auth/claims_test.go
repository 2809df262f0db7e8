package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chatd/chatd/protocol"
)

// signRaw signs a payload given as raw JSON, for claims the jwt library would never write (a
// string exp).
func signRaw(t *testing.T, secret []byte, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, secret)
	if err != nil {
		t.Fatal(err)
	}
	return unsigned + "." + enc.EncodeToString(sig)
}

func newAuthWith(t *testing.T, tune func(*Config)) *Authenticator {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Secret = testSecret
	if tune != nil {
		tune(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestVerifyChecksClaims covers the checks a deployment configures or gets by default: issuer,
// audience, maximum lifetime, iat in the future, time claims that are not numbers.
func TestVerifyChecksClaims(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	claims := func(tune func(*jwt.RegisteredClaims)) string {
		c := jwt.RegisteredClaims{Subject: "alice", Issuer: "https://id.example", Audience: jwt.ClaimStrings{"chat"},
			IssuedAt: at(0), ExpiresAt: at(time.Hour)}
		tune(&c)
		return signClaims(t, jwt.SigningMethodHS256, testSecret, c)
	}
	// raw signs a payload written by hand; NOW and HOUR stand for the times as numbers.
	raw := func(format string) string {
		return signRaw(t, testSecret, strings.NewReplacer("NOW", jsonInt(now), "HOUR", jsonInt(now.Add(time.Hour))).Replace(format))
	}
	strict := func(c *Config) { c.Issuer, c.Audience = "https://id.example", "chat" }

	for _, tc := range []struct {
		name   string
		tune   func(*Config)
		token  string
		accept bool
	}{
		{"issuer and audience as configured", strict, claims(func(*jwt.RegisteredClaims) {}), true},
		{"issuer not checked when not configured", nil, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "someone" }), true},
		{"wrong issuer", strict, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "https://evil.example" }), false},
		{"no issuer", strict, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "" }), false},
		{"wrong audience", strict, claims(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"billing"} }), false},
		{"no audience", strict, claims(func(c *jwt.RegisteredClaims) { c.Audience = nil }), false},
		{"one of several audiences", strict, claims(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"billing", "chat"} }), true},
		{"lifetime exactly the maximum", nil, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = at(DefaultMaxLifetime) }), true},
		{"lifetime over the maximum", nil, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = at(DefaultMaxLifetime + time.Minute) }), false},
		{"a year-long token", nil, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = at(365 * 24 * time.Hour) }), false},
		{"issued long ago, lifetime over the maximum though not expired", nil, claims(func(c *jwt.RegisteredClaims) {
			c.IssuedAt, c.ExpiresAt = at(-30*time.Hour), at(time.Hour)
		}), false},
		{"no iat, exp within the maximum from now", nil, claims(func(c *jwt.RegisteredClaims) { c.IssuedAt = nil }), true},
		{"no iat, exp beyond the maximum from now", nil, claims(func(c *jwt.RegisteredClaims) {
			c.IssuedAt, c.ExpiresAt = nil, at(DefaultMaxLifetime+time.Hour)
		}), false},
		{"shorter configured maximum", func(c *Config) { c.MaxLifetime, c.TokenTTL = 30*time.Minute, 30*time.Minute }, claims(func(*jwt.RegisteredClaims) {}), false},
		{"iat within the leeway", nil, claims(func(c *jwt.RegisteredClaims) { c.IssuedAt = at(IssuedAtLeeway / 2) }), true},
		{"iat in the future", nil, claims(func(c *jwt.RegisteredClaims) { c.IssuedAt = at(IssuedAtLeeway + 10*time.Second) }), false},
		{"exp a number", nil, raw(`{"sub":"alice","iat":NOW,"exp":HOUR}`), true},
		{"exp a string", nil, raw(`{"sub":"alice","iat":NOW,"exp":"HOUR"}`), false},
		{"iat a string", nil, raw(`{"sub":"alice","iat":"NOW","exp":HOUR}`), false},
		{"nbf a string", nil, raw(`{"sub":"alice","nbf":"NOW","exp":HOUR}`), false},
		{"exp null", nil, raw(`{"sub":"alice","exp":null}`), false},
		{"exp an object", nil, raw(`{"sub":"alice","exp":{"n":HOUR}}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := newAuthWith(t, tc.tune).Verify(tc.token)
			switch {
			case tc.accept && (err != nil || id.UserID != "alice"):
				t.Fatalf("Verify = %+v, %v; want alice", id, err)
			case !tc.accept && !errors.Is(err, ErrUnauthenticated):
				t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", id, err)
			}
		})
	}
}

func jsonInt(t time.Time) string {
	b, _ := json.Marshal(t.Unix())
	return string(b)
}

// TestVerifyReturnsIssuedAt: revocation compares it with the user's "valid after" time.
func TestVerifyReturnsIssuedAt(t *testing.T) {
	a := newAuthWith(t, nil)
	iat := time.Now().Add(-time.Minute).Truncate(time.Second)
	tok := signClaims(t, jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "alice",
		IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(iat.Add(time.Hour))})
	id, err := a.Verify(tok)
	if err != nil || !id.IssuedAt.Equal(iat) {
		t.Fatalf("Verify = %+v, %v; want iat %s", id, err, iat)
	}
}

// TestIssuedTokensPassTheirOwnChecks: dev mode signs with the configured issuer and audience, so
// the demo page keeps working on a node that checks them.
func TestIssuedTokensPassTheirOwnChecks(t *testing.T) {
	a := newAuthWith(t, func(c *Config) { c.DevMode, c.Issuer, c.Audience = true, "chatd-dev", "chat" })
	tok, err := a.Issue("alice")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.Verify(tok); err != nil || id.UserID != "alice" {
		t.Fatalf("Verify of an issued token = %+v, %v", id, err)
	}
	other := newAuthWith(t, func(c *Config) { c.Issuer = "someone-else" })
	if _, err := other.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a node expecting another issuer accepted it: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Secret = testSecret
	if err := good.Validate(); err != nil {
		t.Fatalf("default config with a secret: %v", err)
	}
	for name, tune := range map[string]func(*Config){
		"short secret":              func(c *Config) { c.Secret = testSecret[:MinSecretBytes-1] },
		"no maximum lifetime":       func(c *Config) { c.MaxLifetime = 0 },
		"negative maximum lifetime": func(c *Config) { c.MaxLifetime = -time.Hour },
		"no dev TTL":                func(c *Config) { c.TokenTTL = 0 },
		"dev TTL over the maximum":  func(c *Config) { c.MaxLifetime, c.TokenTTL = time.Hour, 2*time.Hour },
	} {
		c := good
		tune(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}

// TestUserIDFromNameKeepsTheDocumentedRule is the rule of docs/PROTOCOL.md (dev sign-in).
func TestUserIDFromNameKeepsTheDocumentedRule(t *testing.T) {
	for name, want := range map[string]string{
		"ali ce":        "ali-ce",
		"Ali   Ce":      "ali-ce",
		"  Ali Ce  ":    "ali-ce",
		"ali\tce":       "ali-ce",
		"ali - ce":      "ali---ce",
		"R2 D2":         "r2-d2",
		"bob_the-3rd 4": "bob_the-3rd-4",
		// Pinned: a changed derivation would orphan every such account.
		"José":   "u-d994e1d001886fe5",
		"JOSÉ":   "u-d994e1d001886fe5",
		" José ": "u-d994e1d001886fe5",
		"李雷":     "u-3a47328a607f3e0a",
		"Ali.Ce": "u-a797b5de53352b5f",
	} {
		if got, _, err := UserIDFromName(name); err != nil || got != want {
			t.Errorf("UserIDFromName(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, bad := range []string{"_ali", "ali!", " - ", ".ali", "a\u200eb", strings.Repeat("a ", 33)} {
		if _, _, err := UserIDFromName(bad); !errors.Is(err, protocol.ErrBadName) {
			t.Errorf("UserIDFromName(%q): %v; want ErrBadName", bad, err)
		}
	}
}
