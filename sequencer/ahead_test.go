package sequencer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
)

// raiseLog is a memStore that records every counter raise.
type raiseLog struct {
	*memStore
	mu     sync.Mutex
	raises []storage.Counters // of conversation c1, in order
}

func (s *raiseLog) AdvanceCounters(ctx context.Context, counters map[string]storage.Counters) error {
	s.mu.Lock()
	if n, ok := counters["c1"]; ok {
		n.Senders = maps.Clone(n.Senders)
		s.raises = append(s.raises, n)
	}
	s.mu.Unlock()
	return s.memStore.AdvanceCounters(ctx, counters)
}

func (s *raiseLog) recorded() []storage.Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.raises)
}

func sendText(t *testing.T, seq *sequencer.Sequencer, sender, body string) protocol.Message {
	t.Helper()
	m, err := seq.Send(sendContext(t), sequencer.SendRequest{ConversationID: "c1", SenderID: sender,
		ClientMsgID: uuid.NewString(), Kind: protocol.KindText, Body: body})
	if err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	return m
}

// TestABusyConversationsSendsAreAckedAheadOfItsCounters: sends that follow each other closely
// are acked without a counter raise each (the second raise opens the counters, later sends ride
// on it), and once the conversation is quiet its owner closes the counters with all it held
// back: lastSeq, the newest preview, and each sender's newest seq.
func TestABusyConversationsSendsAreAckedAheadOfItsCounters(t *testing.T) {
	store := &raiseLog{memStore: newMemStore(groupOf("c1", "alice", "bob"))}
	seq, _ := startSequencer(t, testenv.NATS(t), sequencer.Config{Partitions: 1}, store, zerolog.Nop())
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	const sends = 6
	for i := range sends {
		sendText(t, seq, []string{"alice", "bob"}[i%2], fmt.Sprintf("message %d", i+1))
	}
	raises := store.recorded()
	if len(raises) >= sends || raises[0].Ahead || !raises[1].Ahead {
		t.Fatalf("%d sends in quick succession made %d raises (%+v); want the first to close the counters (the conversation was quiet), the second to open them, and fewer raises than sends", sends, len(raises), raises)
	}
	poll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		raises := store.recorded()
		last := raises[len(raises)-1]
		switch {
		case last.Ahead:
			return fmt.Errorf("the last of %d raises still opens the counters", len(raises))
		case last.LastSeq != sends || last.Newest == nil || last.Newest.Seq != sends:
			return fmt.Errorf("the closing raise is of lastSeq %d, preview %+v; want %d and its preview", last.LastSeq, last.Newest, sends)
		}
		senders := make(map[string]int64)
		for _, n := range raises {
			for u, s := range n.Senders {
				senders[u] = max(senders[u], s)
			}
		}
		if want := map[string]int64{"alice": sends - 1, "bob": sends}; !maps.Equal(senders, want) {
			return fmt.Errorf("the raises give the senders %v; want %v", senders, want)
		}
		return nil
	})
}

// TestAConversationFoundAheadOfItsCountersIsRaisedWhole: an owner that takes over a conversation
// whose counters its previous owner left open (reads fold messages in) writes all it read with
// its first raise, the folded senders and mentions included, so nothing a reader counted is lost
// once lastSeq passes it; and once the conversation is quiet it closes them.
func TestAConversationFoundAheadOfItsCountersIsRaisedWhole(t *testing.T) {
	conv := groupOf("c1", "alice", "bob")
	conv.LastSeq, conv.CountersOpen = 2, true
	conv.Senders = map[string]int64{"bob": 2}
	conv.Mentioned = map[string][]int64{"alice": {2}}
	store := &raiseLog{memStore: newMemStore(conv)}
	for s := int64(1); s <= 2; s++ {
		store.msgs = append(store.msgs, storage.Message{ConversationID: "c1", Seq: s, SenderID: "bob", Kind: protocol.KindText})
	}
	seq, _ := startSequencer(t, testenv.NATS(t), sequencer.Config{Partitions: 1}, store, zerolog.Nop())
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	if m := sendText(t, seq, "alice", "hello"); m.Seq != 3 {
		t.Fatalf("send acked at seq %d; want 3", m.Seq)
	}
	first := store.recorded()[0]
	if want := map[string]int64{"alice": 3, "bob": 2}; !maps.Equal(first.Senders, want) {
		t.Errorf("first raise's senders %v; want %v", first.Senders, want)
	}
	if got := first.Mentioned["alice"]; !slices.Equal(got, []int64{2}) {
		t.Errorf("first raise's mention seqs of alice %v; want [2]", got)
	}
	poll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if raises := store.recorded(); raises[len(raises)-1].Ahead {
			return fmt.Errorf("the last of %d raises opens the counters; want them closed once quiet", len(raises))
		}
		return nil
	})
}
