package indexing_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/indexing"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/search"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The feed's tests run it on a real NATS server, as the owners publish to it, over a store fake
// that holds what the owners stored (a fake: this package's unit tests only; node's tests run
// it over the real store).

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// fakeStore holds conversations and their messages as the owners stored them.
type fakeStore struct {
	mu    sync.Mutex
	convs map[string]storage.Conversation
	msgs  map[string][]storage.Message // by conversation; [i] has seq i+1
	// failFrom, when not 0, makes a read of messages from that seq on fail.
	failFrom int64
}

func newFakeStore() *fakeStore {
	return &fakeStore{convs: make(map[string]storage.Conversation), msgs: make(map[string][]storage.Message)}
}

// store adds (or replaces) messages of a conversation, and raises its counters.
func (f *fakeStore) store(msgs ...storage.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		c := f.convs[m.ConversationID]
		c.ID = m.ConversationID
		list := f.msgs[m.ConversationID]
		for int64(len(list)) < m.Seq {
			list = append(list, storage.Message{})
		}
		list[m.Seq-1] = m
		f.msgs[m.ConversationID] = list
		c.LastSeq, c.LastVersion = max(c.LastSeq, m.Seq), max(c.LastVersion, m.Version)
		f.convs[m.ConversationID] = c
	}
}

func (f *fakeStore) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[id]
	if !ok {
		return c, storage.ErrNotFound
	}
	return c, nil
}

func (f *fakeStore) MessageRange(_ context.Context, id string, from, to int64) ([]storage.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failFrom > 0 && from >= f.failFrom {
		return nil, errors.New("store down")
	}
	var out []storage.Message
	for _, m := range f.msgs[id] {
		if m.Seq >= from && m.Seq <= to {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeStore) ChangedMessages(_ context.Context, id string, after, maxSeq int64, limit int) ([]storage.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storage.Message
	for _, m := range f.msgs[id] {
		if m.Version > after && m.Seq <= maxSeq {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b storage.Message) int { return cmp.Compare(a.Version, b.Version) })
	return out[:min(len(out), limit)], nil
}

func (f *fakeStore) ConversationIDsAfter(_ context.Context, after string, limit int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.convs {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids[:min(len(ids), limit)], nil
}

type harness struct {
	t     testing.TB
	nc    *nats.Conn
	store *fakeStore
	feed  *indexing.Feed
}

func start(t testing.TB, store *fakeStore) *harness {
	t.Helper()
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	feed, err := indexing.Start(indexing.Config{Dir: filepath.Join(t.TempDir(), "search")}, nc, store, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := feed.Close(); err != nil {
			t.Error(err)
		}
	})
	return &harness{t: t, nc: nc, store: store, feed: feed}
}

func text(conv string, seq int64, body string) storage.Message {
	return storage.Message{ConversationID: conv, Seq: seq, SenderID: "alice", Kind: protocol.KindText, Body: body,
		CreatedAt: t0.Add(time.Duration(seq) * time.Second)}
}

// publish publishes what an owner publishes after storing: a message or a change.
func (h *harness) publish(v any) {
	h.t.Helper()
	var subject string
	switch x := v.(type) {
	case storage.Message:
		v, subject = message.View(x, ""), sequencer.MessageSubject(sequencer.DefaultSubjectPrefix, x.ConversationID)
	case sequencer.Change:
		subject = sequencer.ChangeSubject(sequencer.DefaultSubjectPrefix, x.ConversationID)
	}
	data, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Publish(subject, data); err != nil {
		h.t.Fatal(err)
	}
}

// finds waits until a search of conversations for words finds exactly the seqs want, newest first.
func (h *harness) finds(words string, conversations []string, want ...int64) {
	h.t.Helper()
	testenv.CheckFor(h.t, 10*time.Second, 10*time.Millisecond, func() error {
		p, err := h.feed.Search(context.Background(), search.Query{Text: words, Conversations: conversations})
		if err != nil {
			return err
		}
		var got []int64
		for _, hit := range p.Hits {
			got = append(got, hit.Seq)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%q finds %v, want %v", words, got, want)
		}
		return nil
	})
}

// TestLiveMessagesAndChangesAreIndexed: messages as published are found; an edit is found by its
// new text and not its old; a deletion is gone; a reaction changes nothing found.
func TestLiveMessagesAndChangesAreIndexed(t *testing.T) {
	h := start(t, newFakeStore())
	one, two := text("c", 1, "the blue heron"), text("c", 2, "a grey heron")
	h.store.store(one, two)
	h.publish(one)
	h.publish(two)
	h.finds("heron", []string{"c"}, 2, 1)
	// Each change stored first, then published, as the owner does.
	one.Body, one.Version = "the blue egret", 1
	h.store.store(one)
	h.publish(sequencer.Change{Op: message.OpEdit, ConversationID: "c", Seq: 1, Version: 1, UserID: "alice", Body: one.Body, CreatedAt: one.CreatedAt})
	two.Reactions, two.Version = []storage.Reaction{{Emoji: "👍", Users: []string{"bob"}}}, 2
	h.store.store(two)
	h.publish(sequencer.Change{Op: message.OpReact, ConversationID: "c", Seq: 2, Version: 2, UserID: "bob", Emoji: "👍", Count: 1})
	h.store.store(storage.Message{ConversationID: "c", Seq: 2, Kind: protocol.KindDeleted, CreatedAt: two.CreatedAt, Version: 3})
	h.publish(sequencer.Change{Op: message.OpDelete, ConversationID: "c", Seq: 2, Version: 3, UserID: "alice", CreatedAt: two.CreatedAt})
	h.finds("egret", []string{"c"}, 1)
	h.finds("heron", []string{"c"})
}

// TestMissedEventsAreReadFromTheStore: a message published after a gap (its predecessors were
// never heard) makes the feed read the conversation from the store, as it is now: the missed
// messages, and an edit made meanwhile by its new text.
func TestMissedEventsAreReadFromTheStore(t *testing.T) {
	store := newFakeStore()
	h := start(t, store)
	edited := text("g", 1, "the pelican, edited")
	edited.Version = 1
	store.store(edited, text("g", 2, "a second pelican"), text("g", 3, "the third pelican"))
	h.publish(text("g", 3, "the third pelican"))
	h.finds("pelican", []string{"g"}, 3, 2, 1)
	h.finds("edited", []string{"g"}, 1)
}

// TestStartCatchesUpFromTheStore: what the store holds when the feed starts is indexed without
// any event (a node that was down, or a new one).
func TestStartCatchesUpFromTheStore(t *testing.T) {
	store := newFakeStore()
	store.store(text("a", 1, "otter one"), text("b", 1, "otter two"), storage.Message{ConversationID: "b", Seq: 2, Kind: protocol.KindDeleted, CreatedAt: t0})
	h := start(t, store)
	h.finds("otter", []string{"a", "b"}, 1, 1)
}

// TestALongConversationIsCaughtUpInParts: a catch-up writes a long conversation to the index in
// parts, each with the progress it makes, so a store that fails part of the way loses only the
// part under way, and nothing of it is held in memory whole.
func TestALongConversationIsCaughtUpInParts(t *testing.T) {
	store := newFakeStore()
	msgs := make([]storage.Message, 15000)
	for i := range msgs {
		msgs[i] = text("long", int64(i+1), fmt.Sprintf("walrus %d", i+1))
	}
	store.store(msgs...)
	store.failFrom = 12001
	h := start(t, store)
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		p, err := h.feed.Progress("long")
		if err != nil || p.Seq != 10000 {
			return fmt.Errorf("progress %+v, %v; want seq 10000, the part written before the store failed", p, err)
		}
		return nil
	})
}

