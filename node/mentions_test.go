package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file pin down mentions and notification settings over two real nodes: whom
// a message mentions is decided by the conversation's owner and carried on the message; each
// member's count of unread mentions follows their read cursor, and an edit that drops the
// mention, a deletion or leaving takes it back, in the list, in badge frames and in /api/badge.

// mnJoseID is the user id dev-mode sign-in gives "José".
const mnJoseID = "u-d994e1d001886fe5"

// mnGroup starts two nodes with alice on the first, signs José in on the second, and has alice
// make a group "plans" with him, which his connection there (watched) has heard of.
func mnGroup(t *testing.T) (a, b *testenv.Node, alice *client.Conn, jose *rtInbox, joseToken, group string) {
	t.Helper()
	_, nodes := rtNodes(t, 2, nil)
	a, b = nodes[0], nodes[1]
	alice = connectReady(t, a, "alice")
	joseToken = login(t, b, "José")
	jose = rtWatch(t, "José (node B)", dialWith(t, b, joseToken, nil))
	g, err := alice.CreateGroup(ctxT(t, time.Minute), "plans", []string{mnJoseID})
	if err != nil {
		t.Fatal(err)
	}
	jose.waitFor(t, 10*time.Second, "the group", rtHasConversation(g.ID))
	return a, b, alice, jose, joseToken, g.ID
}

// derefOr is what a count pointer holds, or "no" when there is none, for a failure message.
func derefOr(p *int64) any {
	if p == nil {
		return "no"
	}
	return *p
}

