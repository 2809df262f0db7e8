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
// moved while it stalled) and still writes the seq it thinks is next is refused, whether that
// seq's bucket is still open or sealed, and the new owner's message at that seq stands; the stale
// send's client id stays free for its retry.
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
	// The new owner fills the bucket and seals it; the stale owner's write of its last seq is
	// refused, and the sealed bucket keeps the new owner's message.
	var rest []storage.Message
	for seq := int64(6); seq <= storage.BucketSize; seq++ {
		rest = append(rest, msg("c", seq))
	}
	if err := s.InsertMessages(ctx, rest); err != nil {
		t.Fatal(err)
	}
	if err := s.SealBuckets(ctx, "c", 6, storage.BucketSize); err != nil {
		t.Fatal(err)
	}
	late := msg("c", storage.BucketSize)
	if err := s.InsertMessages(ctx, []storage.Message{late}); !errors.As(err, &dup) || dup.Index != 0 {
		t.Fatalf("stale owner's write into the sealed bucket: %v; want refused", err)
	}
	last, err := s.MessageRange(ctx, "c", storage.BucketSize, storage.BucketSize)
	if err != nil || len(last) != 1 || last[0].ClientMsgID != rest[len(rest)-1].ClientMsgID {
		t.Fatalf("the sealed bucket's last message: %+v, %v; want the new owner's", last, err)
	}
}

// storedAt1 returns a store holding one message, at seq 1 of conversation c.
func storedAt1(t *testing.T) (*storage.Store, context.Context, storage.Message) {
	t.Helper()
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	first := msg("c", 1)
	if err := s.InsertMessages(ctx, []storage.Message{first}); err != nil {
		t.Fatal(err)
	}
	return s, ctx, first
}

// TestRetriedSendFindsItsMessage: a send stored before is found by its client id, and storing it
// again is refused where the batch reaches it.
func TestRetriedSendFindsItsMessage(t *testing.T) {
	s, ctx, first := storedAt1(t)
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

// TestALongInsertStopsAtItsFirstDuplicate: a batch of more messages than one insert command of
// the embedded store takes (FerretDB v1 carries on after a duplicate once past 100 documents) is
// still refused whole from its first duplicate: nothing after it is stored, so the owner can give
// those messages other seqs.
func TestALongInsertStopsAtItsFirstDuplicate(t *testing.T) {
	s, ctx, first := storedAt1(t)
	again := first
	again.Seq = 2
	batch := []storage.Message{msg("c", 2), again}
	for seq := int64(3); seq <= 80; seq++ {
		batch = append(batch, msg("c", seq))
	}
	var dup *storage.DuplicateError
	if err := s.InsertMessages(ctx, batch); !errors.As(err, &dup) || dup.Index != 1 {
		t.Fatalf("a batch of %d with a retried send second: %v; want a duplicate at index 1", len(batch), err)
	}
	page, err := s.MessageRange(ctx, "c", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(page); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("stored seqs %v; want 1 and 2 only (nothing after the duplicate)", got)
	}
	for _, m := range batch[2:] {
		if _, err := s.MessageByClientID(ctx, "c", m.ClientMsgID); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("send at seq %d, after the duplicate, is stored: %v", m.Seq, err)
		}
	}
}

// TestMessagesMoveIntoSealedBuckets: a conversation's newest messages are read from their claims,
// and once a bucket is full and sealed, from it; a change made before the seal and one made after
// it both show, and a catch-up finds them.
func TestMessagesMoveIntoSealedBuckets(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = storage.BucketSize + 10
	var all []storage.Message
	for seq := int64(1); seq <= n; seq++ {
		all = append(all, msg("c", seq))
	}
	// In two batches, as an owner writes them: the first bucket is filled by the second.
	for _, batch := range [][]storage.Message{all[:40], all[40:]} {
		if err := s.InsertMessages(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(seq, version int64, body string) {
		t.Helper()
		m := all[seq-1]
		m.Body, m.Version = body, version
		if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: m, PrevVersion: all[seq-1].Version}}); err != nil {
			t.Fatal(err)
		}
		all[seq-1] = m
	}
	edit(3, 1, "edited in its claim")
	if err := s.SealBuckets(ctx, "c", 1, n); err != nil {
		t.Fatal(err)
	}
	buckets, err := db.Collection("messageBuckets").CountDocuments(ctx, bson.D{})
	if err != nil || buckets != 1 {
		t.Fatalf("%d buckets sealed, %v; want the full one only", buckets, err)
	}
	edit(5, 2, "edited in its bucket")
	edit(n, 3, "edited, still in its claim")
	page, err := s.MessageRange(ctx, "c", 1, n+20)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != n {
		t.Fatalf("%d messages; want %d", len(page), n)
	}
	for i, m := range page {
		if m.Seq != int64(i+1) || m.Body != all[i].Body || m.Version != all[i].Version {
			t.Fatalf("seq %d: %q version %d; want seq %d %q version %d", m.Seq, m.Body, m.Version, i+1, all[i].Body, all[i].Version)
		}
	}
	changed, err := s.ChangedMessages(ctx, "c", 0, n, 10)
	if err != nil || !slices.Equal(seqsOf(changed), []int64{3, 5, n}) {
		t.Fatalf("changes: %v, %v; want seqs 3, 5, %d", seqsOf(changed), err, n)
	}
	if err := s.SealBuckets(ctx, "c", 1, n); err != nil {
		t.Fatalf("sealing again: %v", err)
	}
	if page, err := s.MessageRange(ctx, "c", 5, 5); err != nil || page[0].Body != "edited in its bucket" {
		t.Fatalf("after sealing again seq 5 is %+v, %v", page, err)
	}
}

// TestPagesAreIndexLookupsAtAnyDepth: on the embedded store, the read of a page's sealed bucket is
// an index search whatever the depth (FerretDB pushes {_id} down; the embedded store's indexer
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
	if err := s.SealBuckets(ctx, conv, 1, total); err != nil {
		t.Fatal(err)
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
