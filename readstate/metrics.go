package readstate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the readstate instruments: cursor moves taken in, cursor documents written and the
// bulk writes that carry them. moves over writes is how much the coalescing saves. A nil *Metrics
// records nothing, so tests and tools need not build one.
type Metrics struct {
	moves       prometheus.Counter
	writes      prometheus.Counter
	flush       prometheus.Histogram
	flushErrors prometheus.Counter
}

// NewMetrics creates the readstate instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		moves: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_read_cursor_moves_total",
			Help: "Read-cursor moves taken into the pending batch; a move not past one already pending for the same cursor is dropped and not counted.",
		}),
		writes: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_read_cursor_writes_total",
			Help: "Read-cursor documents written to the store by successful flushes.",
		}),
		flush: f.NewHistogram(prometheus.HistogramOpts{
			Name: "chatd_read_flush_seconds",
			Help: "Duration of one flush's bulk write of read cursors to the store, failed ones included.",
			// A healthy bulk write takes milliseconds; flushTimeout is 10 s.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		flushErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_read_flush_errors_total",
			Help: "Flushes whose bulk write failed; their moves stay pending for the next flush.",
		}),
	}
}

func (m *Metrics) moved() {
	if m != nil {
		m.moves.Inc()
	}
}

// flushed records one bulk write of n cursors that started at start and failed if err is not nil.
func (m *Metrics) flushed(n int, start time.Time, err error) {
	if m == nil {
		return
	}
	m.flush.Observe(time.Since(start).Seconds())
	if err != nil {
		m.flushErrors.Inc()
		return
	}
	m.writes.Add(float64(n))
}
