// Package bus carries a node's conversation and user events over core NATS. It subscribes to a
// conversation's subjects (persisted messages and their changes from the sequencer, receipts, typing)
// while someone on this node needs them and to a user's subject while the user is connected
// here, and hands what arrives to a Handler on a fixed set of dispatcher goroutines: every
// subject always lands on the same dispatcher, so one conversation's events are handled in
// arrival order, and a large fan-out on one dispatcher never holds up the conversations of the
// others.
package bus

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Defaults, each with its reason.
const (
	// DefaultDispatchers is how many goroutines hand events to the handler: enough that one slow
	// delivery (a 5,000-member group) leaves most conversations unaffected, few enough to cost
	// nothing idle.
	DefaultDispatchers = 16
	// DefaultBuffer bounds the events waiting for one dispatcher; past it NATS drops them as a
	// slow consumer (logged), and clients fill the gap from history.
	DefaultBuffer = 1 << 14
)

// Handler receives the events of the subscribed conversations and users. Each method is called
// from one dispatcher goroutine per subject, in the order NATS delivered the subject's messages.
type Handler interface {
	// HandleMessage gets a persisted message as the sequencer published it (JSON of
	// protocol.Message). received is when the bus's dispatcher took it from its queue, for
	// measuring delivery latency: NATS puts a channel subscription's messages straight into that
	// queue from its read loop, so there is no earlier point to take it, and the time a message
	// waited in the queue is not in it (chatd_bus_dispatch_queue_depth shows that backlog).
	HandleMessage(conversationID string, data []byte, received time.Time)
	// HandleChange gets a change of a stored message (an edit, a reaction, a deletion) as the
	// sequencer published it (JSON of sequencer.Change), after the message itself.
	HandleChange(conversationID string, data []byte)
	// HandleConversationEvent gets a receipt, typing or account-deletion event of a conversation.
	HandleConversationEvent(conversationID string, data []byte)
	// HandleUserEvent gets an event for all of one user's devices.
	HandleUserEvent(userID string, data []byte)
}

// Config tunes a Bus. Zero fields take the defaults above.
type Config struct {
	// SubjectPrefix must match the sequencer's.
	SubjectPrefix string
	Dispatchers   int
	Buffer        int
	// Metrics, if set, records what the bus receives, its queue depth and its subscriptions; nil
	// records nothing.
	Metrics *Metrics
}

// Bus is one node's subscriptions and publications.
type Bus struct {
	cfg     Config
	nc      *nats.Conn
	handler Handler
	log     zerolog.Logger
	seed    maphash.Seed
	queues  []chan *nats.Msg

	mu   sync.Mutex
	subs map[string]*nats.Subscription // by subject

	stop chan struct{}
	wg   sync.WaitGroup
}

