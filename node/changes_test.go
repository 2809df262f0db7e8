package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file pin down edits, reactions, replies and deletions as members see them:
// live on another node, in history, after a reconnect, and refused with a clear code. Real nodes,
// real NATS, the store over TCP, real WebSockets.

// chFrame matches a frame of type typ about seq of conversation conv.
func chFrame(typ, conv string, seq int64) func(protocol.ServerFrame) bool {
	return func(f protocol.ServerFrame) bool { return f.Type == typ && f.ConversationID == conv && f.Seq == seq }
}

// chHas waits until in has a frame that matches.
func chHas(t *testing.T, in *rtInbox, what string, match func(protocol.ServerFrame) bool) protocol.ServerFrame {
	t.Helper()
	in.waitFor(t, 10*time.Second, what, func(fs []protocol.ServerFrame) bool { return slices.ContainsFunc(fs, match) })
	fs := in.snapshot()
	return fs[slices.IndexFunc(fs, match)]
}

// chPage returns the messages of conv from..to as c's user sees them in history.
func chPage(t *testing.T, in *rtInbox, conv string, from, to int64) map[int64]protocol.Message {
	t.Helper()
	after := from - 1
	page, err := in.conn.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeHistory,
		ConversationID: conv, After: &after, Limit: int(to - from + 1)})
	if err != nil {
		t.Fatalf("%s: history of %s: %v", in.name, conv, err)
	}
	out := make(map[int64]protocol.Message)
	for _, m := range page.Messages {
		out[m.Seq] = m
	}
	return out
}

// chDM starts two nodes with alice on the first and bob on the second, opens their DM, and has
// alice's first message (text) reach bob.
func chDM(t *testing.T, text string) (alice, bob *rtInbox, dm string) {
	t.Helper()
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, time.Minute)
	alice = rtWatch(t, "alice (node A)", connectReady(t, a, "alice"))
	bob = rtWatch(t, "bob (node B)", dialWith(t, b, login(t, b, "bob"), nil))
	conv, err := alice.conn.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	bob.waitFor(t, 10*time.Second, "the new DM", rtHasConversation(conv.ID))
	if _, err := alice.conn.Send(ctx, conv.ID, text); err != nil {
		t.Fatal(err)
	}
	chHas(t, bob, "message 1", chFrame(protocol.TypeMessage, conv.ID, 1))
	return alice, bob, conv.ID
}

