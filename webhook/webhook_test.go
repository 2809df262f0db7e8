package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/webhook"
)

// waitFor bounds every wait: far above what any of these deliveries takes, so only a delivery
// that never comes reaches it.
const waitFor = 5 * time.Second

// fastConfig retries after milliseconds instead of seconds, so a failing receiver costs a test
// little time.
func fastConfig() webhook.Config {
	return webhook.Config{Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: 2 * time.Second}
}

// sentAt is when message 0 would have been sent; message n is sent n seconds later, so message 1
// is the one of docs/PROTOCOL.md.
var sentAt = time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)

// store is a webhook.Store in memory: each conversation's webhooks and messages, and each
// webhook's cursor with every value saved.
type store struct {
	mu        sync.Mutex
	hooks     map[string][]storage.Webhook
	cursors   map[string]storage.WebhookCursor // by conversation|webhook
	saved     map[string][]storage.WebhookCursor
	messages  map[string][]storage.Message // in seq order
	hookReads int
}

func newStore() *store {
	return &store{hooks: map[string][]storage.Webhook{}, cursors: map[string]storage.WebhookCursor{},
		saved: map[string][]storage.WebhookCursor{}, messages: map[string][]storage.Message{}}
}

func (s *store) WebhooksOf(_ context.Context, conversationID string) ([]storage.Webhook, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookReads++
	return slices.Clone(s.hooks[conversationID]), nil
}

func (s *store) WebhookCursorOf(_ context.Context, conversationID, webhookID string) (storage.WebhookCursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[conversationID+"|"+webhookID], nil
}

func (s *store) SaveWebhookCursor(_ context.Context, conversationID, webhookID string, cur storage.WebhookCursor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := conversationID + "|" + webhookID
	s.cursors[key] = cur
	s.saved[key] = append(s.saved[key], cur)
	return nil
}

func (s *store) MessageRange(_ context.Context, conversationID string, from, to int64) ([]storage.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Message
	for _, m := range s.messages[conversationID] {
		if from <= m.Seq && m.Seq <= to {
			out = append(out, m)
		}
	}
	return out, nil
}

// setHooks replaces a conversation's webhooks, as the admin API does.
func (s *store) setHooks(conversationID string, hooks ...storage.Webhook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks[conversationID] = hooks
}

// cursor is a webhook's cursor as stored.
func (s *store) cursor(conversationID, webhookID string) storage.WebhookCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[conversationID+"|"+webhookID]
}

// setCursor stores a cursor as another node would have.
func (s *store) setCursor(conversationID, webhookID string, cur storage.WebhookCursor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursors[conversationID+"|"+webhookID] = cur
}

// savedCursors is every cursor a dispatcher saved for a webhook, in order.
func (s *store) savedCursors(conversationID, webhookID string) []storage.WebhookCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.saved[conversationID+"|"+webhookID])
}

// waitCursor waits for a webhook's stored cursor to be want.
func (s *store) waitCursor(t *testing.T, conversationID, webhookID string, want storage.WebhookCursor) {
	t.Helper()
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if got := s.cursor(conversationID, webhookID); got != want {
			return fmt.Errorf("cursor of webhook %s is %+v; want %+v", webhookID, got, want)
		}
		return nil
	})
}

// conversation plays a conversation's owner: it stores each message before the dispatcher hears
// of it, as the sequencer does, and numbers its changes. Each message's body names its seq.
type conversation struct {
	id           string
	st           *store
	seq, version int64
}

// register adds a webhook to the conversation with its cursor where the conversation is now, as
// registering one does (a webhook gets the events after it was registered, not the history).
func (c *conversation) register(hooks ...storage.Webhook) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	for _, h := range hooks {
		c.st.hooks[c.id] = append(c.st.hooks[c.id], h)
		c.st.cursors[c.id+"|"+h.ID] = storage.WebhookCursor{Seq: c.seq, Version: c.version}
	}
}

