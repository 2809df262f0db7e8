// Package push notifies people who have no live connection: it sends Web Push notifications
// (RFC 8030, encrypted per RFC 8291, signed with VAPID per RFC 8292) to the devices of members of
// a conversation who are online nowhere in the cluster. It hears messages on the conversation's
// owner (a sequencer.Observer), so each message is considered once in the cluster; it gathers a
// conversation's messages for a short window into one notification per member, sends from a
// bounded pool of workers with retries, never on a send's path, and withdraws a notification
// when its user reads what it showed on another device.
package push

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/storage"
)

// Defaults, each with the reason it is what it is.
const (
	// DefaultWindow gathers a burst of messages into one notification: a person typing three
	// lines in a row takes about this long, and a notification 3 s late is still "now".
	DefaultWindow = 3 * time.Second
	// DefaultWorkers bounds the pushes in flight from one node: a push service answers in tens of
	// milliseconds, so a few workers send hundreds per second, and a slow push service cannot
	// take more than these goroutines.
	DefaultWorkers = 8
	// DefaultQueue bounds the notifications waiting for a worker; past it a notification is dropped
	// and counted (chatd_push_dropped_total): the messages stay unread in the conversation.
	DefaultQueue = 1024
	// DefaultMaxOpen bounds the conversations gathering messages at once on one owner.
	DefaultMaxOpen = 10000
	// DefaultAttempts is how often one notification is tried on one device: a push service's
	// 429 or 5xx is usually over within a few seconds.
	DefaultAttempts = 4
	// DefaultBackoff is the wait before the second attempt; it doubles after each one.
	DefaultBackoff = time.Second
	// DefaultTTL is how long a push service keeps a notification for a device that is off: a day,
	// after which the person has surely opened the page or does not care.
	DefaultTTL = 24 * time.Hour
	// DefaultSendTimeout bounds one POST to a push service.
	DefaultSendTimeout = 10 * time.Second
	// DefaultWithdrawEvery is how often reads are looked at for notifications to withdraw: reads
	// of the same conversation in between cost one look.
	DefaultWithdrawEvery = time.Second
	// DefaultSubject is the VAPID subject when none is configured: push services want a contact.
	DefaultSubject = "mailto:admin@localhost"
	// MaxDevices bounds the subscriptions of one user.
	MaxDevices = 20
	// previewBytes bounds the text a notification shows.
	previewBytes = 200
	// storeTimeout bounds the store reads and writes of one notification.
	storeTimeout = 10 * time.Second
)

// Config tunes a Notifier. Zero fields take the defaults above.
type Config struct {
	// VAPIDPublicKey and VAPIDPrivateKey are the application server's P-256 key pair, base64url
	// (GenerateVAPIDKeys). Every node of a cluster must use the same pair: a subscription is
	// bound to the public key it was made with.
	VAPIDPublicKey, VAPIDPrivateKey string
	// Subject is the VAPID contact, a mailto: or https: URL.
	Subject string
	// Window gathers a conversation's messages into one notification per member.
	Window time.Duration
	// Workers, Queue and MaxOpen bound the work in flight, waiting, and gathering.
	Workers, Queue, MaxOpen int
	// Attempts and Backoff shape the retries of one push; TTL is how long a push service keeps it.
	Attempts int
	Backoff  time.Duration
	TTL      time.Duration
	// SendTimeout bounds one POST to a push service; WithdrawEvery paces withdrawals.
	SendTimeout, WithdrawEvery time.Duration
	// AllowHTTP accepts push endpoints over plain http (tests on loopback); otherwise only https.
	AllowHTTP bool
	// NodeID is this node, and Nodes tells which other nodes live: a member is online when a
	// live node holds a connection of theirs.
	NodeID string
	Nodes  Nodes
	// Announce, if set, is called after this node saved or removed a push subscription of
	// userID, to tell the other nodes, which then call ForgetDevices (devices.go); nil tells
	// nobody (one node).
	Announce func(userID string)
	// HTTPClient sends the pushes; nil means a client with SendTimeout.
	HTTPClient *http.Client
	// Metrics records what is sent; nil records nothing.
	Metrics *Metrics
}

// Nodes tells which nodes of the cluster are alive; sequencer.Leases implements it.
type Nodes interface {
	Alive(node string) bool
}

