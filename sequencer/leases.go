package sequencer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Lease defaults, each with its reason.
const (
	// DefaultLeaseTTL is how long a node may go unheard (as counted in the other nodes' own
	// heartbeats) before its partitions move, so it bounds failover: long enough that a GC pause
	// or a starved CPU never looks like a death, short enough that a dead node's sends wait
	// seconds.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultRenewInterval is the heartbeat and decision tick: a TTL holds five of them.
	DefaultRenewInterval = time.Second
	// DefaultLeaseReplicas keeps one copy of the ownership buckets, right for a single NATS
	// server; a NATS cluster should use 3 so losing a server keeps them.
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

// Leases decides which partitions this node owns, with two JetStream KV buckets, and writes to
// them O(1) times per node per renewal whatever the number of partitions:
//
//   - <prefix>-nodes holds one heartbeat per live node, rewritten every RenewInterval: the only
//     periodic write.
//   - <prefix>-partitions holds one claim per partition, the owner's id, written only when
//     ownership changes: created on a free partition, taken over by compare-and-set from an owner
//     that died, deleted by an owner that hands the partition over.
//
// Every node watches both buckets and computes the same balanced assignment from the live set, so
// partitions move only when a node joins, leaves or dies. A peer is dead when this node has seen
// deadAfter of its own heartbeats land since the peer's last one: liveness is judged on the
// coordination state's own clock, so when the KV is slow or leaderless (a NATS server lost), or
// this node is starved of CPU, its own heartbeats do not land either and nobody is judged dead.
// An owner keeps acking until it sees its claim taken; if two nodes ever both act for a
// partition (one was wrongly judged dead), the partition subject's queue group gives each send
// to one of them and the store's unique index fences the rest.
type Leases struct {
	cfg LeaseConfig
	seq *Sequencer
	js  jetstream.JetStream
	log zerolog.Logger
	// deadAfter is how many of its own heartbeats this node sees land before it calls a silent
	// peer dead: TTL / RenewInterval.
	deadAfter int
	// losses and handovers rate-limit the incident lines of lost leases and of hand-overs.
	losses, handovers *incidentLog

	// mu guards the buckets, the view and held; KV calls are made without it, so a slow call
	// never holds up the watchers.
	mu    sync.Mutex
	nodes jetstream.KeyValue
	parts jetstream.KeyValue
	view  view
	held  map[int]*lease
	// recreated is when the buckets were last ensured after a failed heartbeat.
	recreated time.Time

	stop     chan struct{}
	watchers sync.WaitGroup
	done     chan struct{}
}

// view is the coordination state as this node's watchers last saw it.
type view struct {
	// beats counts this node's own heartbeats seen through the watcher: the clock peers are
	// judged by.
	beats int
	peers map[string]peer
	// claims is the owner of every claimed partition.
	claims map[int]claim
	// nodesSynced and partsSynced are set once each watcher has delivered the bucket's values.
	nodesSynced, partsSynced bool
}

// peer is a node's heartbeat as last seen.
type peer struct {
	revision uint64
	atBeat   int       // view.beats when it was seen
	at       time.Time // and on this node's clock, for the failover metric
	// claimant is set for a node seen only by its claims so far: protected from takeover for
	// deadAfter beats like any peer, but not given partitions until its heartbeat shows.
	claimant bool
}

// claim is a partition's owner as last seen.
type claim struct {
	owner    string
	revision uint64
}

// lease is a partition this node owns: the revision of its claim, and lost, set as soon as the
// watcher sees another node's claim on it (acks stop at once; the next tick releases it).
type lease struct {
	revision uint64
	lost     atomic.Bool
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
	l := &Leases{cfg: cfg, seq: seq, js: js, deadAfter: int(cfg.TTL / cfg.RenewInterval),
		losses: newIncidentLog(), handovers: newIncidentLog(),
		view: view{peers: make(map[string]peer), claims: make(map[int]claim)}, held: make(map[int]*lease),
		stop: make(chan struct{}), done: make(chan struct{}),
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
	l.watchers.Add(2)
	go l.watch("nodes", func() jetstream.KeyValue { return l.nodes }, l.applyHeartbeat, func() { l.view.nodesSynced = true })
	go l.watch("partitions", func() jetstream.KeyValue { return l.parts }, l.applyClaim, func() { l.view.partsSynced = true })
	// Take a first share before serving, once the watchers have the current state.
	for !l.synced() {
		select {
		case <-ctx.Done():
			close(l.stop)
			l.watchers.Wait()
			return nil, fmt.Errorf("leases: read the ownership state: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	l.tick()
	l.tick() // the first tick's heartbeat makes this node live in its own view
	go l.run()
	return l, nil
}

// ensureBuckets creates the buckets, or finds them. They are in memory (a claim is worth nothing
// once every NATS server has restarted: the nodes claim again), so a NATS cluster that restarts
// whole comes back without them and they are created again. Heartbeats expire after a TTL only
// to keep the bucket clean; liveness is judged by heartbeats seen, not by keys present.
func (l *Leases) ensureBuckets(ctx context.Context) error {
	bucket := func(name string, ttl time.Duration) (jetstream.KeyValue, error) {
		ctx, cancel := context.WithTimeout(ctx, leaseOpTimeout)
		defer cancel()
		kv, err := l.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, TTL: ttl, History: 1, Storage: jetstream.MemoryStorage, Replicas: l.cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("leases: bucket %s: %w", name, err)
		}
		return kv, nil
	}
	prefix := l.seq.cfg.SubjectPrefix
	nodes, err := bucket(prefix+"-nodes", heartbeatRetention*l.cfg.TTL)
	if err != nil {
		return err
	}
	parts, err := bucket(prefix+"-partitions", 0)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.nodes, l.parts = nodes, parts
	l.mu.Unlock()
	return nil
}

// heartbeatRetention is how many TTLs a heartbeat stays in its bucket: long enough that a KV
// outage does not empty the bucket under live nodes, short enough to forget departed ones.
const heartbeatRetention = 12

func (l *Leases) synced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view.nodesSynced && l.view.partsSynced
}

// watch applies every change of one bucket to the view until Close. nats.go's watcher is an
// ordered consumer that resets itself after a server or leader loss; if it ends anyway, watch
// starts a new one (which delivers the current values again).
func (l *Leases) watch(name string, kv func() jetstream.KeyValue, apply func(jetstream.KeyValueEntry), synced func()) {
	defer l.watchers.Done()
	for {
		l.mu.Lock()
		bucket := kv()
		l.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		w, err := bucket.WatchAll(ctx)
		if err == nil {
			l.follow(w, apply, synced)
			if err := w.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				l.log.Debug().Err(err).Str("bucket", name).Msg("stop watcher")
			}
		} else {
			l.log.Warn().Err(err).Str("bucket", name).Msg("watch ownership bucket")
		}
		cancel()
		select {
		case <-l.stop:
			return
		case <-time.After(l.cfg.RenewInterval):
		}
	}
}

// follow applies w's updates until Close or until w ends.
func (l *Leases) follow(w jetstream.KeyWatcher, apply func(jetstream.KeyValueEntry), synced func()) {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			l.mu.Lock()
			if e == nil {
				synced() // the bucket's current values have all been delivered
			} else {
				apply(e)
			}
			l.mu.Unlock()
		case <-l.stop:
			return
		}
	}
}