// TestChangesReachAMemberOnAnotherNode: alice (node A) edits her message, bob (node B) reacts to
// it and replies to it quoting it, alice deletes it: each reaches the other node live with the
// version it was given, history shows the result (the edit with its time, the reaction counted
// with "me" for bob only, the reply's quote marked deleted), and changes of a deleted message
// are refused.
func TestChangesReachAMemberOnAnotherNode(t *testing.T) {
	alice, bob, dm := chDM(t, "see you at 5")
	ctx := ctxT(t, time.Minute)

	if _, err := alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm, Seq: 1, Body: "see you at 6"}); err != nil {
		t.Fatalf("edit: %v", err)
	}
	edited := chHas(t, bob, "the edit", chFrame(protocol.TypeEdited, dm, 1))
	if edited.Body != "see you at 6" || edited.Version != 1 || edited.UserID != "alice" || edited.EditedAt == nil {
		t.Errorf("bob's edited frame: %+v; want body %q, version 1, by alice, with its time", edited, "see you at 6")
	}
	if _, err := bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: dm, Seq: 1, Emoji: "👍"}); err != nil {
		t.Fatalf("react: %v", err)
	}
	reaction := chHas(t, alice, "bob's reaction", chFrame(protocol.TypeReaction, dm, 1))
	if reaction.Emoji != "👍" || reaction.UserID != "bob" || reaction.Count == nil || *reaction.Count != 1 || reaction.Version != 2 || reaction.Remove {
		t.Errorf("alice's reaction frame: %+v; want bob's 👍, count 1, version 2", reaction)
	}
	reply, err := bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: dm,
		ClientMsgID: "0d5c3c43-2a4b-4a8e-9d3e-6a1f1b2c3d4e", Body: "ok!", ReplyTo: 1})
	if err != nil || reply.Seq != 2 {
		t.Fatalf("reply: %+v, %v; want seq 2", reply, err)
	}
	pushed := chHas(t, alice, "bob's reply", chFrame(protocol.TypeMessage, dm, 2))
	if q := pushed.Quote; pushed.ReplyTo != 1 || q == nil || q.SenderID != "alice" || q.Body != "see you at 6" {
		t.Errorf("alice's push of the reply: replyTo %d, quote %+v; want a quote of her edited message 1", pushed.ReplyTo, q)
	}
	for _, in := range []*rtInbox{alice, bob} {
		page := chPage(t, in, dm, 1, 2)
		m1, m2 := page[1], page[2]
		if m1.Body != "see you at 6" || m1.EditedAt == nil || m1.Version != 2 {
			t.Errorf("%s: history has message 1 as %+v; want the edited text with its time, version 2", in.name, m1)
		}
		wantMe := in == bob
		if len(m1.Reactions) != 1 || m1.Reactions[0].Emoji != "👍" || m1.Reactions[0].Count != 1 || m1.Reactions[0].Me != wantMe {
			t.Errorf("%s: history has message 1's reactions %+v; want 👍 once, me %v", in.name, m1.Reactions, wantMe)
		}
		if q := m2.Quote; m2.ReplyTo != 1 || q == nil || q.SenderID != "alice" || q.Body != "see you at 6" || q.Deleted {
			t.Errorf("%s: history has the reply as %+v (quote %+v); want replyTo 1 quoting alice's edited text", in.name, m2, q)
		}
	}

	if _, err := alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm, Seq: 1}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deleted := chHas(t, bob, "the deletion", chFrame(protocol.TypeDeleted, dm, 1))
	if deleted.Version != 3 || deleted.UserID != "alice" {
		t.Errorf("bob's deleted frame: %+v; want version 3, by alice", deleted)
	}
	page := chPage(t, bob, dm, 1, 2)
	if m1 := page[1]; m1.Kind != protocol.KindDeleted || m1.Body != "" || m1.Reactions != nil || m1.EditedAt != nil {
		t.Errorf("history has the deleted message as %+v; want a bare tombstone", m1)
	}
	if q := page[2].Quote; q == nil || !q.Deleted || q.Body != "" || q.SenderID != "alice" {
		t.Errorf("history has the reply's quote as %+v; want alice's message shown as deleted, no text", q)
	}
	_, err = alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm, Seq: 1, Body: "back"})
	wantRefusal(t, "an edit after the delete", err, protocol.CodeForbidden, "message 1 is deleted and cannot change")
	_, err = bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: dm, Seq: 1, Emoji: "😮"})
	wantRefusal(t, "a reaction to a deleted message", err, protocol.CodeForbidden, "message 1 is deleted and cannot change")
	_, err = bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm, Seq: 2, Body: "x"})
	if err != nil {
		t.Errorf("bob editing his own reply: %v", err)
	}
	_, err = alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm, Seq: 2, Body: "x"})
	wantRefusal(t, "alice editing bob's message", err, protocol.CodeForbidden, "message 2 is not yours to edit")
	_, err = alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm, Seq: 9, Body: "x"})
	wantRefusal(t, "an edit of a seq that does not exist", err, protocol.CodeNotFound, "no message 9 in this conversation")
	_, err = alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: dm,
		ClientMsgID: "6a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", Body: "?", ReplyTo: 9})
	wantRefusal(t, "a reply to a seq that does not exist", err, protocol.CodeNotFound, "no message 9 in this conversation")
}

// wantRefusal checks that err is the error frame a user gets: code, the owner's reason word for
// word, and not retryable (retrying the same change is refused the same way).
func wantRefusal(t *testing.T, what string, err error, code, message string) {
	t.Helper()
	if pe := wantCode(t, what, err, code); pe.Message != message || pe.Retryable {
		t.Errorf("%s: %q (retryable %v); want %q, not retryable", what, pe.Message, pe.Retryable, message)
	}
}

