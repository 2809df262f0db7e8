package testenv

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// PushService is a Web Push service on loopback for tests: it checks every push as a real push
// service does (the VAPID JWT's ES256 signature, audience, expiry and subject, RFC 8292) and
// decrypts its payload with the subscription's private keys (aes128gcm, RFC 8291: ECDH P-256,
// HKDF-SHA-256, AES-128-GCM), so a test sees exactly what a browser's service worker would get.
// A push that fails a check is answered 400 and recorded as a failure the test reports.
type PushService struct {
	srv *httptest.Server

	mu       sync.Mutex
	subs     map[string]*PushSubscription
	failures []string
}

// PushSubscription is one device's subscription at the PushService: the endpoint and the public
// keys a page hands the server, and the private key the device decrypts with.
type PushSubscription struct {
	ID       string
	Endpoint string
	P256dh   string // the device's public key, base64url (as PushSubscription.toJSON gives it)
	Auth     string // the 16-byte authentication secret, base64url
	key      *ecdh.PrivateKey
	secret   []byte

	// guarded by the service's mu
	received []ReceivedPush
	answers  []int // statuses to answer the next pushes with, in order; then 201
	posts    int   // every push that reached the endpoint, whatever it was answered
}

// ReceivedPush is one push the service accepted, decrypted.
type ReceivedPush struct {
	Payload []byte
	Topic   string
	TTL     int
	Urgency string
	// VAPIDKey is the application server's public key the push was signed with (k=).
	VAPIDKey string
}

// NewPushService starts a push service; it stops, and reports any push that failed its checks,
// when the test ends.
func NewPushService(t testing.TB) *PushService {
	t.Helper()
	p := &PushService{subs: make(map[string]*PushSubscription)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.srv.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, f := range p.failures {
			t.Errorf("push service refused a push: %s", f)
		}
	})
	return p
}

// Subscribe makes a new device subscription with fresh keys.
func (p *PushService) Subscribe(t testing.TB) *PushSubscription {
	t.Helper()
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate subscription key: %v", err)
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("sub%d", len(p.subs)+1)
	s := &PushSubscription{ID: id, Endpoint: p.srv.URL + "/push/" + id, key: key, secret: secret,
		P256dh: base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
		Auth:   base64.RawURLEncoding.EncodeToString(secret)}
	p.subs[id] = s
	return s
}

// JSON is the subscription as a page sends it to the server (PushSubscription.toJSON()).
func (s *PushSubscription) JSON() []byte {
	data, _ := json.Marshal(map[string]any{"endpoint": s.Endpoint, "keys": map[string]string{"p256dh": s.P256dh, "auth": s.Auth}})
	return data
}

// Answer makes the service answer the next pushes to s with statuses, in order (e.g. 410 Gone,
// 503), before it accepts them again with 201.
func (p *PushService) Answer(s *PushSubscription, statuses ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.answers = append(s.answers, statuses...)
}

// Posts is how many pushes reached s's endpoint, accepted or not.
func (p *PushService) Posts(s *PushSubscription) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.posts
}

// Received returns the pushes s accepted so far, decrypted, oldest first.
func (p *PushService) Received(s *PushSubscription) []ReceivedPush {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ReceivedPush(nil), s.received...)
}

func (p *PushService) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/push/")
	p.mu.Lock()
	s := p.subs[id]
	p.mu.Unlock()
	if r.Method != http.MethodPost || !ok || s == nil {
		http.Error(w, "no such subscription", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<10))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	got, err := p.check(r, s, body)
	p.mu.Lock()
	defer p.mu.Unlock()
	s.posts++
	if err != nil {
		p.failures = append(p.failures, fmt.Sprintf("%s: %v", id, err))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(s.answers) > 0 {
		status := s.answers[0]
		s.answers = s.answers[1:]
		w.WriteHeader(status)
		return
	}
	s.received = append(s.received, got)
	w.WriteHeader(http.StatusCreated)
}