// New starts the dispatchers. Call SetHandler before the first Watch, and Close to stop.
func New(cfg Config, nc *nats.Conn, log zerolog.Logger) *Bus {
	if cfg.SubjectPrefix == "" {
		cfg.SubjectPrefix = "chat"
	}
	if cfg.Dispatchers <= 0 {
		cfg.Dispatchers = DefaultDispatchers
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	b := &Bus{cfg: cfg, nc: nc, log: log.With().Str("component", "bus").Logger(), seed: maphash.MakeSeed(),
		subs: make(map[string]*nats.Subscription), stop: make(chan struct{})}
	for range cfg.Dispatchers {
		q := make(chan *nats.Msg, cfg.Buffer)
		b.queues = append(b.queues, q)
		b.wg.Add(1)
		go b.dispatch(q)
	}
	cfg.Metrics.open(b)
	return b
}

// SetHandler sets who gets the events; the chat service registers itself.
func (b *Bus) SetHandler(h Handler) { b.handler = h }

// Close stops the dispatchers; subscriptions end with the NATS connection.
func (b *Bus) Close() {
	b.cfg.Metrics.closed(b)
	close(b.stop)
	b.wg.Wait()
}

func (b *Bus) dispatch(q chan *nats.Msg) {
	defer b.wg.Done()
	convPrefix, userPrefix := b.cfg.SubjectPrefix+".conv.", b.cfg.SubjectPrefix+".user."
	for {
		select {
		case m := <-q:
			switch {
			case strings.HasPrefix(m.Subject, userPrefix):
				b.cfg.Metrics.receivedOne(kindUserEvent)
				b.handler.HandleUserEvent(strings.TrimPrefix(m.Subject, userPrefix), m.Data)
			case strings.HasSuffix(m.Subject, ".msg"):
				received := time.Now()
				b.cfg.Metrics.receivedOne(kindMessage)
				b.handler.HandleMessage(strings.TrimSuffix(strings.TrimPrefix(m.Subject, convPrefix), ".msg"), m.Data, received)
			case strings.HasSuffix(m.Subject, ".chg"):
				b.cfg.Metrics.receivedOne(kindChange)
				b.handler.HandleChange(strings.TrimSuffix(strings.TrimPrefix(m.Subject, convPrefix), ".chg"), m.Data)
			case strings.HasSuffix(m.Subject, ".evt"):
				b.cfg.Metrics.receivedOne(kindConversationEvent)
				b.handler.HandleConversationEvent(strings.TrimSuffix(strings.TrimPrefix(m.Subject, convPrefix), ".evt"), m.Data)
			default:
				b.cfg.Metrics.receivedOne(kindOther)
			}
		case <-b.stop:
			return
		}
	}
}

func (b *Bus) conversationSubject(id, kind string) string {
	return b.cfg.SubjectPrefix + ".conv." + id + "." + kind
}
func (b *Bus) userSubject(id string) string { return b.cfg.SubjectPrefix + ".user." + id }

// WatchConversation subscribes to a conversation's messages and events; watching it again
// changes nothing.
func (b *Bus) WatchConversation(id string) { b.subscribe(b.conversationSubject(id, "*"), id) }

// UnwatchConversation ends WatchConversation; for a conversation not watched it does nothing.
func (b *Bus) UnwatchConversation(id string) { b.unsubscribe(b.conversationSubject(id, "*")) }

// WatchUser subscribes to a user's events; watching them again changes nothing.
func (b *Bus) WatchUser(id string) { b.subscribe(b.userSubject(id), id) }

// UnwatchUser ends WatchUser; for a user not watched it does nothing.
func (b *Bus) UnwatchUser(id string) { b.unsubscribe(b.userSubject(id)) }

// subscribe routes a subject to the dispatcher of key, unless it is routed already. Channel
// subscriptions cost no goroutine each, which matters with a subscription per online user and per
// live conversation. The caller serializes the calls of one subject (see chat's watch.go), so
// none is subscribed twice.
func (b *Bus) subscribe(subject, key string) {
	b.mu.Lock()
	_, ok := b.subs[subject]
	b.mu.Unlock()
	if ok {
		return
	}
	q := b.queues[maphash.String(b.seed, key)%uint64(len(b.queues))]
	sub, err := b.nc.ChanSubscribe(subject, q)
	if err != nil {
		// Only a closed connection refuses a subscription; the node is stopping.
		b.log.Error().Err(err).Str("subject", subject).Msg("subscribe")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.subs[subject]; ok {
		b.drop(subject, old)
	}
	b.subs[subject] = sub
}

func (b *Bus) unsubscribe(subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sub, ok := b.subs[subject]; ok {
		b.drop(subject, sub)
		delete(b.subs, subject)
	}
}

func (b *Bus) drop(subject string, sub *nats.Subscription) {
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		b.log.Warn().Err(err).Str("subject", subject).Msg("unsubscribe")
	}
}

// PublishConversation publishes a conversation event to every node with a member of it online.
func (b *Bus) PublishConversation(id string, data []byte) error {
	if err := b.nc.Publish(b.conversationSubject(id, "evt"), data); err != nil {
		return fmt.Errorf("publish event of conversation %s: %w", id, err)
	}
	return nil
}

// PublishUser publishes an event to every node with a connection of the user.
func (b *Bus) PublishUser(id string, data []byte) error {
	if err := b.nc.Publish(b.userSubject(id), data); err != nil {
		return fmt.Errorf("publish event of user %s: %w", id, err)
	}
	return nil
}