// store writes the next message with no dispatcher hearing of it (its owner died, or moved).
func (c *conversation) store(kind string) protocol.Message {
	c.seq++
	m := storage.Message{ConversationID: c.id, Seq: c.seq, SenderID: "alice", Kind: kind,
		Body: fmt.Sprintf("message %d", c.seq), CreatedAt: sentAt.Add(time.Duration(c.seq) * time.Second),
		ClientMsgID: fmt.Sprintf("c-%d", c.seq)}
	c.st.mu.Lock()
	c.st.messages[c.id] = append(c.st.messages[c.id], m)
	c.st.mu.Unlock()
	return message.View(m, "")
}

// send stores the next text message and tells d; it returns the message's label.
func (c *conversation) send(d *webhook.Dispatcher) string {
	m := c.store(protocol.KindText)
	d.Stored(m, []string{"alice", "bob"})
	return fmt.Sprintf("message %d", m.Seq)
}

// change makes the next change (message.OpEdit and the like) to message seq and tells d; it
// returns the change's label.
func (c *conversation) change(d *webhook.Dispatcher, op string, seq int64) string {
	c.version++
	ch := sequencer.Change{Op: op, ConversationID: c.id, Seq: seq, Version: c.version, UserID: "alice", Members: 2}
	switch op {
	case message.OpEdit:
		ch.Body = fmt.Sprintf("message %d, edited", seq)
	case message.OpReact:
		ch.Emoji, ch.Count = "👍", 1
	}
	d.Changed(ch)
	return fmt.Sprintf("%s %d v%d", op, seq, c.version)
}

// request is one POST as the receiver got it.
type request struct {
	at                                        time.Time
	method, contentType, kind, key, signature string
	body                                      []byte
	event                                     webhook.Event
	signed                                    bool // the signature verifies with the webhook's secret
	status                                    int  // 0: the sender went away before an answer
}

// label names an event the way conversation's methods do.
func label(ev webhook.Event) string {
	if ev.Event == webhook.EventMessage {
		return fmt.Sprintf("message %d", ev.Seq)
	}
	return fmt.Sprintf("%s %d v%d", ev.Event, ev.Seq, ev.Version)
}

// receiver is the receiving end of a webhook: a real HTTP server that checks each request's
// signature with the webhook's secret the way docs/PROTOCOL.md tells receivers to, and records
// every request in the order they arrive.
type receiver struct {
	srv    *httptest.Server
	secret string
	// answer, when set, is the status for the attempt'th request of ev (from 1); it may block
	// until the request's context ends. Unset, every request is accepted.
	answer func(r *http.Request, ev webhook.Event, attempt int) int

	mu                    sync.Mutex
	requests              []*request
	inFlight, maxInFlight int
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{secret: secret}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// hook is a webhook that posts to r.
func (r *receiver) hook(id string) storage.Webhook {
	return storage.Webhook{ID: id, URL: r.srv.URL + "/chat", Secret: r.secret, CreatedBy: "admin", CreatedAt: sentAt}
}

func (r *receiver) serve(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	mac := hmac.New(sha256.New, []byte(r.secret))
	mac.Write(body)
	req := &request{at: time.Now(), method: hr.Method, contentType: hr.Header.Get("Content-Type"),
		kind: hr.Header.Get(webhook.HeaderEvent), key: hr.Header.Get(webhook.HeaderIdempotencyKey),
		signature: hr.Header.Get(webhook.HeaderSignature), body: body}
	req.signed = hmac.Equal([]byte(req.signature), []byte("sha256="+hex.EncodeToString(mac.Sum(nil))))
	_ = json.Unmarshal(body, &req.event)
	r.mu.Lock()
	attempt := 1
	for _, p := range r.requests {
		if p.event.ID == req.event.ID {
			attempt++
		}
	}
	r.requests = append(r.requests, req)
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	answer := r.answer
	r.mu.Unlock()
	status := http.StatusOK
	if answer != nil {
		status = answer(hr, req.event, attempt)
	}
	r.mu.Lock()
	r.inFlight--
	if hr.Context().Err() == nil {
		req.status = status
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

// got is a copy of every request so far.
func (r *receiver) got() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]request, len(r.requests))
	for i, p := range r.requests {
		out[i] = *p
	}
	return out
}

// accepted labels the events the receiver answered 2xx, in order.
func (r *receiver) accepted() []string {
	var out []string
	for _, req := range r.got() {
		if req.status/100 == 2 {
			out = append(out, label(req.event))
		}
	}
	return out
}