// mnBadge returns the mentions /api/badge reports for token's user.
func mnBadge(t *testing.T, baseURL, token string) int64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, baseURL+"/api/badge", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Total    int64  `json:"total"`
		Mentions *int64 `json:"mentions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Mentions == nil {
		t.Fatalf("/api/badge: %v; mentions %v", err, body.Mentions)
	}
	return *body.Mentions
}

// mnListed returns conv as in's user's list shows it.
func mnListed(t *testing.T, in *rtInbox, conv string) protocol.Conversation {
	t.Helper()
	r, err := in.conn.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Conversations {
		if c.ID == conv {
			return c
		}
	}
	t.Fatalf("%s's list has no %s", in.name, conv)
	return protocol.Conversation{}
}

// mnWaitCount polls until the list and /api/badge both report want unread mentions.
func mnWaitCount(t *testing.T, in *rtInbox, baseURL, token, conv string, want int64, what string) {
	t.Helper()
	err := testenv.Poll(10*time.Second, 20*time.Millisecond, func() error {
		if got := mnListed(t, in, conv).UnreadMentions; got != want {
			return fmt.Errorf("the list says %d", got)
		}
		if got := mnBadge(t, baseURL, token); got != want {
			return fmt.Errorf("/api/badge says %d", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s, %s: want %d unread mentions: %v", in.name, what, want, err)
	}
}

// TestMentionsAreCountedUntilRead: alice (node A) mentions José (node B) by his id; the owner
// puts him, and not a stranger named the same way, on the message; his unread mentions count 1,
// then 2, in his list and /api/badge (from either node); reading past the first takes it back
// (with a badge frame saying so), and so do an edit that drops the mention, a deletion of a
// mentioning message, and leaving the group. A mention of oneself never counts.
func TestMentionsAreCountedUntilRead(t *testing.T) {
	a, b, alice, jose, joseToken, group := mnGroup(t)
	ctx := ctxT(t, time.Minute)
	const joseID = mnJoseID
	g := protocol.Conversation{ID: group}
	send := func(body string) int64 {
		t.Helper()
		ack, err := alice.Send(ctx, g.ID, body)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Seq
	}

	first := send("hi " + message.MentionToken(joseID) + ", and " + message.MentionToken("stranger") + " too")
	pushed := chHas(t, jose, "the first mention", chFrame(protocol.TypeMessage, g.ID, first))
	if !slices.Equal(pushed.Mentions, []string{joseID}) {
		t.Fatalf("the pushed message mentions %v; want only José", pushed.Mentions)
	}
	mnWaitCount(t, jose, b.URL(), joseToken, g.ID, 1, "after one mention")
	second := send(message.MentionToken(joseID) + " second")
	send(message.MentionToken("alice") + " a note to myself")
	mnWaitCount(t, jose, a.URL(), joseToken, g.ID, 2, "after two mentions")

	if err := jose.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: g.ID, Seq: first}); err != nil {
		t.Fatal(err)
	}
	badge := chHas(t, jose, "the badge after reading the first mention", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeBadge && f.ConversationID == g.ID && f.ReadSeq == first
	})
	if badge.UnreadMentions == nil || *badge.UnreadMentions != 1 || badge.TotalMentions == nil || *badge.TotalMentions != 1 {
		t.Errorf("badge after reading the first mention = %+v; want 1 unread mention here and in total", badge)
	}
	mnWaitCount(t, jose, b.URL(), joseToken, g.ID, 1, "after reading the first")

	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: g.ID, Seq: second, Body: "second, no mention"}); err != nil {
		t.Fatal(err)
	}
	mnWaitCount(t, jose, b.URL(), joseToken, g.ID, 0, "after the edit dropped the mention")

	plain := send("nothing for José")
	third := send("again " + message.MentionToken(joseID))
	fourth := send("once more " + message.MentionToken(joseID))
	mnWaitCount(t, jose, b.URL(), joseToken, g.ID, 2, "after two more mentions")
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: g.ID, Seq: fourth}); err != nil {
		t.Fatal(err)
	}
	mnWaitCount(t, jose, b.URL(), joseToken, g.ID, 1, "after a mention was deleted")
	// His node's own count, in the badge of a read that stops before both mentions, has let the
	// deleted one go too.
	chHas(t, jose, "the deletion", chFrame(protocol.TypeDeleted, g.ID, fourth))
	if err := jose.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: g.ID, Seq: plain}); err != nil {
		t.Fatal(err)
	}
	badge = chHas(t, jose, "the badge after reading up to the plain message", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeBadge && f.ConversationID == g.ID && f.ReadSeq == plain
	})
	if badge.UnreadMentions == nil || *badge.UnreadMentions != 1 {
		t.Errorf("badge after the deletion counts %v unread mentions; want 1 (seq %d)", derefOr(badge.UnreadMentions), third)
	}
	if _, err := jose.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if got := mnBadge(t, a.URL(), joseToken); got != 0 {
		t.Errorf("/api/badge after leaving says %d mentions; want 0", got)
	}
}

// TestNotifySettingHoldsOnEveryDevice: José sets "mentions only" for a group on node B; his
// device on node A is told, both lists say so, and "all" puts the default back (absent from the
// view). A bad value and a conversation he is not in are refused.
func TestNotifySettingHoldsOnEveryDevice(t *testing.T) {
	a, _, alice, onB, joseToken, group := mnGroup(t)
	ctx := ctxT(t, time.Minute)
	onA := rtWatch(t, "José (node A)", dialWith(t, a, joseToken, nil))
	g := protocol.Conversation{ID: group}
	connectReady(t, a, "carol")
	other, err := alice.CreateGroup(ctx, "not josé's", []string{"carol"})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := onB.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetNotify, ConversationID: g.ID, Notify: protocol.NotifyMentions}); err != nil {
		t.Fatal(err)
	}
	chHas(t, onA, "the notify frame", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeNotify && f.ConversationID == g.ID && f.Notify == protocol.NotifyMentions
	})
	for _, in := range []*rtInbox{onA, onB} {
		if got := mnListed(t, in, g.ID).Notify; got != protocol.NotifyMentions {
			t.Errorf("%s's list says notify %q; want mentions", in.name, got)
		}
	}
	if _, err := onA.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetNotify, ConversationID: g.ID, Notify: protocol.NotifyAll}); err != nil {
		t.Fatal(err)
	}
	if got := mnListed(t, onB, g.ID).Notify; got != "" {
		t.Errorf("after all, the list says notify %q; want it absent", got)
	}
	_, err = onA.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetNotify, ConversationID: g.ID, Notify: "sometimes"})
	wantCode(t, "a bad setting", err, protocol.CodeInvalidField)
	_, err = onA.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetNotify, ConversationID: other.ID, Notify: protocol.NotifyNothing})
	wantCode(t, "a conversation he is not in", err, protocol.CodeNotMember)
}

// TestDeletedAccountTakesItsMentionsBack: erin mentions José, then deletes her account; her
// messages become tombstones, and José's unread mention goes with them.
func TestDeletedAccountTakesItsMentionsBack(t *testing.T) {
	a, b, alice, jose, joseToken, g := mnGroup(t)
	ctx := ctxT(t, time.Minute)
	erin, erinToken := testenv.ConnectWithToken(t, a.URL(), "erin")
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: g, Members: []string{"erin"}}); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { // erin's node hears she joined
		_, err := erin.Send(ctx, g, "look, "+message.MentionToken(mnJoseID))
		return err
	})
	mnWaitCount(t, jose, b.URL(), joseToken, g, 1, "after erin's mention")
	deleteAccount(t, ctx, a, erinToken)
	mnWaitCount(t, jose, b.URL(), joseToken, g, 0, "after erin deleted her account")
}
