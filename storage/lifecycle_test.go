package storage_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// deletedOf returns what a conversation records of its tombstones: the count and the seqs, sorted.
func deletedOf(t *testing.T, ctx context.Context, s *storage.Store, conv string) (int64, []int64) {
	t.Helper()
	c, err := s.Conversation(ctx, conv)
	if err != nil {
		t.Fatalf("load conversation %s: %v", conv, err)
	}
	seqs := slices.Clone(c.DeletedSeqs)
	slices.Sort(seqs)
	return c.DeletedCount, seqs
}

// TestDeleteMessageRecordsTheSeqOnce: a delete for everyone records the seq on the conversation
// and counts it, once however often it is asked; a conversation stored without the field (as
// every one before it existed) takes it; someone else's message and a missing one are refused
// and record nothing.
func TestDeleteMessageRecordsTheSeqOnce(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "dm", Kind: storage.KindDM,
		Members: []string{"alice", "bob"}, CreatedBy: "alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 0 || seqs != nil {
		t.Fatalf("a new conversation records %d tombstones %v", n, seqs)
	}
	bobs := msg("dm", 3)
	bobs.SenderID = "bob"
	if err := s.InsertMessages(ctx, []storage.Message{msg("dm", 1), msg("dm", 2), bobs, msg("dm", 4), msg("dm", 5)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMessage(ctx, "dm", 4, "alice"); err != nil {
		t.Fatalf("delete seq 4: %v", err)
	}
	for range 2 {
		if err := s.DeleteMessage(ctx, "dm", 4, "alice"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("deleting a tombstone again: %v; want ErrNotFound", err)
		}
	}
	if err := s.DeleteMessage(ctx, "dm", 3, "alice"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("deleting bob's message as alice: %v; want ErrNotFound", err)
	}
	if err := s.DeleteMessage(ctx, "dm", 9, "alice"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("deleting a seq that does not exist: %v; want ErrNotFound", err)
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 1 || !slices.Equal(seqs, []int64{4}) {
		t.Errorf("after deleting seq 4 three times the DM records %d tombstones %v; want 1, [4]", n, seqs)
	}
	if err := s.DeleteMessage(ctx, "dm", 1, "alice"); err != nil {
		t.Fatalf("delete seq 1: %v", err)
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 2 || !slices.Equal(seqs, []int64{1, 4}) {
		t.Errorf("after deleting seqs 4 and 1 the DM records %d tombstones %v; want 2, [1 4]", n, seqs)
	}

	// An earlier delete of seq 5 recorded it and failed before the tombstone was written: asking
	// again writes the tombstone and counts nothing twice.
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	if _, err := client.Database(cfg.Database).Collection("conversations").UpdateOne(ctx, bson.D{{Key: "_id", Value: "dm"}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "deletedSeqs", Value: 5}}}, {Key: "$inc", Value: bson.D{{Key: "deletedCount", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMessage(ctx, "dm", 5, "alice"); err != nil {
		t.Fatalf("delete seq 5 again after a failure: %v", err)
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 3 || !slices.Equal(seqs, []int64{1, 4, 5}) {
		t.Errorf("after the retried delete of seq 5 the DM records %d tombstones %v; want 3, [1 4 5]", n, seqs)
	}
	got, err := s.MessageRange(ctx, "dm", 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		if deleted := m.Seq != 2 && m.Seq != 3; deleted != (m.Kind == storage.KindDeleted) {
			t.Errorf("seq %d is %q; want tombstones at 1, 4 and 5 only", m.Seq, m.Kind)
		}
	}
}

// TestDeleteAccountRecordsItsTombstones: the seqs of a deleted account's group messages are
// recorded on the group, each once, including none of those it had deleted itself before.
func TestDeleteAccountRecordsItsTombstones(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range []string{"alice", "carol"} {
		if _, err := s.EnsureUser(ctx, storage.User{ID: u, Name: u, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "g", Kind: storage.KindGroup, Name: "team",
		Members: []string{"alice", "carol"}, CreatedBy: "alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var batch []storage.Message
	for seq := int64(1); seq <= 5; seq++ {
		m := msg("g", seq)
		if seq != 2 {
			m.SenderID = "carol"
		}
		batch = append(batch, m)
	}
	if err := s.InsertMessages(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMessage(ctx, "g", 3, "carol"); err != nil {
		t.Fatal(err)
	}
	out, err := s.DeleteAccount(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	tomb := slices.Clone(out.Tombstoned["g"])
	slices.Sort(tomb)
	if !slices.Equal(tomb, []int64{1, 4, 5}) {
		t.Errorf("the deletion reports tombstones %v in the group; want [1 4 5] (3 was one already)", tomb)
	}
	if n, seqs := deletedOf(t, ctx, s, "g"); n != 4 || !slices.Equal(seqs, []int64{1, 3, 4, 5}) {
		t.Errorf("the group records %d tombstones %v; want 4, [1 3 4 5]", n, seqs)
	}
}
