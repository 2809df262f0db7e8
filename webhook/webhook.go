// Package webhook POSTs a conversation's events (new messages, edits, deletions) to the outgoing
// webhooks registered for it, signed with each webhook's secret. It hears the events on the
// conversation's owner (a sequencer.Observer), delivers each webhook's events one at a time in
// the owner's order, retries a failing receiver with backoff for as long as it fails, and keeps a
// durable cursor per webhook in the store, so a new owner resumes after the last event the
// receiver accepted and fills a gap of messages from the store.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// Defaults, each with the reason it is what it is.
const (
	// DefaultBackoff is the wait after a first failed attempt; it doubles up to DefaultMaxBackoff.
	DefaultBackoff = time.Second
	// DefaultMaxBackoff caps the wait between attempts: a receiver back from an outage hears
	// within a minute.
	DefaultMaxBackoff = time.Minute
	// DefaultTimeout bounds one POST: a receiver should answer at once and work afterwards.
	DefaultTimeout = 10 * time.Second
	// DefaultQueue bounds the events waiting per webhook; past it new messages are left to the
	// store, from where the deliverer fills the gap once it drained the queue, and a change is
	// dropped (counted).
	DefaultQueue = 4096
	// DefaultHooksTTL is how long a conversation's list of webhooks is kept in memory: one store
	// read per active conversation per this long. A new webhook starts within it and misses no
	// message meanwhile (its cursor starts where the conversation was when it was registered);
	// the changes made before it starts are not sent to it.
	DefaultHooksTTL = 30 * time.Second
	// maxCached bounds the conversations whose webhook lists are kept; past it those without
	// webhooks are forgotten (and read again at their next event).
	maxCached = 100000
	// maxHeardChanges bounds the edits and deletions kept for a conversation while its list of
	// webhooks is read; past it the oldest are dropped (counted).
	maxHeardChanges = 1024
	// failingAfter is the number of failed attempts in a row after which a webhook counts as
	// failing (chatd_webhooks_failing).
	failingAfter = 5
	// storeTimeout bounds the store round trips of one event.
	storeTimeout = 10 * time.Second
	// gapPage bounds the messages read from the store at once to fill a gap.
	gapPage = 200
)

// Headers of a webhook request.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256 of the body with the webhook's secret.
	HeaderSignature = "X-Chatd-Signature"
	// HeaderEvent is the event's kind, as in its body.
	HeaderEvent = "X-Chatd-Event"
	// HeaderIdempotencyKey names the event: the same on every attempt of it, on any node.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// The kinds of Event.
const (
	EventMessage = "message"
	EventEdit    = "edit"
	EventDelete  = "delete"
)

// Event is the JSON body of a webhook request (docs/PROTOCOL.md, "Webhooks").
type Event struct {
	ID             string `json:"id"`
	Event          string `json:"event"`
	ConversationID string `json:"conversationId"`
	Seq            int64  `json:"seq"`
	// Version numbers an edit or a deletion among the conversation's changes.
	Version int64 `json:"version,omitempty"`
	// Message is the new message of a message event.
	Message *protocol.Message `json:"message,omitempty"`
	// UserID made the edit or deletion; Body is the edited text.
	UserID string `json:"userId,omitempty"`
	Body   string `json:"body,omitempty"`
}

// Sign is the HeaderSignature value of body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Config tunes a Dispatcher. Zero fields take the defaults above.
type Config struct {
	Backoff, MaxBackoff, Timeout, HooksTTL time.Duration
	Queue                                  int
	// HTTPClient posts the events; nil means a client with Timeout.
	HTTPClient *http.Client
	// Metrics records deliveries; nil records nothing.
	Metrics *Metrics
}

// Store is what the dispatcher reads and writes.
type Store interface {
	WebhooksOf(ctx context.Context, conversationID string) ([]storage.Webhook, error)
	WebhookCursorOf(ctx context.Context, conversationID, webhookID string) (storage.WebhookCursor, error)
	SaveWebhookCursor(ctx context.Context, conversationID, webhookID string, cur storage.WebhookCursor) error
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
}

