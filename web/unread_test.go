package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// deleteMessage deletes a message for everyone, as its sender.
func deleteMessage(t *testing.T, ctx context.Context, c *client.Conn, convID string, seq int64) {
	t.Helper()
	if _, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: convID, Seq: seq}); err != nil {
		t.Fatalf("delete message %d: %v", seq, err)
	}
}

// unreadShown is a JavaScript condition: the list entry titled title shows n unread (badge and
// the end of its label, after its subtitle; none at all for 0) and the tab title shows total.
func unreadShown(title string, n, total int) string {
	entry := fmt.Sprintf(`b.querySelector('.badge')?.textContent === '%d' && b.getAttribute('aria-label').endsWith(', %d unread')`, n, n)
	if n == 0 {
		entry = `!b.querySelector('.badge') && !b.getAttribute('aria-label').endsWith(' unread')`
	}
	tab := `document.title === 'chatd'`
	if total > 0 {
		tab = fmt.Sprintf(`document.title === '(%d) chatd'`, total)
	}
	return fmt.Sprintf(`(b => !!b && %s && %s)(document.querySelector(%q))`, entry, tab, convButton(title))
}

// TestDeletedMessagesNotUnread: a message deleted for everyone is no longer unread, in the list
// and in the tab title, also when the page has not loaded it (docs/PROTOCOL.md, Unread); one the
// reader had read changes nothing, and messages after a tombstone count only themselves.
func TestDeletedMessagesNotUnread(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	alice := testenv.Connect(t, n.URL(), "alice")
	testenv.Connect(t, n.URL(), "carol")
	bob := newBrowser(t).newPage("bob")
	bob.signIn(n.URL(), "bob")
	bob.openDM("alice")
	bob.openDM("carol") // bob looks at another conversation while alice writes
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("alice opens the dm: %v", err)
	}
	send := func(body string) {
		t.Helper()
		if _, err := alice.Send(ctx, dm.ID, body); err != nil {
			t.Fatalf("alice sends %q: %v", body, err)
		}
	}

	for i := 1; i <= 3; i++ {
		send(fmt.Sprintf("unread %d", i))
	}
	bob.waitFor("3 unread from alice", unreadShown("alice", 3, 3))
	deleteMessage(t, ctx, alice, dm.ID, 2)
	bob.waitFor("2 unread from alice after she deleted one of them", unreadShown("alice", 2, 2))
	send("unread 4")
	bob.waitFor("3 unread after a message that follows the tombstone", unreadShown("alice", 3, 3))

	// Bob reads all of it; then alice deletes a message he has read and one he has not.
	bob.clickConversation("alice")
	bob.waitFor("the tombstone at seq 2", `!!document.querySelector('#messages > li[data-seq="2"] .body.deleted')`)
	bob.readToBottom(4)
	bob.clickConversation("carol")
	send("unread 5")
	send("unread 6")
	bob.waitFor("2 new unread from alice", unreadShown("alice", 2, 2))
	deleteMessage(t, ctx, alice, dm.ID, 3) // read already: counts for nothing
	deleteMessage(t, ctx, alice, dm.ID, 6)
	bob.waitFor("1 unread after deleting a read and an unread message", unreadShown("alice", 1, 1))
	// The deletes reach the page in order, so the one of seq 3 was applied before the count above;
	// a page that had counted it would show 0 by now.
	if got := eval[string](bob, `document.title`); got != "(1) chatd" {
		t.Fatalf("the tab title is %q, want (1) chatd", got)
	}
}
