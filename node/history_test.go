package node_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

func history(t *testing.T, c *client.Conn, f protocol.ClientFrame) protocol.ServerFrame {
	t.Helper()
	f.Type = protocol.TypeHistory
	page, err := c.Request(ctxT(t, time.Minute), f)
	if err != nil {
		t.Fatalf("history %+v: %v", f, err)
	}
	return page
}

func seqsOf(page protocol.ServerFrame) []int64 {
	out := make([]int64, len(page.Messages))
	for i, m := range page.Messages {
		out[i] = m.Seq
	}
	return out
}

func assertRange(t *testing.T, what string, page protocol.ServerFrame, from, to int64) {
	t.Helper()
	seqs := seqsOf(page)
	if int64(len(seqs)) != to-from+1 || (len(seqs) > 0 && (seqs[0] != from || seqs[len(seqs)-1] != to)) {
		t.Fatalf("%s: got %d messages %v..., want seqs %d..%d", what, len(seqs), head(seqs), from, to)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("%s: seq %d follows %d", what, seqs[i], seqs[i-1])
		}
	}
}

func head(s []int64) []int64 { return s[:min(len(s), 5)] }

// TestHistoryPagesAtAnyDepth pages a 100,000-message conversation at its start, middle and end;
// every page reads the buckets it spans, and the newest messages' claims, each by its exact _id
// (the one filter the embedded store answers from an index, and a single-shard lookup on
// MongoDB), never a filter, a range or skip.
func TestHistoryPagesAtAnyDepth(t *testing.T) {
	const total = 100000
	env, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, 5*time.Minute)
	if err := testenv.Connect(t, n.URL(), "bob").Close(); err != nil {
		t.Fatal(err)
	}
	alice := testenv.Connect(t, n.URL(), "alice")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	seedMessages(t, store, dm.ID, "bob", total)
	alice.Close()
	alice = testenv.Connect(t, n.URL(), "alice")
	rec.Reset()

	latest := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID})
	assertRange(t, "latest", latest, total-49, total)
	if !latest.HasBefore || latest.HasAfter || latest.FirstSeq != 1 || latest.LastSeq != total {
		t.Fatalf("latest page ends: %+v", latest)
	}
	middle := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID, Fraction: ptr(0.5), Limit: 20})
	assertRange(t, "middle", middle, 49990, 50009)
	before := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID, Before: ptr(int64(50001)), Limit: 200})
	assertRange(t, "before the middle", before, 49801, 50000)
	start := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID, After: ptr(int64(0)), Limit: 500})
	assertRange(t, "start, limit capped at 200", start, 1, 200)
	if start.HasBefore || !start.HasAfter {
		t.Fatalf("first page ends: hasBefore %v hasAfter %v", start.HasBefore, start.HasAfter)
	}
	pastEnd := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID, After: ptr(int64(total))})
	if len(pastEnd.Messages) != 0 || pastEnd.HasAfter || pastEnd.LastSeq != total {
		t.Fatalf("after the end: %d messages, hasAfter %v, lastSeq %d", len(pastEnd.Messages), pastEnd.HasAfter, pastEnd.LastSeq)
	}

	// The page past the end needs no read of messages; the others read the sealed buckets they
	// span and, at the end, the claims of the newest messages (100,000 is 32 past a full bucket).
	finds := append(rec.Commands("find", "messageBuckets"), rec.Commands("find", "messageClaims")...)
	if len(finds) < 4 || len(finds) > 100 {
		t.Fatalf("%d reads of messages for 5 pages; want 4 to 100", len(finds))
	}
	for _, f := range finds {
		var cmd struct {
			Filter bson.M `bson:"filter"`
			Skip   *int64 `bson:"skip"`
		}
		if err := bson.Unmarshal(f.Body, &cmd); err != nil {
			t.Fatal(err)
		}
		id, ok := cmd.Filter["_id"].(string)
		if len(cmd.Filter) != 1 || !ok || !strings.HasPrefix(id, dm.ID+"/") || cmd.Skip != nil {
			t.Fatalf("history read is not a lookup of one document by _id: %s", f.Body)
		}
	}
}

func TestDeleteForEveryoneKeepsTheSeq(t *testing.T) {
	_, _, alice, bob, dm := dmSetup(t)
	ctx := ctxT(t, time.Minute)
	for _, body := range []string{"one", "oops", "three"} {
		if _, err := alice.Send(ctx, dm.ID, body); err != nil {
			t.Fatal(err)
		}
	}
	_, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: 2})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeForbidden {
		t.Fatalf("bob deleting alice's message: %v; want forbidden", err)
	}
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeDeleted && f.ConversationID == dm.ID && f.Seq == 2
	})
	page := history(t, bob, protocol.ClientFrame{ConversationID: dm.ID})
	assertRange(t, "page with a tombstone", page, 1, 3)
	if m := page.Messages[1]; m.Kind != protocol.KindDeleted || m.Body != "" {
		t.Fatalf("deleted message comes back as %q %q; want a tombstone without body", m.Kind, m.Body)
	}
	if page.Messages[0].Body != "one" || page.Messages[2].Body != "three" {
		t.Fatalf("neighbours changed: %+v", page.Messages)
	}
	next, err := alice.Send(ctx, dm.ID, "four")
	if err != nil || next.Seq != 4 {
		t.Fatalf("next send after a delete: seq %d, %v; want 4", next.Seq, err)
	}
}

