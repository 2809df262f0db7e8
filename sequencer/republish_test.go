package sequencer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// lossyStore stores an insert but answers it with an error, once: the store went away after
// writing and before answering. With fold, its counters are open, and a read of the conversation
// folds in the messages stored above them, as storage does while an owner runs ahead of them.
type lossyStore struct {
	*memStore
	lose   chan struct{} // closed once the lost answer has been given
	onLost func()        // called when it is
	fold   bool
}

func (s *lossyStore) Conversation(ctx context.Context, id string) (storage.Conversation, error) {
	c, err := s.memStore.Conversation(ctx, id)
	if err != nil || !s.fold {
		return c, err
	}
	high, err := s.RecoverSeq(ctx, id)
	c.CountersOpen, c.RaisedSeq, c.LastSeq = true, c.LastSeq, max(c.LastSeq, high)
	return c, err
}

func (s *lossyStore) InsertMessages(ctx context.Context, msgs []storage.Message) error {
	err := s.memStore.InsertMessages(ctx, msgs)
	select {
	case <-s.lose:
		return err
	default:
		close(s.lose)
		s.onLost()
		return errors.New("connection closed by the other side: EOF")
	}
}

// TestStoredButUnansweredSendIsPublishedInOrder: a send whose insert landed but whose answer was
// lost is not acked, and the owner forgets the conversation; when the next send loads it again,
// the owner publishes the unconfirmed message before the new one, so a live member gets every seq
// in order instead of a gap before the next message. So it does when the conversation's counters
// are open and the load's read has folded the unconfirmed message in.
func TestStoredButUnansweredSendIsPublishedInOrder(t *testing.T) {
	for _, fold := range []bool{false, true} {
		t.Run(fmt.Sprintf("counters open %v", fold), func(t *testing.T) { checkUnansweredPublishedInOrder(t, fold) })
	}
}

func checkUnansweredPublishedInOrder(t *testing.T, fold bool) {
	store := &lossyStore{memStore: newMemStore(groupOf("c1", "alice", "bob")), lose: make(chan struct{}), fold: fold}
	url := testenv.NATS(t)
	seq, nc := startSequencer(t, url, sequencer.Config{Partitions: 1, AttemptTimeout: time.Second}, store, zerolog.Nop())
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	published := make(chan protocol.Message, 16)
	sub, err := nc.Subscribe(seq.MessageSubject("c1"), func(m *nats.Msg) {
		var msg protocol.Message
		if err := json.Unmarshal(m.Data, &msg); err == nil {
			published <- msg
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	ctx := sendContext(t)
	// alice gives up when the answer is lost (her client went away too), so nobody retries.
	first, cancel := context.WithCancel(ctx)
	store.onLost = cancel
	_, err = seq.Send(first, sequencer.SendRequest{ConversationID: "c1", SenderID: "alice", ClientMsgID: "m1", Kind: protocol.KindText, Body: "one"})
	cancel()
	if !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("send whose answer was lost: %v; want ErrUnavailable", err)
	}
	m, err := seq.Send(ctx, sequencer.SendRequest{ConversationID: "c1", SenderID: "bob", ClientMsgID: "m2", Kind: protocol.KindText, Body: "two"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 2 {
		t.Fatalf("next send got seq %d; want 2 (seq 1 is stored)", m.Seq)
	}
	for want := int64(1); want <= 2; want++ {
		select {
		case got := <-published:
			if got.Seq != want {
				t.Fatalf("published seq %d; want %d: %s", got.Seq, want, fmt.Sprint(got))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("seq %d never published", want)
		}
	}
}
