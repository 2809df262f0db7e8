// Package auth turns bearer tokens into user ids. Tokens are HS256 JWTs with the user id in "sub".
// In dev mode (no secret configured) the server also issues tokens for a display name, so the demo
// page and tests can sign in without an identity provider.
package auth

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultTokenTTL is how long a dev-mode token lives: a working day, so a demo tab survives a
// restart of the server but a leaked token does not live forever.
const DefaultTokenTTL = 24 * time.Hour

// ErrUnauthenticated is returned for a missing, malformed, forged or expired token.
var ErrUnauthenticated = errors.New("unauthenticated")

// userIDPattern is what a user id may look like: safe as a NATS subject token, in URLs and in logs.
var userIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Authenticator verifies and, in dev mode, issues tokens.
type Authenticator struct {
	secret []byte
	dev    bool
	ttl    time.Duration
	now    func() time.Time
}

// New returns an Authenticator. dev enables Issue; secret must be at least 32 bytes.
func New(secret []byte, dev bool) (*Authenticator, error) {
	if len(secret) < 32 {
		return nil, errors.New("auth: secret must be at least 32 bytes")
	}
	return &Authenticator{secret: secret, dev: dev, ttl: DefaultTokenTTL, now: time.Now}, nil
}

// DevMode reports whether the server issues tokens itself.
func (a *Authenticator) DevMode() bool { return a.dev }

// Verify returns the user id of a valid token.
func (a *Authenticator) Verify(token string) (string, error) {
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(a.now))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if !userIDPattern.MatchString(claims.Subject) {
		return "", fmt.Errorf("%w: subject is not a valid user id", ErrUnauthenticated)
	}
	return claims.Subject, nil
}

// Issue signs a token for userID. Only dev mode issues tokens.
func (a *Authenticator) Issue(userID string) (string, error) {
	if !a.dev {
		return "", errors.New("auth: tokens are issued by the identity provider, not this server")
	}
	return Sign(a.secret, userID, a.now().Add(a.ttl))
}

// Sign makes an HS256 token for userID that expires at exp. Identity providers and tests use it.
func Sign(secret []byte, userID string, exp time.Time) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   userID,
		ExpiresAt: jwt.NewNumericDate(exp),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
	s, err := tok.SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token for %s: %w", userID, err)
	}
	return s, nil
}

// UserIDFromName derives a user id from a display name: lower case, spaces to dashes.
func UserIDFromName(name string) (string, error) {
	id := strings.ToLower(strings.Join(strings.Fields(name), "-"))
	if !userIDPattern.MatchString(id) {
		return "", errors.New("a name must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit")
	}
	return id, nil
}
