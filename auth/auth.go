// Package auth turns bearer tokens into user ids. Tokens are HS256 JWTs with the user id in "sub".
// In dev mode (no secret configured) the server also issues tokens for a display name, so the demo
// page and tests can sign in without an identity provider.
package auth

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chatd/chatd/protocol"
)

// Defaults and limits, each with its reason.
const (
	// DefaultTokenTTL is how long a dev-mode token lives: a working day, so a demo tab survives a
	// restart of the server but a leaked token does not live forever.
	DefaultTokenTTL = 24 * time.Hour
	// DefaultMaxLifetime is the longest a token may be valid for (exp - iat, or exp - now when it
	// has no iat): an identity provider that mints year-long tokens by mistake must not hand out
	// credentials that outlive any revocation an operator forgets to make. A day matches dev mode.
	DefaultMaxLifetime = 24 * time.Hour
	// IssuedAtLeeway is how far in the future an iat may be: the identity provider's clock and
	// ours differ by a little, never by minutes. A token from further ahead was minted to
	// outlive a revocation (see Identity.IssuedAt) or by a broken clock.
	IssuedAtLeeway = 5 * time.Second
	// MinSecretBytes is the shortest HS256 secret accepted: 256 bits, the size of the HMAC, so
	// the key cannot be brute-forced.
	MinSecretBytes = 32
)

// ErrUnauthenticated is returned for a missing, malformed, forged or expired token.
var ErrUnauthenticated = errors.New("unauthenticated")

// userIDPattern is what a user id may look like: safe as a NATS subject token, in URLs and in logs.
var userIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidUserID reports whether id has the shape of a user id (what a token's subject must be).
func ValidUserID(id string) bool { return userIDPattern.MatchString(id) }

// Config says which tokens are accepted. cmd/chatd fills it from flags and environment.
type Config struct {
	// Secret is the HS256 key, at least MinSecretBytes long.
	Secret []byte
	// DevMode makes Issue work: the server signs tokens for display names itself.
	DevMode bool
	// Issuer, if set, must equal a token's "iss"; empty means iss is not checked.
	Issuer string
	// Audience, if set, must be one of a token's "aud"; empty means aud is not checked.
	Audience string
	// MaxLifetime bounds exp - iat (exp - now without iat); default DefaultMaxLifetime.
	MaxLifetime time.Duration
	// TokenTTL is the lifetime of tokens Issue makes; default DefaultTokenTTL, at most MaxLifetime.
	TokenTTL time.Duration
}

// DefaultConfig is a production configuration without a secret: the caller sets Secret.
func DefaultConfig() Config {
	return Config{MaxLifetime: DefaultMaxLifetime, TokenTTL: DefaultTokenTTL}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.Secret) < MinSecretBytes:
		return fmt.Errorf("auth: secret must be at least %d bytes", MinSecretBytes)
	case c.MaxLifetime <= 0:
		return errors.New("auth: the maximum token lifetime must be positive")
	case c.TokenTTL <= 0:
		return errors.New("auth: the dev-mode token TTL must be positive")
	case c.TokenTTL > c.MaxLifetime:
		return fmt.Errorf("auth: the dev-mode token TTL (%s) is longer than the maximum token lifetime (%s)", c.TokenTTL, c.MaxLifetime)
	}
	return nil
}

// Identity is what a valid token says.
type Identity struct {
	// UserID is the token's subject.
	UserID string
	// IssuedAt is the token's iat, zero when it has none. A revocation refuses tokens issued
	// before it.
	IssuedAt time.Time
}

// Authenticator verifies and, in dev mode, issues tokens.
type Authenticator struct {
	cfg Config
	now func() time.Time
}

// New returns an Authenticator for cfg; zero MaxLifetime and TokenTTL take their defaults.
func New(cfg Config) (*Authenticator, error) {
	def := DefaultConfig()
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = def.MaxLifetime
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = min(def.TokenTTL, cfg.MaxLifetime)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Authenticator{cfg: cfg, now: time.Now}, nil
}

// DevMode reports whether the server issues tokens itself.
func (a *Authenticator) DevMode() bool { return a.cfg.DevMode }

