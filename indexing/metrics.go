package indexing

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Kinds of event the feed takes, the values of chatd_search_events_total's kind label.
const (
	kindMessage = "message" // a published message taken
	kindChange  = "change"  // a published change taken (an edit, a deletion, a reaction)
	kindForget  = "forget"  // a deleted account removed
)

// Metrics are the feed's instruments. A nil *Metrics records nothing, so tests need not build one.
type Metrics struct {
	events   map[string]prometheus.Counter
	catchUps prometheus.Counter
	writes   prometheus.Histogram
}

// NewMetrics registers the feed's instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	events := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_search_events_total",
		Help: "Events this node's search index took from the owners' publications, by kind (message, change, forget: a deleted account removed).",
	}, []string{"kind"})
	m := &Metrics{events: make(map[string]prometheus.Counter)}
	for _, k := range []string{kindMessage, kindChange, kindForget} {
		m.events[k] = events.WithLabelValues(k)
	}
	m.catchUps = f.NewCounter(prometheus.CounterOpts{
		Name: "chatd_search_catchups_total",
		Help: "Conversations this node's search index read from the store because it missed some of their events (a gap, a restart, a NATS reconnect).",
	})
	m.writes = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "chatd_search_write_seconds",
		Help:    "One durable write of a batch to this node's search index.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to 8 s
	})
	return m
}

func (m *Metrics) took(kind string) {
	if m != nil {
		m.events[kind].Inc()
	}
}

func (m *Metrics) caughtUp() {
	if m != nil {
		m.catchUps.Inc()
	}
}

func (m *Metrics) wrote(start time.Time) {
	if m != nil {
		m.writes.Observe(time.Since(start).Seconds())
	}
}
