package storage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
)

// seqsOf lists the seqs of msgs.
func seqsOf(msgs []storage.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Seq)
	}
	return out
}

// TestStaleOwnerCannotWriteIntoABucketItLost: an owner that lost its conversation (its lease
// moved while it stalled) and still writes the seq it thinks is next is refused, and the new
// owner's message at that seq stands; the stale send's client id stays free for its retry.
func TestStaleOwnerCannotWriteIntoABucketItLost(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.InsertMessages(ctx, []storage.Message{msg("c", 1), msg("c", 2), msg("c", 3)}); err != nil {
		t.Fatal(err)
	}
	// The new owner continues after what is claimed, and writes seq 4 into the same bucket.
	high, err := s.RecoverSeq(ctx, "c")
	if err != nil || high != 3 {
		t.Fatalf("new owner recovers seq %d, %v; want 3", high, err)
	}
	mine := msg("c", 4)
	if err := s.InsertMessages(ctx, []storage.Message{mine}); err != nil {
		t.Fatal(err)
	}
	// The stale owner writes its own seq 4.
	stale := msg("c", 4)
	stale.Body = "stale"
	var dup *storage.DuplicateError
	if err := s.InsertMessages(ctx, []storage.Message{stale}); !errors.As(err, &dup) || dup.Index != 0 {
		t.Fatalf("stale owner's write: %v; want refused at index 0", err)
	}
	if _, err := s.MessageByClientID(ctx, "c", stale.ClientMsgID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the stale send is found: %v; want not found (its seq was taken)", err)
	}
	page, err := s.MessageRange(ctx, "c", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(page); !slices.Equal(got, []int64{1, 2, 3, 4}) || page[3].ClientMsgID != mine.ClientMsgID {
		t.Fatalf("page %v, seq 4 from %q; want 1..4 with the new owner's message", got, page[3].ClientMsgID)
	}
	// The retry of the stale send, through the new owner, stores it at seq 5.
	stale.Seq = 5
	if err := s.InsertMessages(ctx, []storage.Message{stale}); err != nil {
		t.Fatalf("retry of the refused send: %v", err)
	}
}

// TestRetriedSendFindsItsMessage: a send stored before is found by its client id, and storing it
// again is refused where the batch reaches it.
func TestRetriedSendFindsItsMessage(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := msg("c", 1)
	if err := s.InsertMessages(ctx, []storage.Message{first}); err != nil {
		t.Fatal(err)
	}
	again := first
	again.Seq = 2
	var dup *storage.DuplicateError
	if err := s.InsertMessages(ctx, []storage.Message{msg("d", 1), again, msg("c", 3)}); !errors.As(err, &dup) || dup.Index != 1 {
		t.Fatalf("retried send: %v; want a duplicate at index 1", err)
	}
	found, err := s.MessageByClientID(ctx, "c", first.ClientMsgID)
	if err != nil || found.Seq != 1 {
		t.Fatalf("retried send found at seq %d, %v; want 1", found.Seq, err)
	}
	if page, err := s.MessageRange(ctx, "d", 1, 5); err != nil || len(page) != 1 {
		t.Fatalf("the message before the duplicate: %d stored, %v; want 1", len(page), err)
	}
}

// TestFailedWriterLosesNothing: a writer that claimed seqs and failed before appending the
// messages to their bucket (killed between its two writes) loses nothing: the retried send finds
// its message under the claimed seq, and a new owner appends it from its claim, so the
// conversation pages gaplessly with the message in place. A claim that holds no message (a store
// edited by hand) becomes a tombstone, counted deleted.
func TestFailedWriterLosesNothing(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "c", Kind: storage.KindGroup, Members: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertMessages(ctx, []storage.Message{msg("c", 1), msg("c", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"c": {LastSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	// Seq 3's claims, as InsertMessages writes them, and no append; seq 4 claimed bare.
	lost := msg("c", 3)
	lost.Body = "claimed, never appended"
	claims := testenv.Database(t, cfg).Collection("messageClaims")
	for _, doc := range []bson.D{
		{{Key: "_id", Value: "c/" + lost.ClientMsgID}, {Key: "conversationId", Value: "c"}, {Key: "seq", Value: int64(3)}},
		{{Key: "_id", Value: "c/000000000003"}, {Key: "conversationId", Value: "c"}, {Key: "seq", Value: int64(3)}, {Key: "message", Value: lost}},
		{{Key: "_id", Value: "c/000000000004"}, {Key: "conversationId", Value: "c"}, {Key: "seq", Value: int64(4)}},
	} {
		if _, err := claims.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	if found, err := s.MessageByClientID(ctx, "c", lost.ClientMsgID); err != nil || found.Seq != 3 || found.Body != lost.Body {
		t.Fatalf("the retried send finds seq %d %q, %v; want its message at 3", found.Seq, found.Body, err)
	}
	high, err := s.RecoverSeq(ctx, "c")
	if err != nil || high != 4 {
		t.Fatalf("recovered seq %d, %v; want 4", high, err)
	}
	page, err := s.MessageRange(ctx, "c", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(page); !slices.Equal(got, []int64{1, 2, 3, 4}) || page[2].Body != lost.Body || page[3].Kind != protocol.KindDeleted {
		t.Fatalf("page %v (%q, %s); want 1..4 with the claimed message at 3 and a tombstone at 4", got, page[2].Body, page[3].Kind)
	}
	conv, err := s.Conversation(ctx, "c")
	if err != nil || !slices.Equal(conv.DeletedSeqs, []int64{4}) {
		t.Fatalf("deleted seqs %v, %v; want [4]", conv.DeletedSeqs, err)
	}
	if again, err := s.RecoverSeq(ctx, "c"); err != nil || again != 4 {
		t.Fatalf("a second recovery: %d, %v", again, err)
	}
	if page, err := s.MessageRange(ctx, "c", 1, 10); err != nil || len(page) != 4 {
		t.Fatalf("after a second recovery: %d messages, %v; want 4", len(page), err)
	}
}

// TestPagesAreIndexLookupsAtAnyDepth: on the embedded store, the read of a page's bucket is an
// index search whatever the depth (FerretDB pushes {_id} down; the embedded store's indexer
// gives SQLite the index that query needs), and pages deep and shallow hold what was written.
func TestPagesAreIndexLookupsAtAnyDepth(t *testing.T) {
	const total = 3000
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conv := uuid.NewString()
	for start := int64(1); start <= total; start += 1000 {
		var batch []storage.Message
		for seq := start; seq < start+1000; seq++ {
			m := msg(conv, seq)
			m.Body = fmt.Sprint(seq)
			batch = append(batch, m)
		}
		if err := s.InsertMessages(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []int64{1, 1500, total - 49} {
		page, err := s.MessageRange(ctx, conv, from, from+49)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 50 || page[0].Seq != from || page[49].Body != fmt.Sprint(from+49) {
			t.Fatalf("page at %d: %d messages from %v", from, len(page), seqsOf(page[:min(1, len(page))]))
		}
		poll.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
			plan, err := s.ExplainMessagePage(ctx, conv, from)
			if err != nil {
				return err
			}
			if plan.Lookup("filterPushdown").Boolean() != true {
				return fmt.Errorf("the bucket read is not pushed down to SQL: %s", plan)
			}
			if text := plan.Lookup("queryPlanner").String(); !strings.Contains(text, "SEARCH") || !strings.Contains(text, "_id_lookup") {
				return fmt.Errorf("the bucket read is not an index search: %s", text)
			}
			return nil
		})
	}
}
