package bus

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Kinds of received NATS message, the values of chatd_bus_messages_received_total's kind label:
// one per subject the bus dispatches, and other for a subject it does not know (and ignores), so
// the label's cardinality stays bounded.
const (
	kindMessage           = "message"            // <prefix>.conv.<id>.msg, a persisted message
	kindChange            = "change"             // <prefix>.conv.<id>.chg, an edit, reaction or deletion
	kindConversationEvent = "conversation_event" // <prefix>.conv.<id>.evt, receipt, typing or account deletion
	kindUserEvent         = "user_event"         // <prefix>.user.<id>
	kindOther             = "other"
)

var receivedKinds = []string{kindMessage, kindChange, kindConversationEvent, kindUserEvent, kindOther}

// Metrics are the bus's instruments. A nil *Metrics records nothing, so tests and tools need not
// build one. One Metrics may serve several buses (a test's nodes in one process); the gauges sum
// over the buses open.
type Metrics struct {
	received map[string]prometheus.Counter // by kind, every kind of receivedKinds

	mu    sync.Mutex
	buses map[*Bus]struct{} // open buses, read by the gauges at scrape time
}

// NewMetrics registers the bus's instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{received: make(map[string]prometheus.Counter), buses: make(map[*Bus]struct{})}
	f := promauto.With(reg)
	received := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_bus_messages_received_total",
		Help: "NATS messages the bus took from its subscriptions, by kind (message, change, conversation_event, user_event; other is a subject the bus ignores).",
	}, []string{"kind"})
	for _, k := range receivedKinds { // every series exists from the start, so rate() sees the first one
		m.received[k] = received.WithLabelValues(k)
	}
	// The gauges are read when scraped rather than kept up to date: the queues are filled by the
	// NATS client's read loop, which the bus has no hook into.
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatd_bus_dispatch_queue_depth",
		Help: "NATS messages waiting in the bus's dispatcher queues, summed over the dispatchers; a queue that fills makes NATS drop messages as a slow consumer.",
	}, m.queued)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatd_bus_subscriptions",
		Help: "Live NATS subscriptions of the bus: one per conversation with a member connected here and one per user connected here.",
	}, m.subscriptions)
	return m
}

// open makes the gauges count b until closed.
func (m *Metrics) open(b *Bus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buses[b] = struct{}{}
}

// closed stops counting b.
func (m *Metrics) closed(b *Bus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.buses, b)
}

// receivedOne counts one message taken from a subscription.
func (m *Metrics) receivedOne(kind string) {
	if m == nil {
		return
	}
	m.received[kind].Inc()
}

func (m *Metrics) queued() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for b := range m.buses {
		for _, q := range b.queues {
			n += len(q)
		}
	}
	return float64(n)
}

func (m *Metrics) subscriptions() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for b := range m.buses {
		b.mu.Lock()
		n += len(b.subs)
		b.mu.Unlock()
	}
	return float64(n)
}