// applyHeartbeat records a heartbeat, or a departure (a deleted heartbeat: a node that stopped
// gracefully). l.mu is held.
func (l *Leases) applyHeartbeat(e jetstream.KeyValueEntry) {
	node := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(l.view.peers, node)
		return
	}
	if node == l.cfg.NodeID {
		l.view.beats++
	}
	if old, ok := l.view.peers[node]; !ok || old.revision != e.Revision() {
		l.view.peers[node] = peer{revision: e.Revision(), atBeat: l.view.beats, at: time.Now()}
	}
}

// applyClaim records a partition's owner. A lease of this node claimed by another is marked lost
// here, so it stops acking before the next tick releases it; any change of owner tells the
// sequencer, so sends waiting on the old owner are retried at once. l.mu is held.
func (l *Leases) applyClaim(e jetstream.KeyValueEntry) {
	p, ok := partitionOfKey(e.Key())
	if !ok {
		return
	}
	before := l.view.claims[p]
	if e.Operation() == jetstream.KeyValuePut {
		l.view.claims[p] = claim{owner: string(e.Value()), revision: e.Revision()}
	} else {
		delete(l.view.claims, p)
	}
	after := l.view.claims[p]
	if held, ok := l.held[p]; ok && after.owner != "" && after.owner != l.cfg.NodeID && after.revision > held.revision {
		held.lost.Store(true)
	}
	if before.owner != after.owner {
		l.seq.ownerMoved(p)
	}
}