// waitAccepted waits until the receiver has accepted exactly want, in that order; it fails at once
// when what it accepted already differs.
func (r *receiver) waitAccepted(t *testing.T, want ...string) {
	t.Helper()
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		got := r.accepted()
		if slices.Equal(got, want) {
			return nil
		}
		if len(got) >= len(want) || !slices.Equal(got, want[:len(got)]) {
			return fmt.Errorf("%w: accepted %q; want %q", testenv.ErrGiveUp, got, want)
		}
		return fmt.Errorf("accepted %q; want %q", got, want)
	})
}

// gauge or counter value of a metric in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// sameJSON reports whether two JSON texts hold the same value, whatever their keys' order.
func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %s is no JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s is no JSON: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

// TestEventsArePostedSignedAsDocumented checks each kind of request against docs/PROTOCOL.md,
// "Webhooks": the body, the headers, and a signature a receiver verifies with its own webhook's
// secret (two webhooks with two secrets, so one signed with the other's fails).
func TestEventsArePostedSignedAsDocumented(t *testing.T) {
	st := newStore()
	c := &conversation{id: "0b6f", st: st}
	first, second := newReceiver(t, "the first webhook's secret"), newReceiver(t, "another secret")
	c.register(first.hook("h1"), second.hook("h2"))
	d := webhook.New(fastConfig(), st, zerolog.Nop())
	defer d.Stop()

	c.send(d)
	first.waitAccepted(t, "message 1")
	second.waitAccepted(t, "message 1")
	c.change(d, message.OpEdit, 1)
	c.change(d, message.OpDelete, 1)
	want := []string{
		`{"id": "0b6f/1", "event": "message", "conversationId": "0b6f", "seq": 1,
		  "message": {"conversationId": "0b6f", "seq": 1, "senderId": "alice", "kind": "text", "body": "message 1", "createdAt": "2026-12-06T05:00:01Z", "clientMsgId": "c-1"}}`,
		`{"id": "0b6f/1/1", "event": "edit", "conversationId": "0b6f", "seq": 1, "version": 1, "userId": "alice", "body": "message 1, edited"}`,
		`{"id": "0b6f/1/2", "event": "delete", "conversationId": "0b6f", "seq": 1, "version": 2, "userId": "alice"}`,
	}
	for _, r := range []*receiver{first, second} {
		r.waitAccepted(t, "message 1", "edit 1 v1", "delete 1 v2")
		for i, req := range r.got() {
			if !sameJSON(t, req.body, want[i]) {
				t.Errorf("request %d has body %s; want %s", i, req.body, want[i])
			}
			if req.method != http.MethodPost || req.contentType != "application/json" {
				t.Errorf("request %d is a %s of %q; want a POST of application/json", i, req.method, req.contentType)
			}
			if req.kind != req.event.Event || req.key != req.event.ID {
				t.Errorf("request %d has %s %q and %s %q; want its body's event %q and id %q",
					i, webhook.HeaderEvent, req.kind, webhook.HeaderIdempotencyKey, req.key, req.event.Event, req.event.ID)
			}
			if !req.signed {
				t.Errorf("request %d has %s %q, which is not sha256= and the HMAC-SHA256 of its body with secret %q",
					i, webhook.HeaderSignature, req.signature, r.secret)
			}
		}
	}
}