// Verify returns the identity of a valid token, or an error wrapping ErrUnauthenticated whose
// text says why it was refused (for the log; it never contains the token).
func (a *Authenticator) Verify(token string) (Identity, error) {
	claims := &jwt.RegisteredClaims{}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(a.now),
	}
	if a.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(a.cfg.Issuer))
	}
	if a.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.cfg.Audience))
	}
	if _, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return a.cfg.Secret, nil }, opts...); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	// The jwt library reads a NumericDate from a JSON string too ("exp": "1700000000"); the
	// standard (RFC 7519 section 2) says a number, and a token that bends it is not ours.
	if err := requireNumericDates(token); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if !userIDPattern.MatchString(claims.Subject) {
		return Identity{}, fmt.Errorf("%w: subject is not a valid user id", ErrUnauthenticated)
	}
	now := a.now()
	id := Identity{UserID: claims.Subject}
	from := now
	if claims.IssuedAt != nil {
		id.IssuedAt = claims.IssuedAt.Time
		if id.IssuedAt.After(now.Add(IssuedAtLeeway)) {
			return Identity{}, fmt.Errorf("%w: token issued in the future (iat %s)", ErrUnauthenticated, id.IssuedAt.UTC().Format(time.RFC3339))
		}
		from = id.IssuedAt
	}
	if life := claims.ExpiresAt.Sub(from); life > a.cfg.MaxLifetime {
		return Identity{}, fmt.Errorf("%w: token lifetime %s exceeds the maximum %s", ErrUnauthenticated, life.Round(time.Second), a.cfg.MaxLifetime)
	}
	return id, nil
}

// requireNumericDates checks that the time claims of an already verified token are JSON numbers.
func requireNumericDates(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("token is not three segments")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return fmt.Errorf("decode claims: %w", err)
	}
	for _, name := range []string{"exp", "iat", "nbf"} {
		v, ok := raw[name]
		if !ok {
			continue
		}
		var n json.Number
		if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
			return fmt.Errorf("claim %s is not a number", name)
		}
	}
	return nil
}

// Issue signs a token for userID, with the configured issuer and audience. Only dev mode issues
// tokens.
func (a *Authenticator) Issue(userID string) (string, error) {
	return a.IssueAfter(userID, time.Time{})
}

// IssueAfter is Issue for an account whose tokens are valid only from validAfter on (a revived
// account, see storage.ValidAfter): the token's iat is validAfter if that is still ahead, which
// is at most a second away, well inside IssuedAtLeeway.
func (a *Authenticator) IssueAfter(userID string, validAfter time.Time) (string, error) {
	if !a.cfg.DevMode {
		return "", errors.New("auth: tokens are issued by the identity provider, not this server")
	}
	now := a.now()
	if validAfter.After(now) {
		now = validAfter
	}
	c := jwt.RegisteredClaims{
		Subject:   userID,
		Issuer:    a.cfg.Issuer,
		ExpiresAt: jwt.NewNumericDate(now.Add(a.cfg.TokenTTL)),
		IssuedAt:  jwt.NewNumericDate(now),
	}
	if a.cfg.Audience != "" {
		c.Audience = jwt.ClaimStrings{a.cfg.Audience}
	}
	return SignClaims(a.cfg.Secret, c)
}

// Sign makes an HS256 token for userID, issued now, that expires at exp. Identity providers and
// tests use it.
func Sign(secret []byte, userID string, exp time.Time) (string, error) {
	return SignClaims(secret, jwt.RegisteredClaims{
		Subject:   userID,
		ExpiresAt: jwt.NewNumericDate(exp),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
}

// SignClaims makes an HS256 token of any registered claims, for identity providers that set
// iss and aud, and for tests.
func SignClaims(secret []byte, c jwt.RegisteredClaims) (string, error) {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token for %s: %w", c.Subject, err)
	}
	return s, nil
}

// UserIDFromName checks and cleans a dev-mode display name (protocol.DisplayName, whose
// ErrBadName it returns) and derives the user id from the clean name: lower case, each space one '-', when that
// is a valid user id ("Ali  Ce" becomes "ali-ce"); otherwise, for names in other scripts or with
// '.' or an apostrophe, "u-" and 16 hex digits of the SHA-256 of the lower-case name ("José" becomes
// "u-" + ...). The same name in any case gives the same id, so signing in again finds the user.
func UserIDFromName(name string) (id, clean string, err error) {
	clean, err = protocol.DisplayName(name)
	if err != nil {
		return "", "", err
	}
	lower := strings.ToLower(clean)
	if id := strings.ReplaceAll(lower, " ", "-"); ValidUserID(id) {
		return id, clean, nil
	}
	sum := sha256.Sum256([]byte(lower))
	return "u-" + hex.EncodeToString(sum[:8]), clean, nil
}