// Alive reports whether this node believes node alive (see alive); presence asks it, so that a
// dead node's connections do not count as online.
func (l *Leases) Alive(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alive(node)
}

// alive reports whether this node believes node alive: itself, and every peer it heard from
// (heartbeat or, for a claimant, first claim) within its own last deadAfter heartbeats. l.mu is
// held.
func (l *Leases) alive(node string) bool {
	hb, ok := l.view.peers[node]
	return node == l.cfg.NodeID || (ok && l.view.beats-hb.atBeat < l.deadAfter)
}

// members returns the nodes partitions are assigned to: the live ones whose heartbeat was seen.
// l.mu is held.
func (l *Leases) members() []string {
	nodes := []string{l.cfg.NodeID}
	for id, hb := range l.view.peers {
		if id != l.cfg.NodeID && !hb.claimant && l.alive(id) {
			nodes = append(nodes, id)
		}
	}
	return nodes
}

// trackClaimants gives the owner of every claim a heartbeat entry: a node whose claim this node
// sees before its heartbeat (it just started) gets deadAfter beats of grace like any peer, so it
// is not taken over for a watcher's lag. Peers silent far longer than that, with no claim, are
// forgotten. l.mu is held.
func (l *Leases) trackClaimants() {
	claimants := make(map[string]bool)
	for _, c := range l.view.claims {
		claimants[c.owner] = true
		if _, ok := l.view.peers[c.owner]; !ok {
			l.view.peers[c.owner] = peer{atBeat: l.view.beats, at: time.Now(), claimant: true}
		}
	}
	for id, hb := range l.view.peers {
		if !claimants[id] && l.view.beats-hb.atBeat > heartbeatRetention*l.deadAfter {
			delete(l.view.peers, id)
		}
	}
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

// change is one claim write a tick decided on.
type change struct {
	partition int
	kind      changeKind
	from      claim // the claim seen: the revision to compare against, and its owner
	failover  time.Duration
}

type changeKind int

const (
	changeRelease changeKind = iota // hand over: drain, then delete the claim
	changeLost                      // another node claimed it
	changeTake                      // claim a free partition, or one of a dead owner
	changeReclaim                   // the claim vanished (buckets recreated): claim again
	changeDrop                      // a claim of this node's that it does not hold: delete it
)

// tick heartbeats, then compares what this node holds with what the live set assigns it and
// makes the few claim writes that differ. The tick as a whole is bounded by tickTimeout.
func (l *Leases) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), l.tickTimeout())
	defer cancel()
	l.heartbeat(ctx)
	for _, c := range l.decide() {
		if ctx.Err() != nil {
			return // the rest waits for the next tick
		}
		switch c.kind {
		case changeRelease:
			l.release(ctx, c.partition)
		case changeLost:
			l.lose(c)
		case changeTake, changeReclaim:
			l.take(ctx, c)
		case changeDrop:
			l.deleteClaim(ctx, c.partition, c.from.revision)
		}
	}
}

// tickTimeout bounds one tick: less than a TTL, so a tick that hangs cannot hold back the next
// long enough for peers to notice.
func (l *Leases) tickTimeout() time.Duration { return l.cfg.TTL / 2 }

// heartbeat writes this node's heartbeat. A failure is logged and otherwise ignored: nothing is
// decided on it, since peers see the same KV trouble. When the buckets may be gone (a NATS
// cluster restarted whole) they are created again, at most once a TTL.
func (l *Leases) heartbeat(ctx context.Context) {
	l.mu.Lock()
	nodes := l.nodes
	l.mu.Unlock()
	opCtx, cancel := context.WithTimeout(ctx, leaseOpTimeout)
	defer cancel()
	rev, err := nodes.Put(opCtx, l.cfg.NodeID, []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))
	if err == nil {
		l.seq.metrics.renewed()
		l.awaitOwnBeat(opCtx, rev)
		return
	}
	l.log.Warn().Err(err).Msg("heartbeat")
	l.mu.Lock()
	due := time.Since(l.recreated) >= l.cfg.TTL
	if due {
		l.recreated = time.Now()
	}
	l.mu.Unlock()
	if due {
		if err := l.ensureBuckets(ctx); err != nil {
			l.log.Warn().Err(err).Msg("ensure ownership buckets")
		}
	}
}