// TestOfflineMemberCatchesUpOnChanges: bob holds messages 1-4 and goes offline; meanwhile alice
// edits 1, reacts to 2, deletes 3, and sends 5. Bob reconnects and syncs with the seq and the
// version he holds: he gets message 5, then one changes frame with 1, 2 and 3 as they are now, in
// the order they changed, and the synced list gives the conversation's version.
func TestOfflineMemberCatchesUpOnChanges(t *testing.T) {
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, a, "alice")
	bobToken := login(t, b, "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= 4; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("message %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []protocol.ClientFrame{
		{Type: protocol.TypeReact, ConversationID: dm.ID, Seq: 4, Emoji: "🎉"}, // before bob goes: he holds version 1
		{Type: protocol.TypeEditMessage, ConversationID: dm.ID, Seq: 1, Body: "message 1, edited"},
		{Type: protocol.TypeReact, ConversationID: dm.ID, Seq: 2, Emoji: "❤️"},
		{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: 3},
	} {
		if _, err := alice.Request(ctx, f); err != nil {
			t.Fatalf("%s of %d: %v", f.Type, f.Seq, err)
		}
	}
	if _, err := alice.Send(ctx, dm.ID, "message 5"); err != nil {
		t.Fatal(err)
	}

	bob := rtWatch(t, "bob, reconnected (node B)", dialWith(t, b, bobToken, nil))
	synced, err := bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync,
		Since: map[string]int64{dm.ID: 4}, Versions: map[string]int64{dm.ID: 1}})
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	bob.barrier(t)
	frames := bob.snapshot()
	if got := rtMessages(frames, dm.ID); len(got) != 1 || got[0].Seq != 5 {
		t.Errorf("the sync replayed %s; want message 5 only", bob.summary(got))
	}
	changes := rtOf(frames, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeChanges })
	if len(changes) != 1 {
		t.Fatalf("bob got %d changes frames; want one", len(changes))
	}
	ch := changes[0]
	var seqs []int64
	for _, m := range ch.Messages {
		seqs = append(seqs, m.Seq)
	}
	if ch.ConversationID != dm.ID || !slices.Equal(seqs, []int64{1, 2, 3}) || ch.Version != 4 || ch.HasMore {
		t.Fatalf("bob's changes frame: conversation %s, seqs %v, version %d, hasMore %v; want %s, [1 2 3], 4, false",
			ch.ConversationID, seqs, ch.Version, ch.HasMore, dm.ID)
	}
	if m := ch.Messages[0]; m.Body != "message 1, edited" || m.EditedAt == nil || m.Version != 2 {
		t.Errorf("message 1 caught up as %+v; want the edited text", m)
	}
	if m := ch.Messages[1]; len(m.Reactions) != 1 || m.Reactions[0].Emoji != "❤️" || m.Reactions[0].Count != 1 || m.Reactions[0].Me {
		t.Errorf("message 2 caught up with reactions %+v; want alice's ❤️ (not bob's)", m.Reactions)
	}
	if m := ch.Messages[2]; m.Kind != protocol.KindDeleted || m.Body != "" {
		t.Errorf("message 3 caught up as %+v; want a tombstone", m)
	}
	i := slices.IndexFunc(synced.Conversations, func(c protocol.Conversation) bool { return c.ID == dm.ID })
	if i < 0 || synced.Conversations[i].Version != 4 {
		t.Errorf("synced lists the DM as %+v; want version 4", synced.Conversations)
	}
	if i >= 0 && synced.Conversations[i].Unread != 4 {
		// 5 messages, none read by bob, seq 3 deleted for everyone.
		t.Errorf("synced says %d unread; want 4 (5 messages, one deleted)", synced.Conversations[i].Unread)
	}
}

