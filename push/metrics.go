package push

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the Web Push instruments. A nil *Metrics records nothing.
type Metrics struct {
	sentTotal, failedTotal, expiredTotal, droppedTotal prometheus.Counter
}

// NewMetrics creates the push instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		sentTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_push_sent_total",
			Help: "Web Push messages a push service accepted (notifications and withdrawals, one per device)."}),
		failedTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_push_failed_total",
			Help: "Web Push messages given up: refused by the push service, or still failing after every attempt."}),
		expiredTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_push_expired_total",
			Help: "Push subscriptions removed because their push service answered 404 or 410."}),
		droppedTotal: f.NewCounter(prometheus.CounterOpts{Name: "chatd_push_dropped_total",
			Help: "Notifications not worked out because the node's push queue or its open conversations were full."}),
	}
}

func (m *Metrics) sent()    { m.inc(func(m *Metrics) prometheus.Counter { return m.sentTotal }) }
func (m *Metrics) failed()  { m.inc(func(m *Metrics) prometheus.Counter { return m.failedTotal }) }
func (m *Metrics) expired() { m.inc(func(m *Metrics) prometheus.Counter { return m.expiredTotal }) }
func (m *Metrics) dropped() { m.inc(func(m *Metrics) prometheus.Counter { return m.droppedTotal }) }

func (m *Metrics) inc(counter func(*Metrics) prometheus.Counter) {
	if m != nil {
		counter(m).Inc()
	}
}
