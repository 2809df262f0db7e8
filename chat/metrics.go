package chat

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/chatd/chatd/protocol"
)

// failureCodes are the values of chatd_sends_failed_total's code label: the wire codes a send
// can be refused with, and internal for any other error. A fixed set, so the label's cardinality
// stays bounded.
var failureCodes = []string{protocol.CodeNotMember, protocol.CodeNotFound, protocol.CodeForbidden,
	protocol.CodeInvalidField, protocol.CodeUnavailable, protocol.CodeRateLimited, protocol.CodeInternal}

// failureCode is the wire code an error of the service is answered with (protocol.AsError), or
// internal for one outside failureCodes.
func failureCode(err error) string {
	if code := protocol.AsError(err).Code; slices.Contains(failureCodes, code) {
		return code
	}
	return protocol.CodeInternal
}

// latencyBuckets span a request answered from memory (a millisecond) to one that waited for an
// owner failover up to the send timeout (ten seconds).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Metrics are the chat service's instruments. A nil *Metrics records nothing, so tests and tools
// need not build one.
type Metrics struct {
	sendsAcked     prometheus.Counter
	sendsFailed    map[string]prometheus.Counter // by wire code, every code of failureCode
	sendAck        prometheus.Histogram
	historyPages   prometheus.Counter
	historyPage    prometheus.Histogram
	resyncs        prometheus.Counter
	resyncMessages prometheus.Counter
	readsShared    prometheus.Counter
	syncReadWait   prometheus.Histogram
}

// NewMetrics registers the service's instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		sendsAcked: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_sends_acked_total",
			Help: "Sends answered with an ack: the message is stored (a retry of a stored message is acked again, and counted again).",
		}),
		sendsFailed: make(map[string]prometheus.Counter),
		sendAck: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_send_ack_seconds",
			Help:    "Time from the chat service taking a send to its ack, for acked sends.",
			Buckets: latencyBuckets,
		}),
		historyPages: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_history_pages_total",
			Help: "History pages served.",
		}),
		historyPage: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_history_page_seconds",
			Help:    "Time to serve a history page, for pages served.",
			Buckets: latencyBuckets,
		}),
		resyncs: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_resyncs_total",
			Help: "Resyncs run after this node could not hear the bus (a NATS reconnect).",
		}),
		resyncMessages: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_resync_messages_total",
			Help: "Messages missed on the bus that resyncs read from the store and delivered to local connections.",
		}),
		readsShared: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_store_reads_shared_total",
			Help: "Sync replays, history pages and conversation look-ups answered by an identical store read another request started: store reads saved.",
		}),
		syncReadWait: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_sync_read_wait_seconds",
			Help:    "Time connecting and syncing sessions waited for one of the node's sync store read slots; long waits mean a reconnect storm is queueing.",
			Buckets: latencyBuckets,
		}),
	}
	failed := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_sends_failed_total",
		Help: "Sends answered with an error, by the wire code of the error (unavailable is retryable with the same clientMsgId).",
	}, []string{"code"})
	for _, c := range failureCodes { // every series exists from the start, so rate() sees the first failure
		m.sendsFailed[c] = failed.WithLabelValues(c)
	}
	return m
}

// sent records the outcome of a send that started at start.
func (m *Metrics) sent(start time.Time, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.sendsFailed[failureCode(err)].Inc()
		return
	}
	m.sendsAcked.Inc()
	m.sendAck.Observe(time.Since(start).Seconds())
}

// paged records a history page served, started at start.
func (m *Metrics) paged(start time.Time) {
	if m == nil {
		return
	}
	m.historyPages.Inc()
	m.historyPage.Observe(time.Since(start).Seconds())
}

// resynced records a resync that delivered n messages.
func (m *Metrics) resynced(n int) {
	if m == nil {
		return
	}
	m.resyncs.Inc()
	m.resyncMessages.Add(float64(n))
}

// sharedRead records a request answered by a store read it shared.
func (m *Metrics) sharedRead() {
	if m == nil {
		return
	}
	m.readsShared.Inc()
}

// waitedForSyncRead records a wait for a sync read slot that started at start.
func (m *Metrics) waitedForSyncRead(start time.Time) {
	if m == nil {
		return
	}
	m.syncReadWait.Observe(time.Since(start).Seconds())
}