// check verifies a push's headers and VAPID authorization and decrypts its payload.
func (p *PushService) check(r *http.Request, s *PushSubscription, body []byte) (ReceivedPush, error) {
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		return ReceivedPush{}, fmt.Errorf("Content-Encoding %q, want aes128gcm", ce)
	}
	ttl, err := strconv.Atoi(r.Header.Get("TTL"))
	if err != nil || ttl < 0 {
		return ReceivedPush{}, fmt.Errorf("TTL header %q is not a number of seconds", r.Header.Get("TTL"))
	}
	topic := r.Header.Get("Topic")
	if len(topic) > 32 || strings.Trim(topic, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return ReceivedPush{}, fmt.Errorf("Topic %q is not at most 32 base64url characters", topic)
	}
	vapidKey, err := checkVAPID(r.Header.Get("Authorization"), s.Endpoint)
	if err != nil {
		return ReceivedPush{}, err
	}
	payload, err := decryptPush(s.key, s.secret, body)
	if err != nil {
		return ReceivedPush{}, err
	}
	return ReceivedPush{Payload: payload, Topic: topic, TTL: ttl, Urgency: r.Header.Get("Urgency"), VAPIDKey: vapidKey}, nil
}

// checkVAPID verifies an RFC 8292 Authorization header, "vapid t=<JWT>, k=<public key>": the
// JWT is ES256-signed by k, its aud is the endpoint's origin, it expires within 24 hours, and
// its sub is a mailto: or https: contact. It returns k.
func checkVAPID(header, endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return "", fmt.Errorf("Authorization %q is not a vapid one", header)
	}
	params := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		params[k] = v
	}
	keyBytes, err := base64.RawURLEncoding.DecodeString(params["k"])
	if err != nil {
		return "", fmt.Errorf("vapid k is not base64url: %w", err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), keyBytes)
	if err != nil {
		return "", fmt.Errorf("vapid k is not a P-256 public key: %w", err)
	}
	parts := strings.Split(params["t"], ".")
	if len(parts) != 3 {
		return "", errors.New("vapid t is not a JWT")
	}
	var head struct{ Alg, Typ string }
	var claims struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}
	for i, v := range []any{&head, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(raw, v) != nil {
			return "", fmt.Errorf("vapid JWT part %d is not base64url JSON", i)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 || head.Alg != "ES256" {
		return "", fmt.Errorf("vapid JWT is not ES256 (alg %q, %d signature bytes)", head.Alg, len(sig))
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return "", errors.New("vapid JWT signature does not verify with k")
	}
	u, _ := url.Parse(endpoint)
	exp := time.Unix(claims.Exp, 0)
	switch {
	case claims.Aud != u.Scheme+"://"+u.Host:
		return "", fmt.Errorf("vapid aud %q, want %q", claims.Aud, u.Scheme+"://"+u.Host)
	case exp.Before(time.Now()) || exp.After(time.Now().Add(24*time.Hour)):
		return "", fmt.Errorf("vapid exp %v is not within the next 24 hours", exp)
	case !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:"):
		return "", fmt.Errorf("vapid sub %q is neither mailto: nor https:", claims.Sub)
	}
	return params["k"], nil
}

// decryptPush decrypts an aes128gcm body (RFC 8188) the way RFC 8291 derives its key: the header
// carries the salt, the record size and the application server's one-time public key; the input
// key comes from ECDH with the device's key and the authentication secret.
func decryptPush(key *ecdh.PrivateKey, authSecret, body []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than an aes128gcm header")
	}
	salt, rs, idLen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idLen != 65 || len(body) < 21+idLen {
		return nil, fmt.Errorf("keyid of %d bytes, want the server's 65-byte public key", idLen)
	}
	serverKey, err := ecdh.P256().NewPublicKey(body[21 : 21+idLen])
	if err != nil {
		return nil, fmt.Errorf("keyid is not a P-256 public key: %w", err)
	}
	records := body[21+idLen:]
	if rs < 18 || len(records) > int(rs) {
		return nil, fmt.Errorf("record size %d, %d bytes of records: one record expected", rs, len(records))
	}
	shared, err := key.ECDH(serverKey)
	if err != nil {
		return nil, fmt.Errorf("ecdh: %w", err)
	}
	info := append(append([]byte("WebPush: info\x00"), key.PublicKey().Bytes()...), serverKey.Bytes()...)
	prkKey, err := hkdf.Extract(sha256.New, shared, authSecret)
	if err != nil {
		return nil, err
	}
	ikm, err := hkdf.Expand(sha256.New, prkKey, string(info), 32)
	if err != nil {
		return nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, records, nil)
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	// The last record ends with the delimiter 0x02, then zero padding.
	end := len(plain) - 1
	for end >= 0 && plain[end] == 0 {
		end--
	}
	if end < 0 || plain[end] != 2 {
		return nil, errors.New("no last-record delimiter after the payload")
	}
	return plain[:end], nil
}
