package sequencer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Lease defaults, each with its reason.
const (
	// DefaultLeaseTTL is how long a partition lease and a node heartbeat live without renewal, so
	// it bounds failover: a dead node's partitions move within about one TTL plus one renewal.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultRenewInterval renews leases often enough that two missed renewals still leave time.
	DefaultRenewInterval = time.Second
	// DefaultLeaseReplicas keeps one copy of the lease buckets, right for a single NATS server;
	// a NATS cluster should use 3 so losing a server keeps the leases.
	DefaultLeaseReplicas = 1
	// leaseOpTimeout bounds one KV round trip.
	leaseOpTimeout = 2 * time.Second
)

// LeaseConfig configures partition ownership across nodes.
type LeaseConfig struct {
	// NodeID names this node in the lease buckets; it must be unique in the cluster.
	NodeID string
	// TTL is the lease lifetime; RenewInterval how often leases and the heartbeat are renewed.
	TTL           time.Duration
	RenewInterval time.Duration
	// Replicas is the replication of the JetStream KV buckets holding leases and heartbeats.
	Replicas int
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.TTL == 0 {
		c.TTL = DefaultLeaseTTL
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultLeaseReplicas
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c LeaseConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.NodeID == "":
		return errors.New("leases: node id is required")
	case c.RenewInterval*2 >= c.TTL:
		return errors.New("leases: renew interval must be less than half the TTL")
	case c.Replicas < 1 || c.Replicas > 5:
		return errors.New("leases: replicas must be between 1 and 5")
	}
	return nil
}

// Leases decides which partitions this node owns, with two JetStream KV buckets: one holds a
// heartbeat per live node, the other one lease per partition whose value is the owner's id. Both
// expire by TTL. Every node computes the same balanced assignment of partitions to live nodes; a
// node takes a lease only with a create (which fails while another node holds it), renews it
// with a compare-and-set on its revision, and releases a partition the assignment moved away by
// persisting what it queued and then deleting the lease, so the next owner can take it at once.
type Leases struct {
	cfg   LeaseConfig
	seq   *Sequencer
	js    jetstream.JetStream
	nodes jetstream.KeyValue
	parts jetstream.KeyValue
	log   zerolog.Logger

	// started is when this run began: a lease under this node's id written before it was left by
	// an earlier run, which did not release it.
	started time.Time
	// losses and handovers rate-limit the incident lines of lost leases and of hand-overs.
	losses, handovers *incidentLog

	mu   sync.Mutex
	held map[int]*lease
	// contested is, for each partition this node tried to take at the last tick and found held by
	// another node, that node and its last renewal: the start of the failover if that node never
	// releases it. Rebuilt every tick, so it never describes an older owner.
	contested map[int]heldBy

	stop chan struct{}
	done chan struct{}
}

// heldBy is a lease held by another node, as this node last saw it.
type heldBy struct {
	owner   string
	renewed time.Time // the lease value's Created time: its owner's last renewal
}

// lostLease is a held lease that renewal found gone.
type lostLease struct {
	partition int
	owner     string // who holds it now, "" when it expired or was deleted
	err       error  // why the renewal failed
}

// lease is a partition lease this node holds: its KV revision and when it was last renewed.
type lease struct {
	revision uint64
	renewed  atomic.Int64 // unix nanoseconds
}

// valid reports whether this node may still ack for the partition: the lease was renewed
// recently enough that it cannot have expired in the bucket, with a margin for clock skew.
func (l *lease) valid(ttl time.Duration) bool {
	return time.Since(time.Unix(0, l.renewed.Load())) < ttl-ttl/4
}

// StartLeases joins the cluster's partition ownership and keeps this node's share until Close.
func StartLeases(ctx context.Context, cfg LeaseConfig, seq *Sequencer, log zerolog.Logger) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(seq.nc)
	if err != nil {
		return nil, fmt.Errorf("leases: jetstream: %w", err)
	}
	l := &Leases{cfg: cfg, seq: seq, js: js, started: time.Now(), losses: newIncidentLog(), handovers: newIncidentLog(),
		held: make(map[int]*lease), contested: make(map[int]heldBy), stop: make(chan struct{}), done: make(chan struct{}),
		log: log.With().Str("component", "leases").Str("node", cfg.NodeID).Logger()}
	// A NATS cluster that just started may still be electing its JetStream leader: retry until
	// ctx ends.
	for {
		err := l.ensureBuckets(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
	l.tick()
	go l.run()
	return l, nil
}

// ensureBuckets creates the lease buckets, or finds them. The buckets are in memory (leases are
// worth nothing after their TTL anyway), so a NATS server that restarts comes back without them
// and they are created again.
func (l *Leases) ensureBuckets(ctx context.Context) error {
	bucket := func(name string) (jetstream.KeyValue, error) {
		ctx, cancel := context.WithTimeout(ctx, leaseOpTimeout)
		defer cancel()
		kv, err := l.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, TTL: l.cfg.TTL, History: 1, Storage: jetstream.MemoryStorage, Replicas: l.cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("leases: bucket %s: %w", name, err)
		}
		return kv, nil
	}
	prefix := l.seq.cfg.SubjectPrefix
	nodes, err := bucket(prefix + "-nodes")
	if err != nil {
		return err
	}
	parts, err := bucket(prefix + "-partitions")
	if err != nil {
		return err
	}
	l.nodes, l.parts = nodes, parts
	return nil
}