// TestReactionLimits: a message takes at most 20 different emoji and a member at most 10 on one
// message; past either the reaction is refused with limit_exceeded and the socket stays open.
// Repeating a reaction, or taking away one that is not there, changes nothing and is ok.
func TestReactionLimits(t *testing.T) {
	_, nodes := rtNodes(t, 1, nil)
	n := nodes[0]
	ctx := ctxT(t, time.Minute)
	alice, bob, carol := connectReady(t, n, "alice"), connectReady(t, n, "bob"), connectReady(t, n, "carol")
	group, err := alice.CreateGroup(ctx, "team", []string{"bob", "carol"})
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	m, err := alice.Send(ctx, group.ID, "react to this")
	if err != nil {
		t.Fatal(err)
	}
	react := func(c *client.Conn, emoji string, remove bool) error {
		_, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: group.ID, Seq: m.Seq, Emoji: emoji, Remove: remove})
		return err
	}
	for i := range protocol.MaxReactionsPerUser {
		if err := react(alice, fmt.Sprintf("a%d", i), false); err != nil {
			t.Fatalf("alice's reaction %d: %v", i+1, err)
		}
	}
	wantRefusal(t, "alice's 11th reaction on one message", react(alice, "a-too-many", false), protocol.CodeLimit,
		"you have 10 reactions on this message, the most there may be")
	if err := react(alice, "a0", false); err != nil {
		t.Errorf("repeating a reaction: %v; want ok", err)
	}
	if err := react(alice, "never-added", true); err != nil {
		t.Errorf("taking away a reaction that is not there: %v; want ok", err)
	}
	// Bob brings the message to 19 emoji, then uses one of alice's: his 10th, no new kind.
	for i := range protocol.MaxReactionKinds - protocol.MaxReactionsPerUser - 1 {
		if err := react(bob, fmt.Sprintf("b%d", i), false); err != nil {
			t.Fatalf("bob's reaction %d: %v", i+1, err)
		}
	}
	if err := react(bob, "a0", false); err != nil {
		t.Errorf("bob joining alice's emoji (no new kind): %v; want ok", err)
	}
	if err := react(carol, "c0", false); err != nil {
		t.Errorf("carol's reaction, the 20th emoji: %v; want ok", err)
	}
	wantRefusal(t, "a 21st different emoji", react(carol, "c1", false), protocol.CodeLimit,
		"this message has 20 different reactions, the most there may be")
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: group.ID, Seq: m.Seq, Emoji: "two words"})
	wantCode(t, "an emoji with a space", err, protocol.CodeInvalidField)
	list, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReactions, ConversationID: group.ID, Seq: m.Seq})
	if err != nil {
		t.Fatalf("reactions: %v", err)
	}
	if len(list.Reactions) != protocol.MaxReactionKinds || list.Reactions[0].Emoji != "a0" ||
		!slices.Equal(list.Reactions[0].UserIDs, []string{"alice", "bob"}) || !list.Reactions[0].Me || list.Reactions[0].Count != 2 {
		t.Errorf("reaction_list has %d emoji, the first %+v; want 20, a0 by alice then bob, bob's own", len(list.Reactions), list.Reactions[0])
	}
	if _, err := carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypePing}); err != nil {
		t.Errorf("carol's socket after the refusal: %v; want it open", err)
	}
}

// TestLargeGroupReactionCostsTwoWritesAndReachesOnlyFocusedSockets: in a 5,000-member group a
// reaction is two store writes (the message, and the conversation's version counter, apart from
// its member list), whatever the group's size, and is pushed only to the sockets that have the
// group in focus: bob, who shows it, gets it; carol, connected but showing something else, gets
// nothing for it, though she gets the edit that follows it (edits reach every member).
func TestLargeGroupReactionCostsTwoWritesAndReachesOnlyFocusedSockets(t *testing.T) {
	const members = 5000
	env, n, rec := monitoredNode(t, func(cfg *node.Config) {
		cfg.Sequencer.Partitions = rtPartitions
		cfg.ReadWindow = time.Minute // no cursor flush among the writes counted
	})
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	ctx := ctxT(t, 2*time.Minute)

	ids := []string{"alice", "bob", "carol"}
	tokens := make(map[string]string)
	for _, id := range ids {
		tokens[id] = login(t, n, id)
	}
	for i := len(ids); i < members; i++ {
		ids = append(ids, fmt.Sprintf("member-%04d", i))
	}
	group := storage.Conversation{ID: "big-group", Kind: storage.KindGroup, Name: "everyone", Members: ids,
		CreatedBy: "alice", CreatedAt: time.Now().UTC()}
	if _, err := store.EnsureConversation(ctx, group); err != nil {
		t.Fatalf("store the group: %v", err)
	}
	alice := dialWith(t, n, tokens["alice"], nil)
	bob := rtWatch(t, "bob (group in focus)", dialWith(t, n, tokens["bob"], nil))
	carol := rtWatch(t, "carol (group not in focus)", dialWith(t, n, tokens["carol"], nil))
	if _, err := bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeFocus, ConversationID: group.ID}); err != nil {
		t.Fatalf("bob's focus: %v", err)
	}
	m, err := alice.Send(ctx, group.ID, "who is in?")
	if err != nil {
		t.Fatal(err)
	}
	chHas(t, carol, "the message", chFrame(protocol.TypeMessage, group.ID, m.Seq))

	rec.Reset()
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: group.ID, Seq: m.Seq, Emoji: "✋"}); err != nil {
		t.Fatalf("react: %v", err)
	}
	var writes []string
	for _, c := range rec.Writes("") {
		writes = append(writes, c.Name+" "+c.Collection)
	}
	if !slices.Equal(writes, []string{"update conversationCounters", "update messageChanges", "update messageClaims"}) {
		t.Errorf("a reaction in a %d-member group wrote %v; want one update of the conversation's counters, its change log, then the message (in its claim: its bucket is not full)", members, writes)
	}
	chHas(t, bob, "alice's reaction", chFrame(protocol.TypeReaction, group.ID, m.Seq))
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: group.ID, Seq: m.Seq, Body: "who is in tonight?"}); err != nil {
		t.Fatalf("edit: %v", err)
	}
	// The edit was published after the reaction on the same ordered subject: once carol has it,
	// a reaction pushed to her would have come before it.
	chHas(t, carol, "the edit", chFrame(protocol.TypeEdited, group.ID, m.Seq))
	if got := rtOf(carol.snapshot(), chFrame(protocol.TypeReaction, group.ID, m.Seq)); len(got) > 0 {
		t.Errorf("carol, who does not show the group, got %d reaction frames; want none", len(got))
	}
}