// TestEventsArriveOneAtATimeInOrder sends a burst of messages, edits, deletions and reactions:
// the receiver, which takes a moment over each request, gets one request at a time, every
// message in seq order, each change after its message and in version order, no reaction, and
// nothing twice.
func TestEventsArriveOneAtATimeInOrder(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	r.answer = func(*http.Request, webhook.Event, int) int {
		time.Sleep(time.Millisecond) // a receiver at work, so that two requests at once would overlap
		return http.StatusOK
	}
	c.register(r.hook("h1"))
	d := webhook.New(fastConfig(), st, zerolog.Nop())
	defer d.Stop()

	want := []string{c.send(d)}
	// Wait until the dispatcher has read the conversation's webhooks, so that every event below
	// goes straight to the deliverer, in the order heard.
	r.waitAccepted(t, want...)
	for i := int64(2); i <= 40; i++ {
		want = append(want, c.send(d))
		c.change(d, message.OpReact, i) // not sent, though it takes a version
		if i%3 == 0 {
			want = append(want, c.change(d, message.OpEdit, i-1))
		}
		if i%5 == 0 {
			want = append(want, c.change(d, message.OpDelete, i-2))
		}
	}
	r.waitAccepted(t, want...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxInFlight != 1 {
		t.Errorf("the receiver had %d requests at once; want one at a time", r.maxInFlight)
	}
}

// TestFailingReceiverGetsTheSameEventUntilItAccepts has the receiver refuse message 2 until the
// webhook counts as failing: it gets message 2 again and again, the same bytes and key each time,
// after a doubling backoff, and nothing after it before it accepts it; the stored cursor stays
// at message 1 meanwhile. Then everything else arrives in order, and the metrics count it.
func TestFailingReceiverGetsTheSameEventUntilItAccepts(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	var up atomic.Bool
	r.answer = func(_ *http.Request, ev webhook.Event, _ int) int {
		if ev.ID == "c1/2" && !up.Load() {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	c.register(r.hook("h1"))
	reg := prometheus.NewRegistry()
	cfg := fastConfig()
	cfg.Backoff, cfg.MaxBackoff = 10*time.Millisecond, 20*time.Millisecond
	cfg.Metrics = webhook.NewMetrics(reg)
	d := webhook.New(cfg, st, zerolog.Nop())
	defer d.Stop()

	want := []string{c.send(d)}
	r.waitAccepted(t, want...)
	want = append(want, c.send(d), c.change(d, message.OpEdit, 2), c.send(d), c.send(d))
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if failing := metric(t, reg, "chatd_webhooks_failing"); failing != 1 {
			return fmt.Errorf("%v webhooks failing after %v failed attempts; want 1 after 5",
				failing, metric(t, reg, "chatd_webhook_failures_total"))
		}
		return nil
	})
	if cur := st.cursor("c1", "h1"); cur != (storage.WebhookCursor{Seq: 1}) {
		t.Errorf("while message 2 is refused the stored cursor is %+v; want seq 1", cur)
	}
	up.Store(true)
	r.waitAccepted(t, want...)
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if failing := metric(t, reg, "chatd_webhooks_failing"); failing != 0 {
			return fmt.Errorf("%v webhooks failing after the receiver accepted; want 0", failing)
		}
		return nil
	})

	got := r.got()
	var refused []request
	for _, req := range got[1:] {
		if req.status/100 == 2 {
			break
		}
		refused = append(refused, req)
	}
	if len(refused) < 5 {
		t.Fatalf("%d refused attempts before the first accepted after message 1; want at least 5", len(refused))
	}
	for i, req := range refused {
		if req.event.ID != "c1/2" {
			t.Errorf("attempt %d while message 2 was refused carried %s; want message 2 until it is accepted", i, label(req.event))
		}
		if string(req.body) != string(got[1].body) || req.key != got[1].key || req.signature != got[1].signature {
			t.Errorf("attempt %d of message 2 differs from the first: %s %q %q; want %s %q %q",
				i, req.body, req.key, req.signature, got[1].body, got[1].key, got[1].signature)
		}
	}
	// The waits double from Backoff: a timer never fires early, so these bounds hold however
	// slow the machine.
	if gap := refused[1].at.Sub(refused[0].at); gap < cfg.Backoff {
		t.Errorf("second attempt %s after the first; want at least the backoff %s", gap, cfg.Backoff)
	}
	if gap := refused[2].at.Sub(refused[1].at); gap < 2*cfg.Backoff {
		t.Errorf("third attempt %s after the second; want at least twice the backoff %s", gap, 2*cfg.Backoff)
	}
	if failures, n := metric(t, reg, "chatd_webhook_failures_total"), len(got)-len(want); failures != float64(n) {
		t.Errorf("chatd_webhook_failures_total %v; want the %d refused attempts", failures, n)
	}
	// The dispatcher counts an acceptance once the answer is back, after the receiver records it.
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if delivered := metric(t, reg, "chatd_webhook_deliveries_total"); delivered != float64(len(want)) {
			return fmt.Errorf("chatd_webhook_deliveries_total %v; want %d", delivered, len(want))
		}
		return nil
	})
}