func (l *Leases) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.tick()
		case <-l.stop:
			return
		}
	}
}

// tick heartbeats, recomputes the assignment, renews or releases what is held and tries to take
// what is assigned but free. Every KV call has its own timeout, so one slow call cannot make the
// others miss their renewal.
func (l *Leases) tick() {
	live, err := l.heartbeat()
	if err != nil {
		l.log.Warn().Err(err).Msg("heartbeat")
		// The buckets may be gone with a restarted NATS server; recreate them for the next tick.
		ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
		defer cancel()
		if err := l.ensureBuckets(ctx); err != nil {
			l.log.Warn().Err(err).Msg("recreate lease buckets")
		}
		return
	}
	mine := Assign(l.seq.cfg.Partitions, live)[l.cfg.NodeID]
	want := make(map[int]bool, len(mine))
	for _, p := range mine {
		want[p] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, held := range l.held {
		if !want[p] {
			l.release(p, held)
		}
	}
	for _, lost := range l.renewAll() {
		l.seq.metrics.lostLease()
		line := l.losses.event(&l.log, zerolog.WarnLevel).Int("partition", lost.partition).AnErr("renewal", lost.err)
		if lost.owner != "" {
			line = line.Str("owner", lost.owner)
		}
		line.Msg("lost partition lease")
		l.seq.Release(lost.partition)
		delete(l.held, lost.partition)
	}
	contested := make(map[int]heldBy)
	for _, p := range mine {
		if _, ok := l.held[p]; !ok {
			l.take(p, contested)
		}
	}
	l.contested = contested
}

func (l *Leases) heartbeat() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancel()
	if _, err := l.nodes.Put(ctx, l.cfg.NodeID, []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))); err != nil {
		return nil, err
	}
	live, err := l.nodes.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("list live nodes: %w", err)
	}
	return live, nil
}

// renewAll renews every held lease, several at a time so a tick stays short when NATS is slow,
// and returns the leases that are gone. l.mu is held.
func (l *Leases) renewAll() []lostLease {
	const parallel = 16
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lost []lostLease
		sem  = make(chan struct{}, parallel)
	)
	for p, held := range l.held {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if gone := l.renew(p, held); gone != nil {
				mu.Lock()
				lost = append(lost, *gone)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lost
}

// renew extends one lease by compare-and-set on its revision and returns nil while it is still
// this node's, or what became of it. When the outcome is unclear (a timeout, or a revision that
// moved on because an earlier timed-out renewal did land) it reads the lease back: still ours
// means keep it; NATS unreachable means keep it too, since lease.valid stops acks before it can
// have expired.
func (l *Leases) renew(p int, held *lease) *lostLease {
	ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancel()
	rev, renewErr := l.parts.Update(ctx, partitionKey(p), []byte(l.cfg.NodeID), held.revision)
	if renewErr == nil {
		held.revision = rev
		held.renewed.Store(time.Now().UnixNano())
		l.seq.metrics.renewed()
		return nil
	}
	readCtx, cancelRead := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancelRead()
	entry, err := l.parts.Get(readCtx, partitionKey(p))
	switch {
	case err == nil && string(entry.Value()) == l.cfg.NodeID:
		held.revision = entry.Revision() // renewed with this revision at the next tick
		return nil
	case err == nil:
		return &lostLease{partition: p, owner: string(entry.Value()), err: renewErr}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	}
	return &lostLease{partition: p, err: renewErr}
}

// take acquires a free partition assigned to this node and starts owning it; a partition found
// held by another node goes into contested. l.mu is held.
func (l *Leases) take(p int, contested map[int]heldBy) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancel()
	got, err := l.acquire(ctx, p, contested)
	if err != nil {
		return // still held by its previous owner; try again next tick
	}
	held := &lease{revision: got.revision}
	held.renewed.Store(time.Now().UnixNano())
	if err := l.seq.Own(p, func() bool { return held.valid(l.cfg.TTL) }); err != nil {
		l.log.Error().Err(err).Int("partition", p).Msg("own partition")
		if err := l.parts.Delete(ctx, partitionKey(p), jetstream.LastRevision(got.revision)); err != nil {
			l.log.Warn().Err(err).Int("partition", p).Msg("give back lease")
		}
		return
	}
	l.held[p] = held
	l.seq.metrics.handover(handoverAcquired)
	line := l.handovers.event(&l.log, zerolog.InfoLevel).Int("partition", p)
	if got.previous.owner != "" {
		failover := time.Since(got.previous.renewed)
		l.seq.metrics.failedOver(failover)
		line = line.Str("previous", got.previous.owner).Dur("failover", failover)
	}
	line.Msg("acquired partition lease")
}