func (c Config) withDefaults() Config {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Window, DefaultWindow)
	set(&c.Backoff, DefaultBackoff)
	set(&c.TTL, DefaultTTL)
	set(&c.SendTimeout, DefaultSendTimeout)
	set(&c.WithdrawEvery, DefaultWithdrawEvery)
	for _, f := range []struct {
		v *int
		d int
	}{{&c.Workers, DefaultWorkers}, {&c.Queue, DefaultQueue}, {&c.MaxOpen, DefaultMaxOpen}, {&c.Attempts, DefaultAttempts}} {
		if *f.v == 0 {
			*f.v = f.d
		}
	}
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.VAPIDPublicKey == "" || c.VAPIDPrivateKey == "":
		return errors.New("push: a VAPID key pair is required")
	case c.Window < 0 || c.Backoff < 0 || c.TTL < time.Second || c.SendTimeout < 0 || c.WithdrawEvery < 0:
		return errors.New("push: durations must be positive (TTL at least a second)")
	case c.Workers < 1 || c.Queue < 1 || c.MaxOpen < 1 || c.Attempts < 1:
		return errors.New("push: workers, queue, open conversations and attempts must be positive")
	}
	return checkVAPIDKeys(c.VAPIDPublicKey, c.VAPIDPrivateKey)
}

// Store is what the notifier reads and writes.
type Store interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	Profiles(ctx context.Context, ids []string) ([]storage.User, error)
	PresenceOf(ctx context.Context, userIDs []string) (map[string]storage.Presence, error)
	BlocksOf(ctx context.Context, blocker string) ([]string, error)
	CursorOf(ctx context.Context, userID, conversationID string) (storage.Cursor, error)
	PushSubscriptionsOf(ctx context.Context, users []string) (map[string][]storage.PushSubscription, error)
	SavePushSubscription(ctx context.Context, sub storage.PushSubscription) error
	DeletePushSubscription(ctx context.Context, userID, deviceID, endpoint string) error
	NotifySettings(ctx context.Context, userID string) (map[string]string, error)
	PushSettingsOf(ctx context.Context, userID string) (storage.PushSettings, error)
	SetPushSettings(ctx context.Context, userID string, set storage.PushSettings) error
	PushNoticeOf(ctx context.Context, userID, conversationID string) (storage.PushNotice, error)
	SavePushNotice(ctx context.Context, n storage.PushNotice) error
	DeletePushNotice(ctx context.Context, userID, conversationID string) error
}

// Notifier sends a node's Web Push notifications. Stored and Changed (the owner's events) and
// Read (a cursor moved) only queue work; the workers send it.
type Notifier struct {
	cfg   Config
	store Store
	http  *http.Client
	log   zerolog.Logger

	devices *deviceCache // who has which devices, none included

	mu      sync.Mutex
	open    map[string]*window // conversations gathering messages, by id
	reads   map[readKey]int64  // reads since the last withdrawal pass: the highest seq
	stopped bool

	jobs   chan func(ctx context.Context)
	ctx    context.Context // ended by Stop: in-flight pushes give up
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type readKey struct{ user, conversation string }

// New returns a running notifier; Stop ends it.
func New(cfg Config, store Store, log zerolog.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: cfg.SendTimeout}
	}
	n := &Notifier{cfg: cfg, store: store, http: client, log: log.With().Str("component", "push").Logger(),
		devices: newDeviceCache(), open: make(map[string]*window), reads: make(map[readKey]int64),
		jobs: make(chan func(context.Context), cfg.Queue)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		n.wg.Go(n.work)
	}
	n.wg.Go(n.withdrawLoop)
	return n, nil
}

// PublicKey is the VAPID public key a page subscribes with (applicationServerKey).
func (n *Notifier) PublicKey() string { return n.cfg.VAPIDPublicKey }

// Stop drops what waits, gives up what is in flight and waits for the workers.
func (n *Notifier) Stop() {
	n.mu.Lock()
	n.stopped = true
	for id, w := range n.open {
		w.timer.Stop()
		delete(n.open, id)
	}
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// enqueue hands job to the workers, or drops and counts it when the queue is full or the
// notifier stopped. Callers hold no lock the workers take.
func (n *Notifier) enqueue(job func(ctx context.Context)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	select {
	case n.jobs <- job:
	default:
		n.cfg.Metrics.dropped()
	}
}

// work runs jobs until Stop.
func (n *Notifier) work() {
	for {
		select {
		case job := <-n.jobs:
			job(n.ctx)
		case <-n.ctx.Done():
			return
		}
	}
}

// storeCtx bounds one job's store round trips.
func storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, storeTimeout)
}