// TestForgetAccountRemovesItsMessages: a deleted account's messages leave the index, and so do
// the conversations deleted with it.
func TestForgetAccountRemovesItsMessages(t *testing.T) {
	h := start(t, newFakeStore())
	erin := text("g", 1, "lynx from erin")
	erin.SenderID = "erin"
	others := text("g", 2, "lynx from alice")
	dm := text("dm", 1, "lynx in a dm")
	h.store.store(erin, others, dm)
	for _, m := range []storage.Message{erin, others, dm} {
		h.publish(m)
	}
	h.finds("lynx", []string{"g", "dm"}, 2, 1, 1)
	if err := h.feed.ForgetAccount("erin", []string{"dm"}); err != nil {
		t.Fatal(err)
	}
	h.finds("lynx", []string{"g", "dm"}, 2)
}

// BenchmarkFeed publishes messages at 500 a second, as owners do, to a feed over real NATS and
// reports the longest any waited to be searchable (its conversation's progress past it) and
// the messages a second taken.
//
//	go test ./indexing -run '^$' -bench BenchmarkFeed -benchtime 15000x
func BenchmarkFeed(b *testing.B) {
	const rate = 500
	h := start(b, newFakeStore())
	var mu sync.Mutex
	published := []time.Time{time.Time{}} // [seq] is when seq was published
	var lagMax time.Duration
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the sampler: how far the index has taken the conversation
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p, err := h.feed.Progress("bench")
			mu.Lock()
			if err == nil && int(p.Seq)+1 < len(published) {
				lagMax = max(lagMax, time.Since(published[p.Seq+1]))
			}
			mu.Unlock()
		}
	}()
	b.ReportAllocs()
	begin := time.Now()
	seq := int64(0)
	for b.Loop() {
		seq++
		if wait := time.Until(begin.Add(time.Duration(seq) * time.Second / rate)); wait > 0 {
			time.Sleep(wait)
		}
		mu.Lock()
		published = append(published, time.Now())
		mu.Unlock()
		h.publish(text("bench", seq, fmt.Sprintf("message %d about the weather and the harbour", seq)))
	}
	testenv.CheckFor(b, time.Minute, time.Millisecond, func() error {
		if p, err := h.feed.Progress("bench"); err != nil || p.Seq < seq {
			return fmt.Errorf("indexed up to %d of %d (%v)", p.Seq, seq, err)
		}
		return nil
	})
	close(stop)
	<-sampled
	b.ReportMetric(float64(seq)/time.Since(begin).Seconds(), "msgs/s")
	b.ReportMetric(float64(lagMax.Microseconds())/1000, "ms-lag-max")
}