// TestDeliveredThenReadTicks: in a DM, alice (node A) sees her message delivered when bob's
// device on node B says it received it, then read when he reads it, in that order; receipts
// counted on demand say the same; a repeated delivered report sends nothing.
func TestDeliveredThenReadTicks(t *testing.T) {
	alice, bob, dm := chDM(t, "are you there?")
	ctx := ctxT(t, time.Minute)
	// Receipts are counted from the store, where bob's node writes his positions within its read
	// window: poll until they say what is expected.
	ticks := func(when string, delivered, read int64) {
		t.Helper()
		testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			r, err := alice.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: dm, Seq: 1})
			if err != nil || r.DeliveredTo == nil || r.ReadBy == nil {
				return fmt.Errorf("receipts: %+v, %v", r, err)
			}
			if *r.DeliveredTo != delivered || *r.ReadBy != read {
				return fmt.Errorf("%s: delivered to %d, read by %d; want %d, %d", when, *r.DeliveredTo, *r.ReadBy, delivered, read)
			}
			return nil
		})
	}
	ticks("before bob's device reports", 0, 0)
	for range 2 { // the second report is a repeat
		if err := bob.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeDelivered, ConversationID: dm, Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}
	isDelivered := func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeDelivered && f.ConversationID == dm && f.UserID == "bob" && f.DeliveredSeq == 1
	}
	chHas(t, alice, "bob's delivered", isDelivered)
	ticks("after bob's device reports", 1, 0)
	if err := bob.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	isReceipt := func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReceipt && f.ConversationID == dm && f.UserID == "bob" && f.ReadSeq == 1
	}
	chHas(t, alice, "bob's read receipt", isReceipt)
	ticks("after bob reads", 1, 1)
	alice.barrier(t)
	frames := alice.snapshot()
	if n := len(rtOf(frames, isDelivered)); n != 1 {
		t.Errorf("alice got %d delivered frames for bob's two reports; want 1", n)
	}
	if slices.IndexFunc(frames, isDelivered) > slices.IndexFunc(frames, isReceipt) {
		t.Errorf("alice saw the read tick before the delivered one")
	}
	if got := rtOf(bob.snapshot(), func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeDelivered }); len(got) > 0 {
		t.Errorf("bob got %d delivered frames about himself; want none", len(got))
	}
}