// TestReceiverThatDoesNotAnswerInTimeIsRetried has the receiver hang on its first request: after
// the timeout the event is sent again.
func TestReceiverThatDoesNotAnswerInTimeIsRetried(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	r.answer = func(hr *http.Request, _ webhook.Event, attempt int) int {
		if attempt == 1 {
			<-hr.Context().Done() // the sender gives up
		}
		return http.StatusOK
	}
	c.register(r.hook("h1"))
	cfg := fastConfig()
	cfg.Timeout = 50 * time.Millisecond
	d := webhook.New(cfg, st, zerolog.Nop())
	defer d.Stop()

	c.send(d)
	r.waitAccepted(t, "message 1")
	if got := r.got(); len(got) != 2 || got[0].status != 0 {
		t.Errorf("requests %+v; want one unanswered and one accepted", got)
	}
}

// TestNewOwnerResumesAfterTheLastAcceptedEvent moves a conversation between two dispatchers
// sharing a store: the cursor moves as the receiver accepts and not past what it refused, and
// the new owner sends the refused message, fills the messages no owner heard from the store,
// sends nothing the receiver accepted before, and goes on.
func TestNewOwnerResumesAfterTheLastAcceptedEvent(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	var down atomic.Bool
	r.answer = func(*http.Request, webhook.Event, int) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	c.register(r.hook("h1"))
	old := webhook.New(fastConfig(), st, zerolog.Nop())
	defer old.Stop()

	want := []string{c.send(old)}
	r.waitAccepted(t, want...)
	want = append(want, c.send(old), c.send(old))
	r.waitAccepted(t, want...)
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 3})
	want = append(want, c.change(old, message.OpEdit, 2))
	r.waitAccepted(t, want...)
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 3, Version: 1})
	down.Store(true)
	want = append(want, c.send(old)) // message 4, refused while the old owner has it
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if n := len(r.got()); n < len(want)+1 {
			return fmt.Errorf("%d requests; want message 4 refused twice", n)
		}
		return nil
	})
	old.Stop()
	if cur := st.cursor("c1", "h1"); cur != (storage.WebhookCursor{Seq: 3, Version: 1}) {
		t.Fatalf("cursor %+v after message 4 was refused; want seq 3 version 1", cur)
	}
	want = append(want, "message 5", "message 6")
	c.store(protocol.KindText) // heard by no owner while the conversation moved
	c.store(protocol.KindText)
	down.Store(false)

	owner := webhook.New(fastConfig(), st, zerolog.Nop())
	defer owner.Stop()
	want = append(want, c.send(owner))
	r.waitAccepted(t, want...)
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 7, Version: 1})
	owner.Changed(sequencer.Change{Op: message.OpEdit, ConversationID: "c1", Seq: 2, Version: 1, UserID: "alice", Body: "again"})
	want = append(want, c.change(owner, message.OpDelete, 3))
	r.waitAccepted(t, want...)
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 7, Version: 2})
	saved := st.savedCursors("c1", "h1")
	for i := 1; i < len(saved); i++ {
		if saved[i].Seq < saved[i-1].Seq || saved[i].Version < saved[i-1].Version {
			t.Errorf("cursor saved as %+v after %+v: it went back", saved[i], saved[i-1])
		}
	}
}

// TestIdleDelivererResumesFromTheStoredCursor has another owner deliver while this one's
// deliverer is idle: what the other delivered is not sent again.
func TestIdleDelivererResumesFromTheStoredCursor(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	c.register(r.hook("h1"))
	d := webhook.New(fastConfig(), st, zerolog.Nop())
	defer d.Stop()

	c.send(d)
	c.send(d)
	r.waitAccepted(t, "message 1", "message 2")
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 2})
	// Meanwhile the partition was elsewhere, and its owner there delivered messages 3 and 4.
	c.store(protocol.KindText)
	c.store(protocol.KindText)
	st.setCursor("c1", "h1", storage.WebhookCursor{Seq: 4})
	c.send(d)
	r.waitAccepted(t, "message 1", "message 2", "message 5")
}

