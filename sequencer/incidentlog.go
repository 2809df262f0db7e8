package sequencer

import (
	"sync"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

// Incident log limits. Incidents (a lost lease, a hand-over, a full queue) are worth a line each
// while they are rare, but a store outage can overflow queues thousands of times a second and a
// flapping cluster can hand partitions back and forth every tick: past the rate the lines are
// counted, not written, so a flood cannot fill the disk. The metrics count every incident.
const (
	// incidentsPerSecond is the lines per second one kind of incident writes once its burst is spent.
	incidentsPerSecond = 5
	// incidentBurst lets a node taking over half of DefaultPartitions at once log every one of them.
	incidentBurst = DefaultPartitions / 2
)

// incidentLog rate-limits the lines of one kind of incident. The first line written after some
// were suppressed says how many in its "suppressed" field. It is safe for concurrent use.
type incidentLog struct {
	limit *rate.Limiter

	mu         sync.Mutex
	suppressed int
}

func newIncidentLog() *incidentLog {
	return &incidentLog{limit: rate.NewLimiter(incidentsPerSecond, incidentBurst)}
}

// event starts a line of log at level, or returns nil when the line is over the rate (zerolog's
// methods do nothing on a nil event, so callers chain on the result as on any event).
func (il *incidentLog) event(log *zerolog.Logger, level zerolog.Level) *zerolog.Event {
	il.mu.Lock()
	if !il.limit.Allow() {
		il.suppressed++
		il.mu.Unlock()
		return nil
	}
	suppressed := il.suppressed
	il.suppressed = 0
	il.mu.Unlock()
	e := log.WithLevel(level)
	if suppressed > 0 {
		e = e.Int("suppressed", suppressed)
	}
	return e
}