// acquisition is a lease this node just took.
type acquisition struct {
	revision uint64
	// previous is the owner that held the lease without releasing it (it expired, or an earlier
	// run of this node left it) and its last renewal; zero when the lease was free or released.
	previous heldBy
}

// acquire takes a free partition lease, or one still held under this node's own id by a previous
// run of this node (a restart need not wait for its own lease to expire). It tells a lease that
// expired from one that was released by trying an update that expects no value first: that
// succeeds only where the key has no entry at all, which is never after a release, since a release
// leaves a delete marker (for a TTL).
func (l *Leases) acquire(ctx context.Context, p int, contested map[int]heldBy) (acquisition, error) {
	key, me := partitionKey(p), []byte(l.cfg.NodeID)
	rev, err := l.parts.Update(ctx, key, me, 0)
	if err == nil {
		// No value and no delete marker: never held, or expired. If another node held it at the
		// last tick, it let the lease expire.
		return acquisition{revision: rev, previous: l.contested[p]}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
		return acquisition{}, err
	}
	entry, err := l.parts.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A delete marker: released by its owner (or, rarely, expired between the two calls,
		// and then counted as a release). Create writes over the marker.
		rev, err := l.parts.Create(ctx, key, me)
		return acquisition{revision: rev}, err
	case err != nil:
		return acquisition{}, fmt.Errorf("read lease %d: %w", p, err)
	case string(entry.Value()) != l.cfg.NodeID:
		contested[p] = heldBy{owner: string(entry.Value()), renewed: entry.Created()}
		return acquisition{}, fmt.Errorf("partition %d is held by %s", p, entry.Value())
	}
	rev, err = l.parts.Update(ctx, key, me, entry.Revision())
	if err != nil {
		return acquisition{}, err
	}
	got := acquisition{revision: rev}
	if entry.Created().Before(l.started) {
		// Left by an earlier run of this node; one written since is this run's own (a take whose
		// answer timed out), not a failover.
		got.previous = heldBy{owner: l.cfg.NodeID, renewed: entry.Created()}
	}
	return got, nil
}

// release persists and answers what partition p queued, then deletes its lease. l.mu is held.
func (l *Leases) release(p int, held *lease) {
	l.seq.Release(p)
	delete(l.held, p)
	l.seq.metrics.handover(handoverReleased)
	l.handovers.event(&l.log, zerolog.InfoLevel).Int("partition", p).Msg("released partition lease")
	ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancel()
	if err := l.parts.Delete(ctx, partitionKey(p), jetstream.LastRevision(held.revision)); err != nil {
		l.log.Warn().Err(err).Int("partition", p).Msg("delete lease; it will expire")
	}
}

// Close hands every partition over: queued sends are persisted and answered, leases and the
// heartbeat are deleted so the remaining nodes take over at their next renewal.
func (l *Leases) Close() {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, held := range l.held {
		l.release(p, held)
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseOpTimeout)
	defer cancel()
	if err := l.nodes.Delete(ctx, l.cfg.NodeID); err != nil {
		l.log.Warn().Err(err).Msg("delete heartbeat; it will expire")
	}
}

func partitionKey(p int) string { return "p" + strconv.Itoa(p) }

// Assign maps partitions to nodes: each partition goes to the node ranked highest for it by
// rendezvous hashing that still has room, and no node gets more than ceil(partitions/nodes). Every
// node computes the same answer from the same live set; a join or a departure moves few partitions.
func Assign(partitions int, nodes []string) map[string][]int {
	nodes = slices.Clone(nodes)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	out := make(map[string][]int, len(nodes))
	if len(nodes) == 0 {
		return out
	}
	capacity := (partitions + len(nodes) - 1) / len(nodes)
	for p := range partitions {
		ranked := slices.Clone(nodes)
		slices.SortFunc(ranked, func(a, b string) int {
			ha, hb := rendezvous(p, a), rendezvous(p, b)
			switch {
			case ha > hb:
				return -1
			case ha < hb:
				return 1
			}
			return 0
		})
		for _, n := range ranked {
			if len(out[n]) < capacity {
				out[n] = append(out[n], p)
				break
			}
		}
	}
	return out
}

func rendezvous(p int, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.Itoa(p) + "/" + node)) // writing to a hash never fails
	return h.Sum64()
}