// TestFullQueueIsFilledFromTheStore overflows a webhook's queue while its receiver holds a
// request: the messages dropped are counted, read from the store once the queue is drained (no
// later message needed), and the receiver gets every message once, in order.
func TestFullQueueIsFilledFromTheStore(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	hold := make(chan struct{})
	r.answer = func(hr *http.Request, ev webhook.Event, _ int) int {
		if ev.ID == "c1/2" {
			select {
			case <-hold:
			case <-hr.Context().Done():
			}
		}
		return http.StatusOK
	}
	c.register(r.hook("h1"))
	reg := prometheus.NewRegistry()
	cfg := fastConfig()
	cfg.Queue = 1
	cfg.Metrics = webhook.NewMetrics(reg)
	d := webhook.New(cfg, st, zerolog.Nop())
	defer d.Stop()

	want := []string{c.send(d)}
	r.waitAccepted(t, want...)
	want = append(want, c.send(d))
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if n := len(r.got()); n != 2 {
			return fmt.Errorf("%d requests; want message 2 held", n)
		}
		return nil
	})
	for range 8 {
		want = append(want, c.send(d)) // 3 is queued, 4 to 10 dropped
	}
	if dropped := metric(t, reg, "chatd_webhook_dropped_total"); dropped != 7 {
		t.Errorf("chatd_webhook_dropped_total %v; want 7", dropped)
	}
	close(hold)
	r.waitAccepted(t, want...) // 1, 2, the queued 3, then 4 to 10 from the store, with no message after them
}

// TestFailingWebhooksDoNotHoldUpOthers gives a conversation a webhook whose receiver refuses
// everything and one whose URL answers nothing: the conversation's other webhook and another
// conversation's get every message, and the failing ones never get past the first.
func TestFailingWebhooksDoNotHoldUpOthers(t *testing.T) {
	st := newStore()
	c1, c2 := &conversation{id: "c1", st: st}, &conversation{id: "c2", st: st}
	refusing, up, other := newReceiver(t, "secret"), newReceiver(t, "secret"), newReceiver(t, "secret")
	refusing.answer = func(*http.Request, webhook.Event, int) int { return http.StatusBadGateway }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := storage.Webhook{ID: "nobody", URL: "http://" + l.Addr().String() + "/chat", Secret: "secret"}
	l.Close()
	c1.register(refusing.hook("refusing"), nobody, up.hook("up"))
	c2.register(other.hook("other"))
	d := webhook.New(fastConfig(), st, zerolog.Nop())
	defer d.Stop()

	var want []string
	for range 5 {
		want = append(want, c1.send(d))
		c2.send(d)
	}
	up.waitAccepted(t, want...)
	other.waitAccepted(t, want...)
	testenv.CheckFor(t, waitFor, 2*time.Millisecond, func() error {
		if n := len(refusing.got()); n < 3 {
			return fmt.Errorf("the refusing receiver got %d requests; want message 1 again and again", n)
		}
		return nil
	})
	for _, req := range refusing.got() {
		if req.event.ID != "c1/1" {
			t.Errorf("the refusing receiver got %s; want only message 1, which it never accepted", label(req.event))
		}
	}
	if cur := st.cursor("c1", "nobody"); cur != (storage.WebhookCursor{}) {
		t.Errorf("cursor of the webhook nobody answers is %+v; want where it was registered", cur)
	}
}

// TestSystemMessagesAreNotSentButMoveTheCursor: system messages only move the cursor.
func TestSystemMessagesAreNotSentButMoveTheCursor(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	c.register(r.hook("h1"))
	d := webhook.New(fastConfig(), st, zerolog.Nop())
	defer d.Stop()

	c.send(d)
	r.waitAccepted(t, "message 1")
	d.Stored(c.store(protocol.KindSystem), nil)
	c.send(d)
	r.waitAccepted(t, "message 1", "message 3")
	st.waitCursor(t, "c1", "h1", storage.WebhookCursor{Seq: 3})
}