// TestPresenceAcrossNodes: bob (node B) sees alice (node A) come online and go offline with her
// last seen time, pushed because they share a DM; a second device of alice's keeps her online; a
// presence request answers the same; when alice hides her presence bob sees her offline with no
// time and his requests leave her out. Dave, who shares only a 40-member group with bob, sends
// bob nothing when he comes online, and bob can ask.
func TestPresenceAcrossNodes(t *testing.T) {
	env, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, time.Minute)
	tokens := map[string]string{"alice": login(t, a, "alice"), "dave": login(t, a, "dave")}
	bob := rtWatch(t, "bob (node B)", dialWith(t, b, login(t, b, "bob"), nil))
	if _, err := bob.conn.OpenDM(ctx, "alice"); err != nil {
		t.Fatalf("open dm: %v", err)
	}
	members := []string{"bob", "dave"}
	for i := len(members); i < 40; i++ {
		members = append(members, fmt.Sprintf("member-%02d", i))
	}
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	if _, err := store.EnsureConversation(ctx, storage.Conversation{ID: "forty", Kind: storage.KindGroup, Name: "forty",
		Members: members, CreatedBy: "bob", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatalf("store the group: %v", err)
	}
	presenceOf := func(user string) func(protocol.ServerFrame) bool {
		return func(f protocol.ServerFrame) bool { return f.Type == protocol.TypePresence && f.UserID == user }
	}
	ask := func(users ...string) map[string]protocol.Presence {
		t.Helper()
		r, err := bob.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypePresence, UserIDs: users})
		if err != nil {
			t.Fatalf("presence request: %v", err)
		}
		out := make(map[string]protocol.Presence)
		for _, p := range r.Presence {
			out[p.UserID] = p
		}
		return out
	}

	start := time.Now()
	alice := dialWith(t, a, tokens["alice"], nil)
	online := chHas(t, bob, "alice online", presenceOf("alice"))
	t.Logf("alice's presence reached bob %s after she connected", time.Since(start).Round(time.Millisecond))
	if online.Online == nil || !*online.Online || online.LastSeen != nil {
		t.Errorf("bob's presence frame for alice: %+v; want online", online)
	}
	if p := ask("alice"); !p["alice"].Online {
		t.Errorf("bob asks: alice is %+v; want online", p["alice"])
	}

	// recorded waits until alice's presence records name node (or, with held false, no longer
	// do): presence is recorded off the connect and close paths.
	recorded := func(node string, held bool) {
		t.Helper()
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			p, err := store.PresenceOf(ctx, []string{"alice"})
			if err != nil {
				return err
			}
			if slices.Contains(p["alice"].Nodes, node) != held {
				return fmt.Errorf("alice's presence records name nodes %v; want %s there: %v", p["alice"].Nodes, node, held)
			}
			return nil
		})
	}
	second := dialWith(t, b, tokens["alice"], nil) // her phone, on the other node
	recorded("rt-b", true)
	mark := bob.len()
	if err := alice.Close(); err != nil {
		t.Fatal(err)
	}
	if p := ask("alice"); !p["alice"].Online {
		t.Errorf("with her phone still connected alice is %+v; want online", p["alice"])
	}
	// Her phone leaves at once, before node A may have recorded her laptop gone: then both nodes
	// can find her gone everywhere and each say so, and bob is still told once.
	before := time.Now().Add(-time.Second)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	bob.waitFor(t, 10*time.Second, "alice offline", func(fs []protocol.ServerFrame) bool {
		return slices.ContainsFunc(fs[mark:], func(f protocol.ServerFrame) bool {
			return presenceOf("alice")(f) && f.Online != nil && !*f.Online
		})
	})
	frames := rtOf(bob.snapshot()[mark:], presenceOf("alice"))
	if len(frames) != 1 || frames[0].LastSeen == nil || frames[0].LastSeen.Before(before) {
		t.Errorf("after both of alice's devices left, bob got %+v; want one offline frame with her last seen time", frames)
	}
	if p := ask("alice")["alice"]; p.Online || p.LastSeen == nil {
		t.Errorf("bob asks after she left: %+v; want offline with a last seen time", p)
	}

	alice = dialWith(t, a, tokens["alice"], nil)
	bob.waitFor(t, 10*time.Second, "alice online again", func(fs []protocol.ServerFrame) bool {
		return len(rtOf(fs[mark:], presenceOf("alice"))) >= 2
	})
	hide := true
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetPrivacy, HidePresence: &hide}); err != nil {
		t.Fatalf("hide presence: %v", err)
	}
	bob.waitFor(t, 10*time.Second, "alice hidden", func(fs []protocol.ServerFrame) bool {
		last := rtOf(fs[mark:], presenceOf("alice"))
		return len(last) >= 3 && last[len(last)-1].Online != nil && !*last[len(last)-1].Online
	})
	if hidden := rtOf(bob.snapshot()[mark:], presenceOf("alice")); hidden[len(hidden)-1].LastSeen != nil {
		t.Errorf("alice hid her presence and bob got %+v; want offline with no time", hidden[len(hidden)-1])
	}
	if p, ok := ask("alice")["alice"]; ok {
		t.Errorf("bob asks about alice, who hides her presence: %+v; want her left out", p)
	}

	mark = bob.len()
	dialWith(t, a, tokens["dave"], nil)
	// His record follows his connection by a moment: poll.
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if p := ask("dave"); !p["dave"].Online {
			return fmt.Errorf("bob asks about dave, who shares a 40-member group with him: %+v; want online", p["dave"])
		}
		return nil
	})
	time.Sleep(rtQuiet) // for a presence frame that must not come
	bob.barrier(t)
	if got := rtOf(bob.snapshot()[mark:], presenceOf("dave")); len(got) > 0 {
		t.Errorf("dave coming online pushed %d presence frames to bob, who shares only a large group with him; want none", len(got))
	}
	if p, ok := ask("member-07")["member-07"]; ok && p.Online {
		t.Errorf("member-07, never connected, is %+v; want offline", p)
	}
	if _, ok := ask("nobody-shared")["nobody-shared"]; ok {
		t.Errorf("bob learned the presence of a user he shares nothing with")
	}
}