// awaitOwnBeat waits, briefly, until the watcher has delivered this node's heartbeat of revision
// rev, so the tick decides with that beat counted: a dead peer is taken over a tick sooner.
func (l *Leases) awaitOwnBeat(ctx context.Context, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, ownBeatWait)
	defer cancel()
	for {
		l.mu.Lock()
		seen := l.view.peers[l.cfg.NodeID].revision >= rev
		l.mu.Unlock()
		if seen {
			return
		}
		select {
		case <-ctx.Done():
			return // decide without it; it is counted at the next tick
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ownBeatWait bounds awaitOwnBeat: a watcher delivers in about a round trip.
const ownBeatWait = 250 * time.Millisecond

// decide compares held partitions and claims with the assignment of the live set.
func (l *Leases) decide() []change {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.view.nodesSynced || !l.view.partsSynced {
		return nil
	}
	l.trackClaimants()
	mine := make(map[int]bool)
	for _, p := range Assign(l.seq.cfg.Partitions, l.members())[l.cfg.NodeID] {
		mine[p] = true
	}
	var changes []change
	for p, held := range l.held {
		c, claimed := l.view.claims[p]
		if claimed && c.revision < held.revision {
			continue // the watcher has not delivered this node's own claim yet
		}
		switch {
		case held.lost.Load() || (claimed && c.owner != l.cfg.NodeID):
			changes = append(changes, change{partition: p, kind: changeLost, from: c})
		case !claimed:
			changes = append(changes, change{partition: p, kind: changeReclaim})
		case !mine[p]:
			changes = append(changes, change{partition: p, kind: changeRelease, from: c})
		}
	}
	for p, c := range l.view.claims {
		// A claim of this node's that it neither holds nor is assigned: a release whose delete
		// failed (the KV was slow), or one left by an earlier run. Its assignee waits for it to
		// go while this node lives, so delete it again, at every tick until it is gone.
		if _, held := l.held[p]; !held && c.owner == l.cfg.NodeID && !mine[p] {
			changes = append(changes, change{partition: p, kind: changeDrop, from: c})
		}
	}
	for p := range mine {
		if _, ok := l.held[p]; ok {
			continue
		}
		c, claimed := l.view.claims[p]
		switch {
		case !claimed:
			changes = append(changes, change{partition: p, kind: changeTake})
		case c.owner == l.cfg.NodeID:
			// Left by an earlier run of this node, or a take whose answer was lost.
			changes = append(changes, change{partition: p, kind: changeTake, from: c})
		case !l.alive(c.owner):
			var failover time.Duration
			if hb, ok := l.view.peers[c.owner]; ok {
				failover = time.Since(hb.at)
			}
			changes = append(changes, change{partition: p, kind: changeTake, from: c, failover: failover})
		}
		// Otherwise its live owner hands it over at its own next tick.
	}
	return changes
}

// take claims partition c.partition (created when free, by compare-and-set over the claim seen
// otherwise) and starts owning it.
func (l *Leases) take(ctx context.Context, c change) {
	l.mu.Lock()
	parts := l.parts
	l.mu.Unlock()
	opCtx, cancel := context.WithTimeout(ctx, leaseOpTimeout)
	defer cancel()
	key, me := partitionKey(c.partition), []byte(l.cfg.NodeID)
	var rev uint64
	var err error
	if c.from.revision == 0 {
		rev, err = parts.Create(opCtx, key, me)
	} else {
		rev, err = parts.Update(opCtx, key, me, c.from.revision)
	}
	if err != nil {
		if c.kind == changeReclaim && errors.Is(err, jetstream.ErrKeyExists) {
			// The watcher may only lag behind this node's own claim; lost only if it is another's.
			if entry, err := parts.Get(opCtx, key); err == nil && string(entry.Value()) != l.cfg.NodeID {
				l.lose(change{partition: c.partition, kind: changeLost, from: claim{owner: string(entry.Value())}})
			}
		}
		return // someone else was quicker, or the KV is away: the next tick looks again
	}
	if c.kind == changeReclaim {
		l.mu.Lock()
		if held, ok := l.held[c.partition]; ok {
			held.revision = rev
		}
		l.mu.Unlock()
		return
	}
	held := &lease{revision: rev}
	if err := l.seq.Own(c.partition, func() bool { return !held.lost.Load() }); err != nil {
		l.log.Error().Err(err).Int("partition", c.partition).Msg("own partition")
		if err := parts.Delete(opCtx, key, jetstream.LastRevision(rev)); err != nil {
			l.log.Warn().Err(err).Int("partition", c.partition).Msg("give back claim")
		}
		return
	}
	l.mu.Lock()
	l.held[c.partition] = held
	if now := l.view.claims[c.partition]; now.owner != "" && now.owner != l.cfg.NodeID && now.revision > rev {
		held.lost.Store(true) // taken again before this node even started
	}
	l.mu.Unlock()
	l.seq.metrics.handover(handoverAcquired)
	line := l.handovers.event(&l.log, zerolog.InfoLevel).Int("partition", c.partition)
	if c.from.owner != "" && c.from.owner != l.cfg.NodeID {
		l.seq.metrics.failedOver(c.failover)
		line = line.Str("previous", c.from.owner).Dur("failover", c.failover)
	}
	line.Msg("acquired partition lease")
}

// release hands partition p over: its queued sends are persisted and answered, then its claim
// is deleted so the next owner can take it at its next tick.
func (l *Leases) release(ctx context.Context, p int) {
	l.mu.Lock()
	held := l.held[p]
	delete(l.held, p)
	l.mu.Unlock()
	l.seq.Release(p)
	l.seq.metrics.handover(handoverReleased)
	l.handovers.event(&l.log, zerolog.InfoLevel).Int("partition", p).Msg("released partition lease")
	l.deleteClaim(ctx, p, held.revision)
}

// deleteClaim deletes this node's claim of partition p, if it is still at revision rev, so the
// partition's assignee can take it. A failure is retried by the next tick (changeDrop).
func (l *Leases) deleteClaim(ctx context.Context, p int, rev uint64) {
	l.mu.Lock()
	parts := l.parts
	l.mu.Unlock()
	opCtx, cancel := context.WithTimeout(ctx, leaseOpTimeout)
	defer cancel()
	if err := parts.Delete(opCtx, partitionKey(p), jetstream.LastRevision(rev)); err != nil {
		l.log.Warn().Err(err).Int("partition", p).Msg("delete claim; the next tick tries again")
	}
}

// lose stops owning a partition another node claimed.
func (l *Leases) lose(c change) {
	l.mu.Lock()
	held, ok := l.held[c.partition]
	delete(l.held, c.partition)
	l.mu.Unlock()
	if !ok {
		return
	}
	held.lost.Store(true)
	l.seq.Release(c.partition)
	l.seq.metrics.lostLease()
	line := l.losses.event(&l.log, zerolog.WarnLevel).Int("partition", c.partition)
	if c.from.owner != "" {
		line = line.Str("owner", c.from.owner)
	}
	line.Msg("lost partition lease")
}

// Close hands every partition over: queued sends are persisted and answered, claims and the
// heartbeat are deleted so the remaining nodes take over at their next tick.
func (l *Leases) Close() {
	close(l.stop)
	l.watchers.Wait()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*leaseOpTimeout)
	defer cancel()
	l.mu.Lock()
	held := make([]int, 0, len(l.held))
	for p := range l.held {
		held = append(held, p)
	}
	nodes := l.nodes
	l.mu.Unlock()
	for _, p := range held {
		l.release(ctx, p)
	}
	if err := nodes.Delete(ctx, l.cfg.NodeID); err != nil {
		l.log.Warn().Err(err).Msg("delete heartbeat; peers judge this node gone within a TTL")
	}
}

func partitionKey(p int) string { return "p" + strconv.Itoa(p) }

func partitionOfKey(key string) (int, bool) {
	digits, ok := strings.CutPrefix(key, "p")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(digits)
	return p, err == nil
}

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