func TestDeleteConversationForMe(t *testing.T) {
	_, _, alice, bob, dm := dmSetup(t)
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 3; i++ {
		if _, err := alice.Send(ctx, dm.ID, "before"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHideConversation, ConversationID: dm.ID}); err != nil {
		t.Fatal(err)
	}
	list, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil || len(list.Conversations) != 0 {
		t.Fatalf("bob's list after deleting the DM for himself: %d conversations, %v", len(list.Conversations), err)
	}
	if got := history(t, alice, protocol.ClientFrame{ConversationID: dm.ID}); len(got.Messages) != 3 {
		t.Fatalf("alice's history lost messages: %d", len(got.Messages))
	}
	if _, err := alice.Send(ctx, dm.ID, "after"); err != nil {
		t.Fatal(err)
	}
	unreadIs(t, bob, dm.ID, 1)
	list, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil || len(list.Conversations) != 1 || list.Conversations[0].Unread != 1 {
		t.Fatalf("a new message brings the DM back with only it unread: %+v, %v", list.Conversations, err)
	}
	page := history(t, bob, protocol.ClientFrame{ConversationID: dm.ID})
	assertRange(t, "bob's history after deleting it for himself", page, 4, 4)
	if page.HasBefore {
		t.Fatalf("bob's history offers messages from before he deleted it")
	}
}

func TestDeleteAccountLeavesNothingReadable(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx := ctxT(t, time.Minute)
	alice, token := testenv.ConnectWithToken(t, n.URL(), "alice")
	bob := testenv.Connect(t, n.URL(), "bob")
	testenv.Connect(t, n.URL(), "carol")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	group, err := bob.CreateGroup(ctx, "team", []string{"alice", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeConversation && f.Conversation.ID == group.ID
	})
	for _, send := range []struct {
		c    *client.Conn
		conv string
		body string
	}{{alice, dm.ID, "secret"}, {alice, group.ID, "alice in group"}, {bob, group.ID, "bob in group"}, {alice, group.ID, "alice again"}} {
		if _, err := send.c.Send(ctx, send.conv, send.body); err != nil {
			t.Fatal(err)
		}
	}

	deleteAccount(t, ctx, n, token)
	<-alice.Done()
	if alice.CloseStatus() != session.StatusRemoved {
		t.Fatalf("alice's session closed with %v; want %v", alice.CloseStatus(), session.StatusRemoved)
	}
	testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeRemoved && f.ConversationID == dm.ID
	})
	if _, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: dm.ID}); err == nil {
		t.Fatal("the DM with a deleted account is still readable")
	}
	page := history(t, bob, protocol.ClientFrame{ConversationID: group.ID})
	// The group's seqs: alice, bob, alice, then the system message of her deletion.
	for _, m := range page.Messages {
		if m.SenderID == "alice" || m.Body == "alice in group" || m.Body == "alice again" {
			t.Fatalf("alice's group message still readable: %+v", m)
		}
	}
	seqs := seqsOf(page)
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("group seqs not gapless after the deletion: %v", seqs)
		}
	}
	if page.Messages[1].Body != "bob in group" || page.Messages[0].Kind != protocol.KindDeleted {
		t.Fatalf("group history after alice left: %+v", page.Messages)
	}
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	if _, err := store.User(ctx, "alice"); err != storage.ErrNotFound {
		t.Fatalf("alice's account: %v; want not found", err)
	}
	if cursors, err := store.CursorsOf(ctx, "alice"); err != nil || len(cursors) != 0 {
		t.Fatalf("alice's cursors: %d, %v", len(cursors), err)
	}
	if convs, err := store.ConversationsOf(ctx, "alice"); err != nil || len(convs) != 0 {
		t.Fatalf("alice's memberships: %d, %v", len(convs), err)
	}
	if _, err := client.Dial(ctx, n.WSURL(), token, nil); err == nil {
		t.Fatal("a token of the deleted account still opens a socket")
	} else if de, ok := err.(*client.DialError); !ok || de.Status != http.StatusUnauthorized {
		t.Fatalf("dial with the deleted account's token: %v; want 401", err)
	}
}

// TestBucketSealedWithItsChanges: a conversation's messages are sealed into a bucket when they
// fill it, by the owner from what it stored, with a change made before the seal (in the
// message's claim) and a reaction made after it (in the bucket): the page shows both, and so does
// the bucket as stored.
func TestBucketSealedWithItsChanges(t *testing.T) {
	env, _, alice, bob, dm := dmSetup(t)
	ctx := ctxT(t, time.Minute)
	for i := int64(1); i <= storage.BucketSize; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm.ID, Seq: 3, Body: "m3, edited"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	buckets := testenv.Database(t, storage.Config{URI: env.MongoURI, Database: env.Database}).Collection("messageBuckets")
	var sealed struct {
		Messages []storage.Message `bson:"messages"`
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		return buckets.FindOne(ctx, bson.D{{Key: "_id", Value: dm.ID + "/000000000000"}}).Decode(&sealed)
	})
	if len(sealed.Messages) != storage.BucketSize || sealed.Messages[2].Body != "m3, edited" {
		t.Fatalf("sealed bucket: %d messages, seq 3 %q; want %d with the edit", len(sealed.Messages), sealed.Messages[2].Body, storage.BucketSize)
	}
	if _, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: dm.ID, Seq: 3, Emoji: "👍"}); err != nil {
		t.Fatal(err)
	}
	page := history(t, bob, protocol.ClientFrame{ConversationID: dm.ID, After: ptr(int64(0)), Limit: 5})
	if m := page.Messages[2]; m.Body != "m3, edited" || len(m.Reactions) != 1 {
		t.Fatalf("seq 3 pages as %q with %d reactions; want the edit and bob's reaction", m.Body, len(m.Reactions))
	}
}
