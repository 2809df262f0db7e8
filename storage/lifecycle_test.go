package storage_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/protocol"
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

// TestRecordDeletedCountsEachSeqOnce: recording a tombstone's seq on its conversation counts it
// once however often it is asked (a retried delete, two owners for a moment), including on a
// conversation stored without the field, as every one before it existed.
func TestRecordDeletedCountsEachSeqOnce(t *testing.T) {
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
	for range 3 {
		if err := s.RecordDeleted(ctx, "dm", []int64{4}); err != nil {
			t.Fatalf("record seq 4: %v", err)
		}
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 1 || !slices.Equal(seqs, []int64{4}) {
		t.Errorf("after recording seq 4 three times the DM records %d tombstones %v; want 1, [4]", n, seqs)
	}
	if err := s.RecordDeleted(ctx, "dm", []int64{1, 4}); err != nil {
		t.Fatalf("record seqs 1 and 4: %v", err)
	}
	if n, seqs := deletedOf(t, ctx, s, "dm"); n != 2 || !slices.Equal(seqs, []int64{1, 4}) {
		t.Errorf("after recording seqs 4 and 1 the DM records %d tombstones %v; want 2, [1 4]", n, seqs)
	}
}

// TestUpdateMessagesIsGuarded: a message's new state is written only over the version it was
// changed from and never over a tombstone; a message never changed has no version field and is
// matched as version 0; a tombstone loses its quote, reactions and edit time.
func TestUpdateMessagesIsGuarded(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reply := msg("c", 2)
	reply.ReplyTo, reply.Quote = 1, &storage.Quote{SenderID: "alice", Body: "m"}
	if err := s.InsertMessages(ctx, []storage.Message{msg("c", 1), reply, msg("c", 3)}); err != nil {
		t.Fatal(err)
	}
	stored, err := s.MessageRange(ctx, "c", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	edited, at := stored[1], time.Now().UTC().Truncate(time.Millisecond)
	edited.Body, edited.EditedAt, edited.Version = "edited", &at, 1
	edited.Reactions = []storage.Reaction{{Emoji: "👍", Users: []string{"bob", "carol"}}}
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: edited, PrevVersion: 0}}); err != nil {
		t.Fatalf("first change of a message never changed: %v", err)
	}
	stale := edited
	stale.Body, stale.Version = "from a stale owner", 2
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: stale, PrevVersion: 0}}); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("a change over a version that is gone: %v; want ErrConflict", err)
	}
	tomb := storage.Message{ConversationID: "c", Seq: 2, SenderID: "alice", Kind: protocol.KindDeleted,
		CreatedAt: edited.CreatedAt, ClientMsgID: edited.ClientMsgID, Version: 3}
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: tomb, PrevVersion: 1}}); err != nil {
		t.Fatalf("tombstone: %v", err)
	}
	again := tomb
	again.Kind, again.Body, again.Version = protocol.KindText, "revived", 4
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: again, PrevVersion: 3}}); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("a change of a tombstone: %v; want ErrConflict", err)
	}
	got, err := s.MessageRange(ctx, "c", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if m := got[0]; m.Kind != protocol.KindDeleted || m.Body != "" || m.Version != 3 || m.Quote != nil || m.ReplyTo != 0 ||
		m.Reactions != nil || m.EditedAt != nil || m.ClientMsgID != reply.ClientMsgID || m.SenderID != "alice" {
		t.Errorf("the tombstone is %+v; want kind deleted, version 3, sender and clientMsgId kept, nothing else", m)
	}
}