// TestWebhookChangesTakeEffectAfterTheListIsReadAgain removes one webhook and registers
// another on an active conversation: once the dispatcher has read the list again (the new
// webhook hears something), the removed one gets no later message, and the new one gets every
// message after it was registered, none before.
func TestWebhookChangesTakeEffectAfterTheListIsReadAgain(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	stays, removed, added := newReceiver(t, "secret"), newReceiver(t, "secret"), newReceiver(t, "secret")
	c.register(stays.hook("stays"), removed.hook("removed"))
	cfg := fastConfig()
	cfg.HooksTTL = 20 * time.Millisecond
	d := webhook.New(cfg, st, zerolog.Nop())
	defer d.Stop()

	all := []string{c.send(d), c.send(d)}
	stays.waitAccepted(t, all...)
	removed.waitAccepted(t, all...)
	st.setHooks("c1", stays.hook("stays"))
	c.register(added.hook("added")) // its cursor: message 2
	// Send until the list is read again, which a message after HooksTTL starts.
	testenv.CheckFor(t, waitFor, 5*time.Millisecond, func() error {
		all = append(all, c.send(d))
		if len(added.got()) == 0 {
			return fmt.Errorf("the new webhook got nothing of messages 3 to %d", c.seq)
		}
		return nil
	})
	readAgain := c.seq
	var since []string
	for i := int64(3); i <= readAgain; i++ {
		since = append(since, fmt.Sprintf("message %d", i))
	}
	for range 3 {
		m := c.send(d)
		all, since = append(all, m), append(since, m)
	}
	stays.waitAccepted(t, all...)
	added.waitAccepted(t, since...)
	for _, req := range removed.got() {
		if req.event.Seq > readAgain {
			t.Errorf("the removed webhook got %s, sent after the list was read again (message %d)", label(req.event), readAgain)
		}
	}
}

// gatedStore holds WebhooksOf until gate is closed, and counts cursor reads.
type gatedStore struct {
	*store
	gate        chan struct{}
	cursorReads atomic.Int64
}

func (g *gatedStore) WebhooksOf(ctx context.Context, id string) ([]storage.Webhook, error) {
	<-g.gate
	return g.store.WebhooksOf(ctx, id)
}

func (g *gatedStore) WebhookCursorOf(ctx context.Context, c, w string) (storage.WebhookCursor, error) {
	g.cursorReads.Add(1)
	return g.store.WebhookCursorOf(ctx, c, w)
}

// TestAChangeHeardWhileTheListIsReadIsDelivered: the edit of a message heard while the
// conversation's webhooks are first read (a node that just became its owner) is delivered after
// the message, not lost.
func TestAChangeHeardWhileTheListIsReadIsDelivered(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	c.register(r.hook("h1"))
	gs := &gatedStore{store: st, gate: make(chan struct{})}
	d := webhook.New(fastConfig(), gs, zerolog.Nop())
	defer d.Stop()
	want := []string{c.send(d), c.change(d, message.OpEdit, 1)}
	close(gs.gate)
	r.waitAccepted(t, want...)
	want = append(want, c.send(d))
	r.waitAccepted(t, want...)
}

// TestANewOwnerSendsTheMessagesBeforeAChangeOfThem: a new owner whose first event past the
// cursor is an edit delivers the messages between the cursor and the edited one first, from the
// store.
func TestANewOwnerSendsTheMessagesBeforeAChangeOfThem(t *testing.T) {
	st := newStore()
	c := &conversation{id: "c1", st: st}
	r := newReceiver(t, "secret")
	c.register(r.hook("h1"))
	for range 5 {
		c.store("text") // the old owner stored 1..5; its receiver accepted up to 3
	}
	st.setCursor("c1", "h1", storage.WebhookCursor{Seq: 3})
	gs := &gatedStore{store: st, gate: make(chan struct{})}
	close(gs.gate)
	d := webhook.New(fastConfig(), gs, zerolog.Nop())
	defer d.Stop()
	d.Stored(message.View(st.messages["c1"][2], ""), nil) // message 3 republished: already accepted
	testenv.CheckFor(t, waitFor, time.Millisecond, func() error {
		if gs.cursorReads.Load() == 0 {
			return fmt.Errorf("deliverer not started")
		}
		return nil
	})
	want := []string{"message 4", "message 5", c.change(d, message.OpEdit, 5)}
	r.waitAccepted(t, want...)
}
