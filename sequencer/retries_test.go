package sequencer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// claimingStore refuses an insert as storage does: a message whose client message id or seq its
// conversation has stored already ends the insert there, with the messages before it stored.
type claimingStore struct {
	*memStore
}

func (s *claimingStore) InsertMessages(ctx context.Context, msgs []storage.Message) error {
	s.mu.Lock()
	taken := len(msgs)
	for i, m := range msgs {
		if slices.ContainsFunc(s.msgs, func(o storage.Message) bool {
			return o.ConversationID == m.ConversationID && (o.ClientMsgID == m.ClientMsgID || o.Seq == m.Seq)
		}) {
			taken = i
			break
		}
	}
	s.mu.Unlock()
	if err := s.memStore.InsertMessages(ctx, msgs[:taken]); err != nil {
		return err
	}
	if taken < len(msgs) {
		return &storage.DuplicateError{Index: taken, Err: fmt.Errorf("%s is stored already", msgs[taken].ClientMsgID)}
	}
	return nil
}

// TestRetriesStoredByADeadOwnerAreAnsweredWithTheirSeqs: a failed owner stored two sends and
// died before acking them. Their retries reach the new owner in one batch between new sends: each
// retry is answered with the seq it is stored at, and the new sends take the next seqs, once
// each, with no gap.
func TestRetriesStoredByADeadOwnerAreAnsweredWithTheirSeqs(t *testing.T) {
	send := func(id, body string) sequencer.SendRequest {
		return sequencer.SendRequest{ConversationID: "c1", SenderID: "alice", ClientMsgID: id, Kind: protocol.KindText, Body: body}
	}
	retry1, retry2 := send(uuid.NewString(), "stored by the dead owner, first"), send(uuid.NewString(), "stored by the dead owner, second")
	mem := newMemStore(groupOf("c1", "alice", "bob"), groupOf("c0", "alice"))
	for seq, r := range []sequencer.SendRequest{retry1, retry2} {
		mem.msgs = append(mem.msgs, storage.Message{ConversationID: "c1", Seq: int64(seq + 1), SenderID: r.SenderID,
			Kind: r.Kind, Body: r.Body, ClientMsgID: r.ClientMsgID})
	}
	store := &claimingStore{memStore: mem}
	reg := prometheus.NewRegistry()
	seq, _ := startSequencer(t, testenv.NATS(t), sequencer.Config{Partitions: 1, Metrics: sequencer.NewMetrics(reg)}, store, zerolog.Nop())
	if err := seq.OwnAll(); err != nil {
		t.Fatal(err)
	}
	ctx := sendContext(t)

	// A send in another conversation holds the store, so the next four make one batch, in order.
	blocked, release := mem.holdInserts()
	t.Cleanup(release) // before the sequencer's Close, which waits for the flush
	type answer struct {
		msg protocol.Message
		err error
	}
	start := func(req sequencer.SendRequest) <-chan answer {
		done := make(chan answer, 1)
		go func() {
			m, err := seq.Send(ctx, req)
			done <- answer{m, err}
		}()
		return done
	}
	plug := start(sequencer.SendRequest{ConversationID: "c0", SenderID: "alice", ClientMsgID: uuid.NewString(), Kind: protocol.KindText, Body: "plug"})
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the first send never reached the store")
	}
	batch := []sequencer.SendRequest{send(uuid.NewString(), "new, first"), retry1, retry2, send(uuid.NewString(), "new, second")}
	want := []int64{3, 1, 2, 4}
	var answers []<-chan answer
	for i, req := range batch {
		answers = append(answers, start(req))
		testenv.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if got := promtest.Read(t, reg, "chatd_sequencer_queue_depth").Value; got != float64(i+1) {
				return fmt.Errorf("chatd_sequencer_queue_depth = %v, want %d sends waiting", got, i+1)
			}
			return nil
		})
	}
	release()
	if a := <-plug; a.err != nil {
		t.Fatalf("the send that held the store: %v", a.err)
	}
	for i, done := range answers {
		a := <-done
		if a.err != nil || a.msg.Seq != want[i] {
			t.Errorf("%q answered seq %d, %v; want seq %d", batch[i].Body, a.msg.Seq, a.err, want[i])
		}
	}
	stored, err := store.MessageRange(ctx, "c1", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range stored {
		got = append(got, fmt.Sprintf("%d %s", m.Seq, m.Body))
	}
	if wantStored := []string{"1 " + retry1.Body, "2 " + retry2.Body, "3 " + batch[0].Body, "4 " + batch[3].Body}; !slices.Equal(got, wantStored) {
		t.Fatalf("stored %q; want %q", got, wantStored)
	}
}