// TestChangedMessagesInVersionOrder: a reconnecting client's catch-up gets the messages changed
// after its version, up to the seq it holds, in the order they changed, at most limit of them.
func TestChangedMessagesInVersionOrder(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var batch []storage.Message
	for seq := int64(1); seq <= 6; seq++ {
		batch = append(batch, msg("c", seq))
	}
	batch = append(batch, msg("other", 1))
	if err := s.InsertMessages(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Seqs changed in the order 5, 2, 6, 3 (versions 1..4); the other conversation's too.
	for i, seq := range []int64{5, 2, 6, 3} {
		m := batch[seq-1]
		m.Body, m.Version = "changed", int64(i+1)
		if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: m}}); err != nil {
			t.Fatal(err)
		}
	}
	other := batch[6]
	other.Version = 9
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: other}}); err != nil {
		t.Fatal(err)
	}
	seqs := func(after, maxSeq int64, limit int) []int64 {
		t.Helper()
		got, err := s.ChangedMessages(ctx, "c", after, maxSeq, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, m := range got {
			out = append(out, m.Seq)
		}
		return out
	}
	if got := seqs(0, 10, 10); !slices.Equal(got, []int64{5, 2, 6, 3}) {
		t.Errorf("changed after version 0: seqs %v; want [5 2 6 3]", got)
	}
	if got := seqs(1, 5, 10); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("changed after version 1 up to seq 5: seqs %v; want [2 3]", got)
	}
	if got := seqs(0, 10, 2); !slices.Equal(got, []int64{5, 2}) {
		t.Errorf("the first 2 changed: seqs %v; want [5 2]", got)
	}
	if got := seqs(4, 10, 10); got != nil {
		t.Errorf("changed after the last version: seqs %v; want none", got)
	}
}