// Dispatcher delivers the events of the conversations this node owns to their webhooks.
type Dispatcher struct {
	cfg   Config
	store Store
	http  *http.Client
	log   zerolog.Logger

	mu      sync.Mutex
	hooks   map[string]cachedHooks // by conversation
	running map[string]*deliverer  // by conversation|webhook
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// cachedHooks is a conversation's webhooks as last read, the newest message heard since, and the
// changes heard while they are read again: what a webhook the read finds is handed first.
type cachedHooks struct {
	hooks      []storage.Webhook
	readAt     time.Time
	refreshing bool
	last       *Event
	changes    []Event
}

// New returns a dispatcher; Stop ends its deliverers.
func New(cfg Config, store Store, log zerolog.Logger) *Dispatcher {
	for _, f := range []struct {
		v *time.Duration
		d time.Duration
	}{
		{&cfg.Backoff, DefaultBackoff}, {&cfg.MaxBackoff, DefaultMaxBackoff}, {&cfg.Timeout, DefaultTimeout}, {&cfg.HooksTTL, DefaultHooksTTL}} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout}
	}
	d := &Dispatcher{cfg: cfg, store: store, http: client, log: log.With().Str("component", "webhook").Logger(),
		hooks: make(map[string]cachedHooks), running: make(map[string]*deliverer)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Stop ends every deliverer and waits for them; what they had not delivered is delivered by the
// conversation's next owner, from the cursors.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}

// Stored queues a new message for the conversation's webhooks.
func (d *Dispatcher) Stored(m protocol.Message, _ []string) {
	if m.Kind == protocol.KindSystem {
		return
	}
	d.queue(m.ConversationID, Event{ID: fmt.Sprintf("%s/%d", m.ConversationID, m.Seq), Event: EventMessage,
		ConversationID: m.ConversationID, Seq: m.Seq, Message: &m})
}

// Changed queues an edit or a deletion for the conversation's webhooks; reactions are not sent.
func (d *Dispatcher) Changed(c sequencer.Change) {
	kind := map[string]string{message.OpEdit: EventEdit, message.OpDelete: EventDelete}[c.Op]
	if kind == "" {
		return
	}
	d.queue(c.ConversationID, Event{ID: fmt.Sprintf("%s/%d/%d", c.ConversationID, c.Seq, c.Version), Event: kind,
		ConversationID: c.ConversationID, Seq: c.Seq, Version: c.Version, UserID: c.UserID, Body: c.Body})
}

// queue hands ev to each webhook's deliverer, starting those not running. It runs in the owner's
// batch: the list of webhooks comes from memory, read again after HooksTTL on a goroutine of its
// own, so no event waits for the store. While a conversation's first list is read its messages
// wait in the store: the newest of them is handed on when the list arrives, after the changes
// heard meanwhile, and the deliverers fill the gaps of messages from their cursors.
func (d *Dispatcher) queue(conversationID string, ev Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	if len(d.hooks) >= maxCached {
		maps.DeleteFunc(d.hooks, func(_ string, c cachedHooks) bool { return len(c.hooks) == 0 && !c.refreshing })
	}
	cached, ok := d.hooks[conversationID]
	if !cached.refreshing && (!ok || time.Since(cached.readAt) > d.cfg.HooksTTL) {
		cached.refreshing = true
		d.wg.Go(func() { d.refresh(conversationID) })
	}
	switch {
	case ev.Event == EventMessage:
		cached.last = &ev
	case cached.refreshing:
		if len(cached.changes) == maxHeardChanges {
			cached.changes = slices.Delete(cached.changes, 0, 1)
			d.cfg.Metrics.dropped()
		}
		cached.changes = append(cached.changes, ev)
	}
	d.hooks[conversationID] = cached
	for _, h := range cached.hooks {
		d.deliverer(conversationID, h).put(ev, d.cfg.Metrics)
	}
}

// refresh reads a conversation's webhooks into memory, starts deliverers of new ones (handing
// them the changes heard during the read, then the newest message heard) and stops those of
// webhooks removed.
func (d *Dispatcher) refresh(conversationID string) {
	ctx, cancel := context.WithTimeout(d.ctx, storeTimeout)
	defer cancel()
	hooks, err := d.store.WebhooksOf(ctx, conversationID)
	d.mu.Lock()
	defer d.mu.Unlock()
	cached := d.hooks[conversationID]
	cached.refreshing = false
	if err != nil {
		d.log.Warn().Err(err).Str("conversation", conversationID).Msg("read webhooks")
		d.hooks[conversationID] = cached
		return
	}
	if d.stopped {
		return
	}
	for key, dl := range d.running {
		if dl.conversationID == conversationID && !slices.ContainsFunc(hooks, func(h storage.Webhook) bool { return h.ID == dl.hook.ID }) {
			dl.cancel()
			delete(d.running, key)
		}
	}
	heard := cached.changes
	if cached.last != nil {
		heard = append(heard, *cached.last)
	}
	for _, h := range hooks {
		if _, running := d.running[conversationID+"|"+h.ID]; running || len(heard) == 0 {
			continue
		}
		dl := d.deliverer(conversationID, h)
		for _, ev := range heard {
			dl.put(ev, d.cfg.Metrics)
		}
	}
	d.hooks[conversationID] = cachedHooks{hooks: hooks, readAt: time.Now()}
}

// deliverer returns the running deliverer of a webhook, starting it. Callers hold d.mu.
func (d *Dispatcher) deliverer(conversationID string, h storage.Webhook) *deliverer {
	key := conversationID + "|" + h.ID
	dl, ok := d.running[key]
	if !ok || dl.hook.URL != h.URL || dl.hook.Secret != h.Secret {
		if ok {
			dl.cancel()
		}
		dl = &deliverer{d: d, conversationID: conversationID, hook: h, events: make(chan Event, d.cfg.Queue)}
		var ctx context.Context
		ctx, dl.cancel = context.WithCancel(d.ctx)
		d.running[key] = dl
		d.wg.Go(func() { dl.run(ctx) })
	}
	return dl
}

// deliverer sends one webhook's events, one at a time, in order.
type deliverer struct {
	d              *Dispatcher
	conversationID string
	hook           storage.Webhook
	events         chan Event
	cancel         context.CancelFunc
	// newest is the highest seq of a message put, queued or dropped: once the queue is empty
	// the deliverer fills in from the store up to it.
	newest atomic.Int64
}

// put queues ev without blocking; a full queue drops it (a message is filled in from the store).
// Callers hold d.mu.
func (dl *deliverer) put(ev Event, m *Metrics) {
	if ev.Event == EventMessage && ev.Seq > dl.newest.Load() {
		dl.newest.Store(ev.Seq)
	}
	select {
	case dl.events <- ev:
	default:
		m.dropped()
	}
}

// run delivers events until ctx ends. An event at or below the cursor was accepted already (a
// republished message, a retry); a message past the cursor's next seq, or a change of a message
// past the cursor, first has the gap filled from the store, so the receiver sees every message
// in seq order and each change after its message.
func (dl *deliverer) run(ctx context.Context) {
	cur, err := dl.cursor(ctx)
	for err != nil {
		dl.d.log.Warn().Err(err).Str("webhook", dl.hook.ID).Msg("read webhook cursor")
		if !sleep(ctx, dl.d.cfg.Backoff) {
			return
		}
		cur, err = dl.cursor(ctx)
	}
	for {
		var ev Event
		select {
		case ev = <-dl.events:
		default:
			// Drained: the messages a full queue dropped are filled in now, not with the next one.
			if newest := dl.newest.Load(); newest > cur.Seq {
				if !dl.fill(ctx, &cur, newest) {
					return
				}
				continue
			}
			// Idle: the partition may move away and back meanwhile, and another owner deliver
			// further; the burst that wakes this deliverer starts from the stored cursor.
			select {
			case ev = <-dl.events:
			case <-ctx.Done():
				return
			}
			if stored, err := dl.cursor(ctx); err == nil {
				cur.Seq, cur.Version = max(cur.Seq, stored.Seq), max(cur.Version, stored.Version)
			}
		}
		switch {
		case ev.Event == EventMessage:
			if !dl.fill(ctx, &cur, ev.Seq-1) {
				return
			}
			if ev.Seq == cur.Seq+1 && !dl.deliverMessage(ctx, &cur, *ev.Message) {
				return
			}
		case ev.Version > cur.Version:
			if !dl.fill(ctx, &cur, ev.Seq) || !dl.post(ctx, ev) {
				return
			}
			cur.Version = ev.Version
			dl.save(ctx, cur)
		}
	}
}

// fill delivers the messages after the cursor up to seq to, read from the store; it returns false
// only when ctx ends.
func (dl *deliverer) fill(ctx context.Context, cur *storage.WebhookCursor, to int64) bool {
	for to > cur.Seq {
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		msgs, err := dl.d.store.MessageRange(sctx, dl.conversationID, cur.Seq+1, min(to, cur.Seq+gapPage))
		cancel()
		if err != nil || len(msgs) == 0 {
			dl.d.log.Warn().Err(err).Str("webhook", dl.hook.ID).Int64("after", cur.Seq).Msg("read messages a webhook missed")
			if !sleep(ctx, dl.d.cfg.Backoff) {
				return false
			}
			continue
		}
		for _, m := range msgs {
			v := message.View(m, "")
			if !dl.deliverMessage(ctx, cur, v) {
				return false
			}
		}
	}
	return true
}

// deliverMessage posts one message (system messages only move the cursor) and moves the cursor.
func (dl *deliverer) deliverMessage(ctx context.Context, cur *storage.WebhookCursor, m protocol.Message) bool {
	if m.Kind != protocol.KindSystem {
		if !dl.post(ctx, Event{ID: fmt.Sprintf("%s/%d", m.ConversationID, m.Seq), Event: EventMessage,
			ConversationID: m.ConversationID, Seq: m.Seq, Message: &m}) {
			return false
		}
	}
	cur.Seq = m.Seq
	dl.save(ctx, *cur)
	return true
}

func (dl *deliverer) cursor(ctx context.Context) (storage.WebhookCursor, error) {
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	return dl.d.store.WebhookCursorOf(sctx, dl.conversationID, dl.hook.ID)
}

// save stores the cursor; a failure only means the next owner may deliver an event again, which
// its idempotency key lets the receiver see.
func (dl *deliverer) save(ctx context.Context, cur storage.WebhookCursor) {
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := dl.d.store.SaveWebhookCursor(sctx, dl.conversationID, dl.hook.ID, cur); err != nil {
		dl.d.log.Warn().Err(err).Str("webhook", dl.hook.ID).Msg("store webhook cursor")
	}
}

// post sends ev until the receiver answers 2xx, waiting a doubling backoff between attempts; it
// returns false only when ctx ends.
func (dl *deliverer) post(ctx context.Context, ev Event) bool {
	body, err := json.Marshal(ev)
	if err != nil {
		dl.d.log.Error().Err(err).Msg("encode webhook event")
		return true
	}
	wait := dl.d.cfg.Backoff
	for failures := 0; ; failures++ {
		if failures == failingAfter {
			dl.d.cfg.Metrics.failingNow(1)
		}
		err := dl.attempt(ctx, ev, body)
		if err == nil {
			dl.d.cfg.Metrics.delivered()
			if failures >= failingAfter {
				dl.d.cfg.Metrics.failingNow(-1)
			}
			return true
		}
		dl.d.cfg.Metrics.failed()
		dl.d.log.Debug().Err(err).Str("webhook", dl.hook.ID).Str("event", ev.ID).Msg("webhook attempt failed")
		if !sleep(ctx, wait) {
			if failures >= failingAfter {
				dl.d.cfg.Metrics.failingNow(-1)
			}
			return false
		}
		wait = min(2*wait, dl.d.cfg.MaxBackoff)
	}
}

// attempt POSTs body once.
func (dl *deliverer) attempt(ctx context.Context, ev Event, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, dl.d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.hook.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderEvent, ev.Event)
	req.Header.Set(HeaderIdempotencyKey, ev.ID)
	req.Header.Set(HeaderSignature, Sign(dl.hook.Secret, body))
	resp, err := dl.d.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %s", strconv.Itoa(resp.StatusCode))
	}
	return nil
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Metrics are the webhook instruments. A nil *Metrics records nothing.
type Metrics struct {
	deliveredTotal, failedTotal, droppedTotal prometheus.Counter
	failing                                   prometheus.Gauge
}

// NewMetrics creates the webhook instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		deliveredTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_webhook_deliveries_total",
			Help: "Webhook events a receiver accepted (2xx)."}),
		failedTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_webhook_failures_total",
			Help: "Webhook attempts that failed (no answer or not 2xx); each is retried."}),
		droppedTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_webhook_dropped_total",
			Help: "Webhook events not queued because the webhook's queue was full (messages are filled in from the store; edits and deletions are lost)."}),
		failing: f.NewGauge(prometheus.GaugeOpts{Name: "chatd_webhooks_failing",
			Help: "Webhooks on this node whose current event has failed 5 attempts or more in a row."}),
	}
}

func (m *Metrics) delivered() {
	if m != nil {
		m.deliveredTotal.Inc()
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failedTotal.Inc()
	}
}

func (m *Metrics) dropped() {
	if m != nil {
		m.droppedTotal.Inc()
	}
}

func (m *Metrics) failingNow(delta float64) {
	if m != nil {
		m.failing.Add(delta)
	}
}
