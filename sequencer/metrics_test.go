package sequencer_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/logtest"
	"github.com/chatd/chatd/testenv/promtest"
)

// memStore is a sequencer store in memory. While gate is set, InsertMessages reports on blocked
// and waits until gate is closed.
type memStore struct {
	mu      sync.Mutex
	convs   map[string]storage.Conversation
	msgs    []storage.Message
	gate    chan struct{}
	blocked chan struct{}
}

func newMemStore(convs ...storage.Conversation) *memStore {
	s := &memStore{convs: make(map[string]storage.Conversation)}
	for _, c := range convs {
		s.convs[c.ID] = c
	}
	return s
}

func (s *memStore) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	if !ok {
		return storage.Conversation{}, storage.ErrNotFound
	}
	return c, nil
}

func (s *memStore) RecoverSeq(_ context.Context, id string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var high int64
	for _, m := range s.msgs {
		if m.ConversationID == id {
			high = max(high, m.Seq)
		}
	}
	return high, nil
}

func (s *memStore) TombstoneSender(_ context.Context, id string, _ int64, userID string) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var seqs []int64
	for i, m := range s.msgs {
		if m.ConversationID == id && m.SenderID == userID {
			seqs = append(seqs, m.Seq)
			s.msgs[i].Kind, s.msgs[i].Body, s.msgs[i].SenderID = protocol.KindDeleted, "", ""
		}
	}
	return seqs, nil
}

func (s *memStore) SealBuckets(context.Context, string, int64, int64) error { return nil }

func (s *memStore) SealBucket(context.Context, []storage.Message) error { return nil }

func (s *memStore) InsertMessages(ctx context.Context, msgs []storage.Message) error {
	s.mu.Lock()
	gate, blocked := s.gate, s.blocked
	s.mu.Unlock()
	if gate != nil {
		blocked <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, msgs...)
	return nil
}

func (s *memStore) MessageByClientID(_ context.Context, conv, clientMsgID string) (storage.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if m.ConversationID == conv && m.ClientMsgID == clientMsgID {
			return m, nil
		}
	}
	return storage.Message{}, storage.ErrNotFound
}

