package hub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// deliverBuckets span a local fan-out, from a small conversation delivered straight off the bus
// (well under a millisecond) to a dispatcher backed up behind a 5,000-member group (seconds).
var deliverBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Metrics are the hub's instruments. A nil *Metrics records nothing, so tests and tools
// need not build one.
type Metrics struct {
	deliveries prometheus.Counter
	deliver    prometheus.Histogram
}

// NewMetrics registers the hub's instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		deliveries: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_deliveries_total",
			Help: "Live message pushes given to local connections, one per connection per message; seqs a connection already had and a sync's replay are not counted.",
		}),
		deliver: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_deliver_seconds",
			Help:    "Per message delivered here, from when the bus's dispatcher took it off its NATS subscription queue to when the fan-out put it in the last local connection's output queue; it ends there, not at the kernel write of the socket.",
			Buckets: deliverBuckets,
		}),
	}
}

// pushed counts n message pushes given to connections.
func (m *Metrics) pushed(n int) {
	if m == nil || n == 0 {
		return
	}
	m.deliveries.Add(float64(n))
}

// delivered records the latency of a message pushed to the local connections, from received;
// the zero time (a message that did not come off the bus) records nothing.
func (m *Metrics) delivered(received time.Time) {
	if m == nil || received.IsZero() {
		return
	}
	m.deliver.Observe(time.Since(received).Seconds())
}