// TestConversationListShowsTheNewestMessage: the conversation list carries the start of the
// newest message, kept by the owner's batch write (no query per conversation): it follows new
// messages, an edit of the newest one (not of an older one), and a deletion of the newest one
// takes its text away; a long message is cut.
func TestConversationListShowsTheNewestMessage(t *testing.T) {
	_, nodes := rtNodes(t, 1, nil)
	n := nodes[0]
	ctx := ctxT(t, time.Minute)
	alice, bob := connectReady(t, n, "alice"), connectReady(t, n, "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	preview := func(when string) *protocol.MessagePreview {
		t.Helper()
		r, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
		if err != nil {
			t.Fatalf("%s: list: %v", when, err)
		}
		for _, c := range r.Conversations {
			if c.ID == dm.ID {
				return c.LastMessage
			}
		}
		t.Fatalf("%s: bob's list lacks the DM", when)
		return nil
	}
	if p := preview("before any message"); p != nil {
		t.Errorf("before any message the preview is %+v; want none", p)
	}
	for _, body := range []string{"one", "two"} {
		if _, err := alice.Send(ctx, dm.ID, body); err != nil {
			t.Fatal(err)
		}
	}
	if p := preview("after two messages"); p == nil || p.Seq != 2 || p.Body != "two" || p.SenderID != "alice" || p.Kind != protocol.KindText {
		t.Errorf("after two messages the preview is %+v; want alice's message 2, %q", p, "two")
	}
	for seq, body := range map[int64]string{2: "two, edited", 1: "one, edited"} {
		if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: dm.ID, Seq: seq, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	if p := preview("after editing both"); p == nil || p.Seq != 2 || p.Body != "two, edited" {
		t.Errorf("after editing messages 2 and 1 the preview is %+v; want message 2's new text", p)
	}
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if p := preview("after deleting the newest"); p == nil || p.Seq != 2 || p.Kind != protocol.KindDeleted || p.Body != "" {
		t.Errorf("after deleting message 2 the preview is %+v; want it deleted, no text", p)
	}
	long := strings.Repeat("long ", 100)
	if _, err := alice.Send(ctx, dm.ID, long); err != nil {
		t.Fatal(err)
	}
	if p := preview("after a long message"); p == nil || p.Seq != 3 || len(p.Body) > protocol.QuoteBytes || !strings.HasSuffix(p.Body, "…") {
		t.Errorf("after a %d-byte message the preview is %+v; want it cut to at most %d bytes", len(long), p, protocol.QuoteBytes)
	}
}