func (s *memStore) MessageRange(_ context.Context, conv string, from, to int64) ([]storage.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Message
	for _, m := range s.msgs {
		if m.ConversationID == conv && m.Seq >= from && m.Seq <= to {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b storage.Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

func (s *memStore) AdvanceCounters(_ context.Context, counters map[string]storage.Counters) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range counters {
		if c, ok := s.convs[id]; ok {
			c.LastSeq, c.LastVersion = max(c.LastSeq, n.LastSeq), max(c.LastVersion, n.LastVersion)
			s.convs[id] = c
		}
	}
	return nil
}

func (s *memStore) UpdateMessages(_ context.Context, updates []storage.MessageUpdate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range updates {
		i := slices.IndexFunc(s.msgs, func(m storage.Message) bool {
			return m.ConversationID == u.Message.ConversationID && m.Seq == u.Message.Seq
		})
		if i < 0 || s.msgs[i].Version != u.PrevVersion || s.msgs[i].Kind == protocol.KindDeleted {
			return storage.ErrConflict
		}
		s.msgs[i] = u.Message
	}
	return nil
}

func (s *memStore) RecordDeleted(_ context.Context, conv string, seqs []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[conv]
	for _, seq := range seqs {
		if !slices.Contains(c.DeletedSeqs, seq) {
			c.DeletedSeqs = append(c.DeletedSeqs, seq)
			c.DeletedCount++
		}
	}
	s.convs[conv] = c
	return nil
}

// holdInserts makes the next inserts wait until release; blocked receives as each starts waiting.
func (s *memStore) holdInserts() (blocked <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate, s.blocked = make(chan struct{}), make(chan struct{}, 16)
	gate := s.gate
	return s.blocked, sync.OnceFunc(func() { close(gate) })
}

func groupOf(id string, members ...string) storage.Conversation {
	return storage.Conversation{ID: id, Kind: storage.KindGroup, Members: members, CreatedAt: time.Now()}
}

// startSequencer connects to natsURL and starts a sequencer on store, both stopped when the test ends.
func startSequencer(t *testing.T, natsURL string, cfg sequencer.Config, store sequencer.Store, log zerolog.Logger) (*sequencer.Sequencer, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	seq, err := sequencer.New(cfg, nc, store, log)
	if err != nil {
		t.Fatalf("new sequencer: %v", err)
	}
	t.Cleanup(seq.Close)
	return seq, nc
}

func sendContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMetricsCountAcksBatchesAndRetries(t *testing.T) {
	reg := prometheus.NewRegistry()
	store := newMemStore(groupOf("c1", "alice"))
	seq, _ := startSequencer(t, testenv.NATS(t), sequencer.Config{Partitions: 4, Metrics: sequencer.NewMetrics(reg)}, store, zerolog.Nop())
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	if got := promtest.Read(t, reg, "chatd_partitions_owned").Value; got != 4 {
		t.Fatalf("chatd_partitions_owned = %v after OwnAll of 4, want 4", got)
	}

	// N concurrent sends: however they fall into group commits, every one is acked and counted
	// once in some batch.
	const n = 20
	ctx := sendContext(t)
	reqs := make([]sequencer.SendRequest, n)
	var wg sync.WaitGroup
	for i := range reqs {
		reqs[i] = sequencer.SendRequest{ConversationID: "c1", SenderID: "alice", ClientMsgID: uuid.NewString(),
			Kind: protocol.KindText, Body: fmt.Sprintf("message %d", i)}
		wg.Go(func() {
			if _, err := seq.Send(ctx, reqs[i]); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_acks_total").Value; got != n {
		t.Fatalf("chatd_sequencer_acks_total = %v after %d sends, want %d", got, n, n)
	}
	batches := promtest.Read(t, reg, "chatd_sequencer_batch_size")
	if batches.Count < 1 || batches.Sum != n {
		t.Fatalf("chatd_sequencer_batch_size has %v batches of %v sends in all, want %d sends", batches.Count, batches.Sum, n)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_store_insert_seconds").Count; got != batches.Count {
		t.Fatalf("chatd_sequencer_store_insert_seconds has %v samples, want one per batch (%v)", got, batches.Count)
	}

	// A retry of an acked send is answered from memory: one hit, one more ack, no store write.
	first, err := store.MessageByClientID(ctx, "c1", reqs[0].ClientMsgID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := seq.Send(ctx, reqs[0])
	if err != nil || again.Seq != first.Seq {
		t.Fatalf("retry = seq %d, %v; want the stored seq %d", again.Seq, err, first.Seq)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_recent_id_hits_total").Value; got != 1 {
		t.Fatalf("chatd_sequencer_recent_id_hits_total = %v after one retry, want 1", got)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_acks_total").Value; got != n+1 {
		t.Fatalf("chatd_sequencer_acks_total = %v after the retry, want %d", got, n+1)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_store_insert_seconds").Count; got != batches.Count {
		t.Fatalf("the retry was written to the store: %v insert samples, want %v", got, batches.Count)
	}

	// A sender who is not a member is answered with an error, counted by its reason.
	_, err = seq.Send(ctx, sequencer.SendRequest{ConversationID: "c1", SenderID: "mallory", ClientMsgID: uuid.NewString(),
		Kind: protocol.KindText, Body: "let me in"})
	if !errors.Is(err, protocol.ErrNotMember) {
		t.Fatalf("send by a non-member: %v, want ErrNotMember", err)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_failures_total", "reason", "not_member").Value; got != 1 {
		t.Fatalf(`chatd_sequencer_failures_total{reason="not_member"} = %v, want 1`, got)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_failures_total", "reason", "store").Value; got != 0 {
		t.Fatalf(`chatd_sequencer_failures_total{reason="store"} = %v, want 0`, got)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_queue_depth").Value; got != 0 {
		t.Fatalf("chatd_sequencer_queue_depth = %v with nothing in flight, want 0", got)
	}

	seq.Release(1)
	if got, owned := promtest.Read(t, reg, "chatd_partitions_owned").Value, len(seq.Owned()); got != float64(owned) || owned != 3 {
		t.Fatalf("chatd_partitions_owned = %v after releasing one of 4, owned %d, want 3", got, owned)
	}
	seq.Close()
	if got := promtest.Read(t, reg, "chatd_partitions_owned").Value; got != 0 {
		t.Fatalf("chatd_partitions_owned = %v after Close, want 0", got)
	}
}

func TestMetricsCountQueueOverflow(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &logtest.Buffer{}
	store := newMemStore(groupOf("c1", "alice"))
	seq, nc := startSequencer(t, testenv.NATS(t), sequencer.Config{Partitions: 1, QueueSize: 1, MaxBatch: 1,
		AttemptTimeout: 10 * time.Second, Metrics: sequencer.NewMetrics(reg)}, store, zerolog.New(logs))
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	blocked, release := store.holdInserts()
	t.Cleanup(release) // before the sequencer's Close, which waits for the flush
	ctx := sendContext(t)
	send := func(body string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := seq.Send(ctx, sequencer.SendRequest{ConversationID: "c1", SenderID: "alice", ClientMsgID: uuid.NewString(),
				Kind: protocol.KindText, Body: body})
			done <- err
		}()
		return done
	}

	// The first send's group commit is stuck in the store, the second fills the queue of one.
	firstDone := send("first")
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the first send never reached the store")
	}
	secondDone := send("second")
	testenv.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if got := promtest.Read(t, reg, "chatd_sequencer_queue_depth").Value; got != 1 {
			return fmt.Errorf("chatd_sequencer_queue_depth = %v, want the second send waiting", got)
		}
		return nil
	})

	// A third is refused at once, as retryable.
	data, err := json.Marshal(sequencer.SendRequest{ConversationID: "c1", SenderID: "alice", ClientMsgID: uuid.NewString(),
		Kind: protocol.KindText, Body: "third"})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := nc.Request(seq.PartitionSubject(0), data, 5*time.Second)
	if err != nil {
		t.Fatalf("request to the owner: %v", err)
	}
	if !strings.Contains(string(answer.Data), "unavailable") {
		t.Fatalf("a send to a full queue was answered %s, want unavailable", answer.Data)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_queue_overflows_total").Value; got != 1 {
		t.Fatalf("chatd_sequencer_queue_overflows_total = %v after one refused send, want 1", got)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_failures_total", "reason", "queue_full").Value; got != 1 {
		t.Fatalf(`chatd_sequencer_failures_total{reason="queue_full"} = %v, want 1`, got)
	}
	overflows := logs.Lines(t, "partition queue full; send refused as retryable")
	if len(overflows) != 1 || overflows[0]["level"] != "warn" || overflows[0]["conversation"] != "c1" || overflows[0]["partition"] != 0.0 {
		t.Fatalf("overflow log lines = %v, want one warning naming partition 0 and conversation c1", overflows)
	}

	release()
	for _, done := range []<-chan error{firstDone, secondDone} {
		if err := <-done; err != nil {
			t.Fatalf("send held by the store: %v", err)
		}
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_acks_total").Value; got != 2 {
		t.Fatalf("chatd_sequencer_acks_total = %v, want the 2 held sends", got)
	}
	if got := promtest.Read(t, reg, "chatd_sequencer_queue_depth").Value; got != 0 {
		t.Fatalf("chatd_sequencer_queue_depth = %v once all is answered, want 0", got)
	}
}

// leaseNode is one node of TestLeaseMetrics: a sequencer with leases, its registry and its log.
type leaseNode struct {
	seq   *sequencer.Sequencer
	reg   *prometheus.Registry
	logs  *logtest.Buffer
	close func()
}

const (
	leaseTestTTL   = 1500 * time.Millisecond
	leaseTestRenew = 250 * time.Millisecond
)

func startLeaseNode(t *testing.T, natsURL, id string, partitions int, store sequencer.Store) *leaseNode {
	t.Helper()
	n := &leaseNode{reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}}
	log := zerolog.New(n.logs).Level(zerolog.InfoLevel)
	n.seq, _ = startSequencer(t, natsURL, sequencer.Config{Partitions: partitions, Metrics: sequencer.NewMetrics(n.reg)}, store, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leases, err := sequencer.StartLeases(ctx, sequencer.LeaseConfig{NodeID: id, TTL: leaseTestTTL, RenewInterval: leaseTestRenew, Replicas: 1}, n.seq, log)
	if err != nil {
		t.Fatalf("start leases of %s: %v", id, err)
	}
	n.close = sync.OnceFunc(leases.Close)
	t.Cleanup(n.close)
	return n
}

func (n *leaseNode) value(t *testing.T, name string, labels ...string) float64 {
	return promtest.Read(t, n.reg, name, labels...).Value
}

// TestLeaseMetrics takes every partition, loses one to an intruder that then lets it expire (a
// failover), hands half over to a joining node and takes them back when it leaves.
func TestLeaseMetrics(t *testing.T) {
	const partitions = 4
	url := testenv.NATS(t)
	store := newMemStore()
	a := startLeaseNode(t, url, "a", partitions, store)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if owned := len(a.seq.Owned()); owned != partitions {
			return fmt.Errorf("a owns %d of %d partitions", owned, partitions)
		}
		if got := a.value(t, "chatd_partitions_owned"); got != partitions {
			return fmt.Errorf("chatd_partitions_owned = %v, want %d", got, partitions)
		}
		if got := a.value(t, "chatd_lease_renewals_total"); got < partitions {
			return fmt.Errorf("chatd_lease_renewals_total = %v, want a renewal of each lease", got)
		}
		return nil
	})
	if got := a.value(t, "chatd_partition_handovers_total", "direction", "acquired"); got != partitions {
		t.Fatalf(`chatd_partition_handovers_total{direction="acquired"} = %v, want %d`, got, partitions)
	}
	if got := promtest.Read(t, a.reg, "chatd_failover_seconds").Count; got != 0 {
		t.Fatalf("chatd_failover_seconds has %v samples after taking free leases, want none", got)
	}

	// An intruder overwrites partition 0's claim and is never heard of again.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := sendContext(t)
	kv, err := js.KeyValue(ctx, sequencer.DefaultSubjectPrefix+"-partitions")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "p0", []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if got := a.value(t, "chatd_lease_losses_total"); got != 1 {
			return fmt.Errorf("chatd_lease_losses_total = %v, want the lease of partition 0", got)
		}
		return nil
	})
	lost := a.logs.Lines(t, "lost partition lease")
	if len(lost) != 1 || lost[0]["level"] != "warn" || lost[0]["partition"] != 0.0 || lost[0]["node"] != "a" || lost[0]["owner"] != "intruder" {
		t.Fatalf("lease loss log lines = %v, want one warning naming partition 0, node a and owner intruder", lost)
	}

	// Once a has heard nothing more of the intruder for a TTL, it takes partition 0 back: a
	// failover of about a TTL.
	testenv.CheckFor(t, 3*leaseTestTTL, 20*time.Millisecond, func() error {
		if got := a.value(t, "chatd_partition_handovers_total", "direction", "acquired"); got != partitions+1 {
			return fmt.Errorf(`chatd_partition_handovers_total{direction="acquired"} = %v, want %d`, got, partitions+1)
		}
		return nil
	})
	failover := promtest.Read(t, a.reg, "chatd_failover_seconds")
	if failover.Count != 1 || failover.Sum < (leaseTestTTL-100*time.Millisecond).Seconds() || failover.Sum > (leaseTestTTL+2*time.Second).Seconds() {
		t.Fatalf("chatd_failover_seconds = %v samples summing %vs, want one of about the %s TTL", failover.Count, failover.Sum, leaseTestTTL)
	}
	if got := a.value(t, "chatd_partitions_owned"); got != partitions {
		t.Fatalf("chatd_partitions_owned = %v after taking partition 0 back, want %d", got, partitions)
	}
	var retaken []map[string]any
	for _, l := range a.logs.Lines(t, "acquired partition lease") {
		if l["previous"] != nil {
			retaken = append(retaken, l)
		}
	}
	if len(retaken) != 1 || retaken[0]["level"] != "info" || retaken[0]["partition"] != 0.0 || retaken[0]["previous"] != "intruder" || retaken[0]["failover"] == nil {
		t.Fatalf("acquisitions after a failover logged %v, want one naming partition 0, the intruder and the failover", retaken)
	}

	// A joining node gets half of the partitions, released by a: hand-overs, not failovers.
	b := startLeaseNode(t, url, "b", partitions, store)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if na, nb := len(a.seq.Owned()), len(b.seq.Owned()); na != partitions/2 || nb != partitions/2 {
			return fmt.Errorf("a owns %d and b %d partitions, want %d each", na, nb, partitions/2)
		}
		return nil
	})
	if got := a.value(t, "chatd_partition_handovers_total", "direction", "released"); got != partitions/2 {
		t.Fatalf(`a's chatd_partition_handovers_total{direction="released"} = %v, want %d`, got, partitions/2)
	}
	if got := b.value(t, "chatd_partition_handovers_total", "direction", "acquired"); got != partitions/2 {
		t.Fatalf(`b's chatd_partition_handovers_total{direction="acquired"} = %v, want %d`, got, partitions/2)
	}
	if got := promtest.Read(t, b.reg, "chatd_failover_seconds").Count; got != 0 {
		t.Fatalf("b's chatd_failover_seconds has %v samples for released leases, want none", got)
	}
	if got := b.value(t, "chatd_partitions_owned"); got != partitions/2 {
		t.Fatalf("b's chatd_partitions_owned = %v, want %d", got, partitions/2)
	}

	// b leaves: it releases its share, and a takes it back without a failover.
	b.close()
	if got := b.value(t, "chatd_partition_handovers_total", "direction", "released"); got != partitions/2 {
		t.Fatalf(`b's chatd_partition_handovers_total{direction="released"} = %v after Close, want %d`, got, partitions/2)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := len(a.seq.Owned()); got != partitions {
			return fmt.Errorf("a owns %d partitions after b left, want %d", got, partitions)
		}
		return nil
	})
	if got := promtest.Read(t, a.reg, "chatd_failover_seconds").Count; got != 1 {
		t.Fatalf("a's chatd_failover_seconds has %v samples after b released its share, want still 1", got)
	}
	if got := a.value(t, "chatd_lease_losses_total"); got != 1 {
		t.Fatalf("chatd_lease_losses_total = %v, want still 1", got)
	}
}
