package sequencer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Why an owner answered a send with an error: the values of chatd_sequencer_failures_total's
// reason label, one per cause the owner tells apart.
const (
	failQueueFull = "queue_full" // the partition's queue was full: the store is not keeping up
	failInvalid   = "invalid"    // the request could not be decoded
	failNotMember = "not_member" // no such conversation, or the sender is not in it
	failStore     = "store"      // a store read or write failed
	failSeqTaken  = "seq_taken"  // another writer stored the seq first (two owners for a moment)
	failNotOwner  = "not_owner"  // the lease was lost, or the partition was being released
	failRefused   = "refused"    // a change or reply naming no such message, not allowed, or past a limit
)

var failReasons = []string{failQueueFull, failInvalid, failNotMember, failStore, failSeqTaken, failNotOwner, failRefused}

// Directions of chatd_partition_handovers_total.
const (
	handoverAcquired = "acquired"
	handoverReleased = "released"
)

// latencyBuckets span a healthy store round trip (under a millisecond) to FlushTimeout.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Metrics are the sequencer instruments: group commits, acks and failures of the partitions this
// node owns, and the leases that decide which those are. One Metrics serves a Sequencer and the
// Leases started with it. A nil *Metrics records nothing, so tests and tools need not build one.
type Metrics struct {
	batchSize       prometheus.Histogram
	storeInsert     prometheus.Histogram
	acks            prometheus.Counter
	failures        *prometheus.CounterVec
	queueDepth      prometheus.Gauge
	queueOverflows  prometheus.Counter
	recentIDHits    prometheus.Counter
	partitionsOwned prometheus.Gauge
	leaseRenewals   prometheus.Counter
	leaseLosses     prometheus.Counter
	handovers       *prometheus.CounterVec
	failover        prometheus.Histogram
}

// NewMetrics creates the sequencer instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		batchSize: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_sequencer_batch_size",
			Help:    "Requests handled by one group commit of an owned partition: sends, retries included, and the rare membership reloads.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10), // 1 to 512, DefaultMaxBatch
		}),
		storeInsert: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "chatd_sequencer_store_insert_seconds",
			Help:    "Time to write one group commit's new messages to the store: the ordered insertMany, with the lookups and re-inserts past a duplicate, and the counters raised in the same visit.",
			Buckets: latencyBuckets,
		}),
		acks: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_sequencer_acks_total",
			Help: "Sends this node acknowledged as the owner of their partition, retries answered with the stored message included.",
		}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_sequencer_failures_total",
			Help: "Sends this node answered with an error as the owner of their partition, by reason: queue_full, invalid, not_member, store, seq_taken, not_owner, refused (a change or reply naming no such message, not allowed, or past a limit).",
		}, []string{"reason"}),
		queueDepth: f.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_sequencer_queue_depth",
			Help: "Sends waiting for a group commit, summed over the partitions this node owns.",
		}),
		queueOverflows: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_sequencer_queue_overflows_total",
			Help: "Sends refused as retryable because their partition's queue was full.",
		}),
		recentIDHits: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_sequencer_recent_id_hits_total",
			Help: "Retried sends answered from the owner's memory of recent clientMsgIds, without a store write.",
		}),
		partitionsOwned: f.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_partitions_owned",
			Help: "Partitions this node owns now.",
		}),
		leaseRenewals: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_lease_renewals_total",
			Help: "Heartbeats this node wrote successfully: one per renewal interval keeps every partition it owns (claims are written only when ownership changes).",
		}),
		leaseLosses: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_lease_losses_total",
			Help: "Partitions this node owned and lost: claimed by another node that judged it dead.",
		}),
		handovers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_partition_handovers_total",
			Help: "Partitions this node acquired, or released (handed over on purpose, at shutdown or when the assignment moved them); a lost partition is counted in chatd_lease_losses_total instead.",
		}, []string{"direction"}),
		failover: f.NewHistogram(prometheus.HistogramOpts{
			Name: "chatd_failover_seconds",
			Help: "How long a partition this node took over had no live owner: observed only when the previous owner died without handing it over, " +
				"as the time from that owner's last heartbeat this node saw to the takeover.",
			Buckets: []float64{.25, .5, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 60},
		}),
	}
	// Every label value exists from the start, so a rate over a cause that has not happened yet is 0, not absent.
	for _, r := range failReasons {
		m.failures.WithLabelValues(r)
	}
	m.handovers.WithLabelValues(handoverAcquired)
	m.handovers.WithLabelValues(handoverReleased)
	return m
}

func (m *Metrics) batch(n int) {
	if m != nil {
		m.batchSize.Observe(float64(n))
	}
}

func (m *Metrics) inserted(since time.Time) {
	if m != nil {
		m.storeInsert.Observe(time.Since(since).Seconds())
	}
}

// answered counts one send answered by an owner: acked, or failed for reason.
func (m *Metrics) answered(acked bool, reason string) {
	switch {
	case m == nil:
	case acked:
		m.acks.Inc()
	default:
		m.failures.WithLabelValues(reason).Inc()
	}
}

// queued moves the queue depth by n: +1 as a send is queued (or about to be), -n as a batch is
// taken from the queue.
func (m *Metrics) queued(n int) {
	if m != nil {
		m.queueDepth.Add(float64(n))
	}
}

func (m *Metrics) overflow() {
	if m != nil {
		m.queueOverflows.Inc()
		m.failures.WithLabelValues(failQueueFull).Inc()
	}
}

func (m *Metrics) recentHit() {
	if m != nil {
		m.recentIDHits.Inc()
	}
}

func (m *Metrics) owned(n int) {
	if m != nil {
		m.partitionsOwned.Set(float64(n))
	}
}

func (m *Metrics) renewed() {
	if m != nil {
		m.leaseRenewals.Inc()
	}
}

func (m *Metrics) lostLease() {
	if m != nil {
		m.leaseLosses.Inc()
	}
}

func (m *Metrics) handover(direction string) {
	if m != nil {
		m.handovers.WithLabelValues(direction).Inc()
	}
}

func (m *Metrics) failedOver(d time.Duration) {
	if m != nil {
		m.failover.Observe(d.Seconds())
	}
}
