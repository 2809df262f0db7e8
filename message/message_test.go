package message_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

var (
	created = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	edited  = created.Add(time.Minute)
)

// text is alice's message 3, with bob's 👍 on it.
func text() storage.Message {
	return storage.Message{ConversationID: "c", Seq: 3, SenderID: "alice", Kind: protocol.KindText, Body: "hello",
		CreatedAt: created, ClientMsgID: "m3", ReplyTo: 1, Quote: &storage.Quote{SenderID: "bob", Body: "hi"},
		Version: 4, Reactions: []storage.Reaction{{Emoji: "👍", Users: []string{"bob"}}}}
}

// reacted is text with user's reactions a0, a1, ... (n of them).
func reacted(user string, n int) storage.Message {
	m := text()
	m.Reactions = nil
	for i := range n {
		m.Reactions = append(m.Reactions, storage.Reaction{Emoji: fmt.Sprintf("a%d", i), Users: []string{user}})
	}
	return m
}

func TestApply(t *testing.T) {
	deleted := text()
	deleted.Kind, deleted.Body = protocol.KindDeleted, ""
	system := text()
	system.Kind, system.SenderID = protocol.KindSystem, ""
	tests := []struct {
		name    string
		m       storage.Message
		c       message.Change
		changed bool
		kind    *protocol.Error // the refusal, nil when none
		reason  string          // the refusal's text, told to the user
		check   func(t *testing.T, m storage.Message)
	}{
		{name: "the sender edits", m: text(), c: message.Change{Op: message.OpEdit, UserID: "alice", Body: "hello again"},
			changed: true, check: func(t *testing.T, m storage.Message) {
				if m.Body != "hello again" || m.EditedAt == nil || !m.EditedAt.Equal(edited) {
					t.Errorf("edited: body %q at %v", m.Body, m.EditedAt)
				}
			}},
		{name: "an edit to the same text", m: text(), c: message.Change{Op: message.OpEdit, UserID: "alice", Body: "hello"}},
		{name: "another member edits", m: text(), c: message.Change{Op: message.OpEdit, UserID: "bob", Body: "mine now"},
			kind: protocol.ErrForbidden, reason: "message 3 is not yours to edit"},
		{name: "another member deletes", m: text(), c: message.Change{Op: message.OpDelete, UserID: "bob"},
			kind: protocol.ErrForbidden, reason: "message 3 is not yours to delete"},
		{name: "the sender deletes", m: text(), c: message.Change{Op: message.OpDelete, UserID: "alice"},
			changed: true, check: func(t *testing.T, m storage.Message) {
				want := storage.Message{ConversationID: "c", Seq: 3, SenderID: "alice", Kind: protocol.KindDeleted,
					CreatedAt: created, ClientMsgID: "m3", Version: 5}
				if !reflect.DeepEqual(m, want) {
					t.Errorf("tombstone %+v, want only what never changes: %+v", m, want)
				}
			}},
		{name: "a group's admin deletes another's message", m: text(), c: message.Change{Op: message.OpDelete, UserID: "bob", Admin: true},
			changed: true, check: func(t *testing.T, m storage.Message) {
				if m.Kind != protocol.KindDeleted || m.SenderID != "alice" || m.RemovedBy != "bob" || m.Body != "" {
					t.Errorf("tombstone %+v; want alice's, removed by bob", m)
				}
			}},
		{name: "a group's admin edits another's message", m: text(), c: message.Change{Op: message.OpEdit, UserID: "bob", Body: "x", Admin: true},
			kind: protocol.ErrForbidden, reason: "message 3 is not yours to edit"},
		{name: "a tombstone refuses an edit", m: deleted, c: message.Change{Op: message.OpEdit, UserID: "alice", Body: "back"},
			kind: protocol.ErrForbidden, reason: "message 3 is deleted and cannot change"},
		{name: "a tombstone refuses a reaction", m: deleted, c: message.Change{Op: message.OpReact, UserID: "bob", Emoji: "👍"},
			kind: protocol.ErrForbidden, reason: "message 3 is deleted and cannot change"},
		{name: "a system message refuses a reaction", m: system, c: message.Change{Op: message.OpReact, UserID: "bob", Emoji: "👍"},
			kind: protocol.ErrForbidden, reason: "message 3 is a system message and cannot change"},
		{name: "a new emoji", m: text(), c: message.Change{Op: message.OpReact, UserID: "carol", Emoji: "🎉"},
			changed: true, check: wantReactions("👍:bob 🎉:carol")},
		{name: "a second member's same emoji", m: text(), c: message.Change{Op: message.OpReact, UserID: "carol", Emoji: "👍"},
			changed: true, check: wantReactions("👍:bob,carol")},
		{name: "a reaction already there", m: text(), c: message.Change{Op: message.OpReact, UserID: "bob", Emoji: "👍"}},
		{name: "a member's last reaction within the limit", m: reacted("bob", protocol.MaxReactionsPerUser-1),
			c: message.Change{Op: message.OpReact, UserID: "bob", Emoji: "new"}, changed: true},
		{name: "a member's reaction past the limit", m: reacted("bob", protocol.MaxReactionsPerUser),
			c:    message.Change{Op: message.OpReact, UserID: "bob", Emoji: "new"},
			kind: protocol.ErrLimit, reason: fmt.Sprintf("you have %d reactions on this message, the most there may be", protocol.MaxReactionsPerUser)},
		{name: "an emoji past the message's limit", m: reacted("dave", protocol.MaxReactionKinds),
			c:    message.Change{Op: message.OpReact, UserID: "bob", Emoji: "new"},
			kind: protocol.ErrLimit, reason: fmt.Sprintf("this message has %d different reactions, the most there may be", protocol.MaxReactionKinds)},
		{name: "an emoji already there at the message's limit", m: reacted("dave", protocol.MaxReactionKinds),
			c: message.Change{Op: message.OpReact, UserID: "bob", Emoji: "a0"}, changed: true},
		{name: "the last user of an emoji takes it away", m: text(), c: message.Change{Op: message.OpUnreact, UserID: "bob", Emoji: "👍"},
			changed: true, check: wantReactions("")},
		{name: "taking away a reaction that is not there", m: text(), c: message.Change{Op: message.OpUnreact, UserID: "carol", Emoji: "👍"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			changed, err := message.Apply(&m, tc.c, 5, edited)
			switch {
			case tc.kind == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.kind != nil && (!errors.Is(err, tc.kind) || protocol.AsError(err).Message != tc.reason):
				t.Fatalf("got %v, want %v saying %q", err, tc.kind, tc.reason)
			case changed != tc.changed:
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			if wantVersion := map[bool]int64{true: 5, false: tc.m.Version}[changed]; m.Version != wantVersion {
				t.Errorf("version %d, want %d", m.Version, wantVersion)
			}
			if !changed && !reflect.DeepEqual(m, tc.m) {
				t.Errorf("a change that changed nothing left %+v, was %+v", m, tc.m)
			}
			if tc.check != nil {
				tc.check(t, m)
			}
		})
	}
}

// TestApplyRefusesAnUnknownChangeAsNoRefusal: an unknown op is the caller's bug, answered as
// internal, not a refusal with a code the user would be told.
func TestApplyRefusesAnUnknownChangeAsNoRefusal(t *testing.T) {
	m := text()
	_, err := message.Apply(&m, message.Change{Op: "pin", UserID: "alice"}, 5, edited)
	if err == nil || protocol.AsError(err).Code != protocol.CodeInternal {
		t.Fatalf("got %v, want an error that is not a refusal for the user", err)
	}
}

// TestApplyLeavesCopiesAlone makes changes on a copy of a message, as the owner does on its batch's
// copy and the chat service's fake on what it stored: the original keeps its reactions.
func TestApplyLeavesCopiesAlone(t *testing.T) {
	orig := text()
	orig.Reactions = append(orig.Reactions, storage.Reaction{Emoji: "🎉", Users: []string{"bob", "carol"}})
	for _, c := range []message.Change{
		{Op: message.OpReact, UserID: "carol", Emoji: "👍"},
		{Op: message.OpReact, UserID: "dave", Emoji: "🔥"},
		{Op: message.OpUnreact, UserID: "bob", Emoji: "🎉"},
		{Op: message.OpUnreact, UserID: "bob", Emoji: "👍"},
	} {
		m := orig
		if changed, err := message.Apply(&m, c, 5, edited); !changed || err != nil {
			t.Fatalf("%+v: changed %v, %v", c, changed, err)
		}
		wantReactions("👍:bob 🎉:bob,carol")(t, orig)
	}
}

func wantReactions(want string) func(t *testing.T, m storage.Message) {
	return func(t *testing.T, m storage.Message) {
		t.Helper()
		var got []string
		for _, r := range m.Reactions {
			got = append(got, r.Emoji+":"+strings.Join(r.Users, ","))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("reactions %q, want %q", strings.Join(got, " "), want)
		}
	}
}

func TestQuoteOf(t *testing.T) {
	m := text()
	m.Body = strings.Repeat("é", protocol.QuoteBytes)
	if q := message.QuoteOf(m); q.SenderID != "alice" || q.Deleted || len(q.Body) > protocol.QuoteBytes || !strings.HasSuffix(q.Body, "…") ||
		!strings.HasPrefix(m.Body, strings.TrimSuffix(q.Body, "…")) {
		t.Errorf("quote of a long message: %+v", q)
	}
	m.Kind, m.Body = protocol.KindDeleted, ""
	if q := message.QuoteOf(m); *q != (storage.Quote{SenderID: "alice", Deleted: true}) {
		t.Errorf("quote of a tombstone: %+v", q)
	}
}

func TestView(t *testing.T) {
	m := text()
	m.EditedAt = &edited
	m.Reactions = append(m.Reactions, storage.Reaction{Emoji: "🎉", Users: []string{"bob", "carol"}})
	for _, tc := range []struct {
		viewer string
		me     [2]bool
	}{{"", [2]bool{false, false}}, {"bob", [2]bool{true, true}}, {"carol", [2]bool{false, true}}, {"alice", [2]bool{false, false}}} {
		w := message.View(m, tc.viewer)
		want := protocol.Message{ConversationID: "c", Seq: 3, SenderID: "alice", Kind: protocol.KindText, Body: "hello",
			CreatedAt: created, ClientMsgID: "m3", ReplyTo: 1, Quote: &protocol.Quote{SenderID: "bob", Body: "hi"},
			Version: 4, EditedAt: &edited, Reactions: []protocol.Reaction{
				{Emoji: "👍", Count: 1, Me: tc.me[0]}, {Emoji: "🎉", Count: 2, Me: tc.me[1]}}}
		if !reflect.DeepEqual(w, want) {
			t.Errorf("viewed by %q:\n got %+v\nwant %+v", tc.viewer, w, want)
		}
	}
}

func TestReactors(t *testing.T) {
	m := text()
	m.Reactions = append(m.Reactions, storage.Reaction{Emoji: "🎉", Users: []string{"bob", "carol"}})
	got := message.Reactors(m, "carol")
	if len(got) != 2 || got[0].Emoji != "👍" || got[0].Count != 1 || got[0].Me || strings.Join(got[0].UserIDs, ",") != "bob" ||
		got[1].Emoji != "🎉" || got[1].Count != 2 || !got[1].Me || strings.Join(got[1].UserIDs, ",") != "bob,carol" {
		t.Errorf("reactors: %+v", got)
	}
	m.Reactions = nil
	if got := message.Reactors(m, "carol"); got == nil || len(got) != 0 {
		t.Errorf("no reactions: %#v, want an empty list (encoded [], not null)", got)
	}
}