// TestDeleteAccountRecordsItsTombstones: the seqs of a deleted account's group messages are
// recorded on the group, each once, including none of those it had deleted itself before.
func TestDeleteAccountRecordsItsTombstones(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensureUsers(t, ctx, s, "alice", "carol")
	ensure(t, ctx, s, "g", storage.KindGroup, "alice", "carol")
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
	// Carol deleted seq 3 herself before (as the owner does it: record, then tombstone).
	if err := s.RecordDeleted(ctx, "g", []int64{3}); err != nil {
		t.Fatal(err)
	}
	own := batch[2]
	own.Kind, own.Body, own.Version = protocol.KindDeleted, "", 1
	if err := s.UpdateMessages(ctx, []storage.MessageUpdate{{Message: own}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"g": {LastSeq: 5, Newest: &storage.MessagePreview{
		Seq: 5, SenderID: "carol", Kind: protocol.KindText, Body: "carol's last words", CreatedAt: time.Now().UTC()}}}); err != nil {
		t.Fatal(err)
	}
	// The group's owner erases her messages first (sequencer.EraseSender), then the account goes.
	tomb, err := s.TombstoneSender(ctx, "g", 5, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tomb, []int64{1, 4, 5}) {
		t.Errorf("the erase reports tombstones %v in the group; want [1 4 5] (3 was one already)", tomb)
	}
	if again, err := s.TombstoneSender(ctx, "g", 5, "carol"); err != nil || len(again) != 0 {
		t.Errorf("erasing again reports %v, %v; want nothing new", again, err)
	}
	if _, err := s.DeleteAccount(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	if n, seqs := deletedOf(t, ctx, s, "g"); n != 4 || !slices.Equal(seqs, []int64{1, 3, 4, 5}) {
		t.Errorf("the group records %d tombstones %v; want 4, [1 3 4 5]", n, seqs)
	}
	g, err := s.Conversation(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if p := g.LastMessage; p == nil || p.Seq != 5 || p.Kind != protocol.KindDeleted || p.Body != "" || p.SenderID != "" {
		t.Errorf("the group's preview after carol's account went: %+v; want seq 5 deleted, no sender, no text", p)
	}
}

// TestDeleteAccountLeavesNoPushStateOrBotToken: a deleted account keeps no push subscription (its
// endpoint and keys), settings or notice, and no bot token; another user's are left as they are.
func TestDeleteAccountLeavesNoPushStateOrBotToken(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensureUsers(t, ctx, s, "alice", "robo")
	ensure(t, ctx, s, "g", storage.KindGroup, "alice", "robo")
	now := time.Now().UTC()
	for _, u := range []string{"alice", "robo"} {
		for _, device := range []string{"phone", "laptop"} {
			if err := s.SavePushSubscription(ctx, storage.PushSubscription{UserID: u, DeviceID: device,
				Endpoint: "https://push.example/" + u + "/" + device, P256dh: "key", Auth: "auth", CreatedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetPushSettings(ctx, u, storage.PushSettings{Preview: false}); err != nil {
			t.Fatal(err)
		}
		if err := s.SavePushNotice(ctx, storage.PushNotice{UserID: u, ConversationID: "g", ToSeq: 3, SentAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.IssueBotToken(ctx, "robo", "hash-of-robo", now); err != nil {
		t.Fatal(err)
	}

	if _, err := s.DeleteAccount(ctx, "robo"); err != nil {
		t.Fatal(err)
	}
	subs, err := s.PushSubscriptionsOf(ctx, []string{"alice", "robo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs["robo"]) != 0 || len(subs["alice"]) != 2 {
		t.Errorf("push subscriptions after robo's account went: robo %d, alice %d; want 0 and 2", len(subs["robo"]), len(subs["alice"]))
	}
	if set, err := s.PushSettingsOf(ctx, "robo"); err != nil || set != storage.DefaultPushSettings {
		t.Errorf("robo's push settings: %+v, %v; want none stored (the default)", set, err)
	}
	if set, err := s.PushSettingsOf(ctx, "alice"); err != nil || set.Preview {
		t.Errorf("alice's push settings: %+v, %v; want hers kept", set, err)
	}
	if _, err := s.PushNoticeOf(ctx, "robo", "g"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("robo's push notice: %v; want not found", err)
	}
	if _, err := s.PushNoticeOf(ctx, "alice", "g"); err != nil {
		t.Errorf("alice's push notice: %v; want hers kept", err)
	}
	if _, err := s.BotTokenOf(ctx, "hash-of-robo"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("robo's bot token: %v; want not found", err)
	}
	if _, err := s.DeleteAccount(ctx, "robo"); err != nil {
		t.Errorf("deleting the account again: %v; want nothing left to do", err)
	}
}

// TestPreviewOnlyMovesForward: a conversation's preview is replaced by a newer message's only (a
// retried older message in a later batch leaves it), and by a change only of the same message.
func TestPreviewOnlyMovesForward(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "c", Kind: storage.KindDM,
		Members: []string{"alice", "bob"}, CreatedBy: "alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	preview := func(seq int64, body string) storage.MessagePreview {
		return storage.MessagePreview{Seq: seq, SenderID: "alice", Kind: protocol.KindText, Body: body, CreatedAt: time.Now().UTC()}
	}
	for _, step := range []storage.Counters{
		{LastSeq: 2, Newest: ptr(preview(2, "two"))},
		{LastSeq: 2, Newest: ptr(preview(1, "one, retried"))},
		{LastSeq: 2, Changed: []storage.MessagePreview{preview(1, "one, edited")}},
	} {
		if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"c": step}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Conversation(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.LastMessage; p == nil || p.Seq != 2 || p.Body != "two" {
		t.Fatalf("after message 2, a retry of 1 and an edit of 1 the preview is %+v; want message 2", p)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"c": {LastSeq: 2, Changed: []storage.MessagePreview{preview(2, "two, edited")}}}); err != nil {
		t.Fatal(err)
	}
	if c, err = s.Conversation(ctx, "c"); err != nil || c.LastMessage == nil || c.LastMessage.Body != "two, edited" {
		t.Fatalf("after an edit of message 2 the preview is %+v (%v); want its new text", c.LastMessage, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCountersLeaveTheConversationDocument: a batch's counters go to a small document of their
// own, so the conversation's document (its member list) is not rewritten by every send; a
// conversation stored when the counters lived in its own document reads as it was, and its
// later batches, edits, previews and receipts read merged with what it had.
func TestCountersLeaveTheConversationDocument(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	conversations := testenv.Database(t, cfg).Collection("conversations")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := conversations.InsertOne(ctx, bson.D{{Key: "_id", Value: "old"}, {Key: "kind", Value: storage.KindGroup},
		{Key: "members", Value: bson.A{"ann", "ben"}}, {Key: "lastSeq", Value: int64(5)}, {Key: "lastVersion", Value: int64(2)},
		{Key: "lastMessage", Value: storage.MessagePreview{Seq: 5, SenderID: "ann", Kind: protocol.KindText, Body: "five", CreatedAt: at}},
		{Key: "senders", Value: bson.D{{Key: "ann", Value: int64(5)}}}, {Key: "deletedCount", Value: int64(0)},
		{Key: "createdBy", Value: "ann"}, {Key: "createdAt", Value: at}}); err != nil {
		t.Fatal(err)
	}
	want := func(step string, lastSeq, lastVersion int64, body string, senders map[string]int64) {
		t.Helper()
		c, err := s.Conversation(ctx, "old")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		listed, err := s.ConversationsOf(ctx, "ben")
		if err != nil || len(listed) != 1 {
			t.Fatalf("%s: ben's conversations %+v (%v); want the one", step, listed, err)
		}
		for _, c := range []storage.Conversation{c, listed[0]} {
			if c.LastSeq != lastSeq || c.LastVersion != lastVersion || c.LastMessage == nil || c.LastMessage.Body != body ||
				!maps.Equal(c.Senders, senders) {
				t.Fatalf("%s: lastSeq %d, lastVersion %d, preview %+v, senders %v; want %d, %d, %q, %v",
					step, c.LastSeq, c.LastVersion, c.LastMessage, c.Senders, lastSeq, lastVersion, body, senders)
			}
		}
	}
	if err := s.AddMembers(ctx, "old", []string{"ann", "ben"}); err != nil { // their read cursors, at 0
		t.Fatal(err)
	}
	want("as stored before", 5, 2, "five", map[string]int64{"ann": 5})

	preview := func(seq int64, sender, body string) storage.MessagePreview {
		return storage.MessagePreview{Seq: seq, SenderID: sender, Kind: protocol.KindText, Body: body, CreatedAt: at}
	}
	advance := func(c storage.Counters) {
		t.Helper()
		if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"old": c}); err != nil {
			t.Fatal(err)
		}
	}
	advance(storage.Counters{LastSeq: 5, LastVersion: 3, Changed: []storage.MessagePreview{preview(5, "ann", "five, edited")}})
	want("after an edit of the newest message", 5, 3, "five, edited", map[string]int64{"ann": 5})
	advance(storage.Counters{LastSeq: 6, Newest: ptr(preview(6, "ben", "six")), Senders: map[string]int64{"ben": 6}})
	want("after a send", 6, 3, "six", map[string]int64{"ann": 5, "ben": 6})
	advance(storage.Counters{LastSeq: 6, Changed: []storage.MessagePreview{preview(6, "ben", "six, edited")}})
	want("after an edit of the new newest message", 6, 3, "six, edited", map[string]int64{"ann": 5, "ben": 6})

	// Receipts count a member's own newest message as read, wherever it is recorded.
	for _, r := range []struct {
		seq    int64
		sender string
	}{{5, "ben"}, {6, "ann"}} {
		if n, err := s.CountReaders(ctx, "old", r.seq, r.sender); err != nil || n != 1 {
			t.Errorf("readers of %d other than %s: %d (%v); want 1, the other one, who sent it or later", r.seq, r.sender, n, err)
		}
	}

	var stored storage.Conversation
	if err := conversations.FindOne(ctx, bson.D{{Key: "_id", Value: "old"}}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	if stored.LastSeq != 5 || stored.LastVersion != 2 || len(stored.Senders) != 1 {
		t.Errorf("the batches wrote the conversation's own document: %+v", stored)
	}
}
