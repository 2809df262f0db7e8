package sequencer_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// Both benchmarks send b.N messages from the same number of concurrent senders into the same
// conversations on the same store, so their msgs/s compare directly: the sequencer's group commit
// against the naive write path it replaces. Keep b.N modest (-benchtime=2000x): the embedded store
// scans whole collections on filtered reads, so a large messages collection slows both.
//
// Both open the store with a pool of benchPoolSize connections: the embedded store (FerretDB 1.24
// on SQLite) holds one of its 100 SQLite connections per statement of every running update until
// the update ends, and with the driver's default pool of 100, 64 partitions flushing at once can
// take them all and stall every command until the driver gives up.
//
// Sub-benchmarks vary how many conversations the load is spread over: one busy group is the case
// the sequencer exists for, hundreds of quiet DMs the case where batches are smallest.
const (
	benchSenders  = 256 // sends in flight at once, as many busy sessions would have
	benchPoolSize = 16
)

var benchConversationCounts = []int{1, 16, 256}

// BenchmarkSequencerGroupCommit measures sends through the sequencer: the owner of each partition
// persists every send waiting for it with one insertMany and one lastSeq update.
func BenchmarkSequencerGroupCommit(b *testing.B) {
	for _, n := range benchConversationCounts {
		b.Run(fmt.Sprintf("convs=%d", n), func(b *testing.B) { benchGroupCommit(b, n) })
	}
}

func benchGroupCommit(b *testing.B, conversations int) {
	store := benchStore(b)
	nc, err := nats.Connect(testenv.NATS(b))
	if err != nil {
		b.Fatalf("connect to nats: %v", err)
	}
	b.Cleanup(nc.Close)
	seq, err := sequencer.New(sequencer.Config{}, nc, store, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	if err := seq.OwnAll(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(seq.Close)
	convs := benchConversationIDs(b, store, conversations)
	// One send per conversation first, so the owners have loaded their state before the clock runs.
	for _, id := range convs {
		if _, err := seq.Send(benchContext(b), benchRequest(id)); err != nil {
			b.Fatalf("warm up %s: %v", id, err)
		}
	}
	runSenders(b, convs, func(ctx context.Context, convID string) error {
		_, err := seq.Send(ctx, benchRequest(convID))
		return err
	})
}

// BenchmarkNaiveSend is the baseline: per message, lock the conversation, read its counter, insert
// the message, advance the counter; one message per round trip.
func BenchmarkNaiveSend(b *testing.B) {
	for _, n := range benchConversationCounts {
		b.Run(fmt.Sprintf("convs=%d", n), func(b *testing.B) { benchNaive(b, n) })
	}
}

func benchNaive(b *testing.B, conversations int) {
	store := benchStore(b)
	convs := benchConversationIDs(b, store, conversations)
	locks := make(map[string]*sync.Mutex, len(convs))
	for _, id := range convs {
		locks[id] = &sync.Mutex{}
	}
	runSenders(b, convs, func(ctx context.Context, convID string) error {
		mu := locks[convID]
		mu.Lock()
		defer mu.Unlock()
		conv, err := store.Conversation(ctx, convID)
		if err != nil {
			return err
		}
		req := benchRequest(convID)
		next := conv.LastSeq + 1
		if err := store.InsertMessages(ctx, []storage.Message{{ConversationID: convID, Seq: next, SenderID: req.SenderID,
			Kind: req.Kind, Body: req.Body, CreatedAt: time.Now().UTC(), ClientMsgID: req.ClientMsgID}}); err != nil {
			return err
		}
		return store.AdvanceCounters(ctx, map[string]storage.Counters{convID: {LastSeq: next}})
	})
}

// runSenders sends b.N messages from benchSenders goroutines, round robin over convs, and reports
// messages per second.
func runSenders(b *testing.B, convs []string, send func(ctx context.Context, convID string) error) {
	b.Helper()
	b.ReportAllocs()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range benchSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := send(ctx, convs[i%int64(len(convs))])
				cancel()
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("send: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// benchStore opens a fresh database with a pool of benchPoolSize connections.
func benchStore(b *testing.B) *storage.Store {
	cfg := testenv.StoreConfig(b)
	u, err := url.Parse(cfg.URI)
	if err != nil {
		b.Fatalf("parse store URI: %v", err)
	}
	q := u.Query()
	q.Set("maxPoolSize", strconv.Itoa(benchPoolSize))
	u.RawQuery = q.Encode()
	cfg.URI = u.String()
	return testenv.OpenStore(b, cfg)
}

func benchConversationIDs(b *testing.B, store *storage.Store, n int) []string {
	b.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d-%s", i, uuid.NewString()[:8])
		if _, err := store.EnsureConversation(benchContext(b), storage.Conversation{ID: ids[i], Kind: storage.KindGroup,
			Members: []string{"alice", "bob"}, CreatedBy: "alice", CreatedAt: time.Now().UTC()}); err != nil {
			b.Fatalf("create conversation: %v", err)
		}
	}
	return ids
}

func benchRequest(convID string) sequencer.SendRequest {
	return sequencer.SendRequest{ConversationID: convID, SenderID: "alice", ClientMsgID: uuid.NewString(),
		Kind: protocol.KindText, Body: "a message of a typical length, about sixty bytes of text"}
}

func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	b.Cleanup(cancel)
	return ctx
}
