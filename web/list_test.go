package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// previewIs is a JavaScript condition: the list entry titled title shows text as its preview
// line, a time, and n unread (no badge for 0).
func previewIs(title, text string, n int) string {
	badge := fmt.Sprintf(`b.querySelector('.badge')?.textContent === '%d'`, n)
	if n == 0 {
		badge = `!b.querySelector('.badge')`
	}
	return fmt.Sprintf(`(b => !!b && b.querySelector('.conv-sub')?.textContent === %q && /\d/.test(b.querySelector('.conv-time')?.textContent || '') && %s)(document.querySelector(%q))`,
		text, badge, convButton(title))
}

// listOrder is a JavaScript expression: the titles of the conversation list, top to bottom.
const listOrder = `[...document.querySelectorAll('#conv-list .conv-name')].map(e => e.textContent).join(',')`

// listOrderIs is a JavaScript condition: the list shows the titles in this order.
func listOrderIs(titles ...string) string {
	return fmt.Sprintf(`%s === %q`, listOrder, strings.Join(titles, ","))
}

// TestConversationListPreviews: carol's list shows, per conversation, the newest message's
// sender, text and time and the unread count, the most recently active first; it follows bob's
// and alice's messages, bob's edit and his deletion as they happen, and after a reload shows the
// same from the server's lastMessage; her own reply reads "You: ..." for her and "carol: ..." for
// alice.
func TestConversationListPreviews(t *testing.T) {
	n, pages := signedIn(t, "alice", "bob", "carol")
	alice, bob, carol := pages[0], pages[1], pages[2]
	alice.createGroup("Team", "bob", "carol")
	bob.clickConversation("Team")
	bob.typeMessage("lunch at noon?", true)
	carol.waitFor("the group's preview of bob's message", previewIs("Team", "bob: lunch at noon?", 1))

	alice.openDM("carol")
	alice.typeMessage("hi carol", true)
	carol.waitFor("alice's DM on top with her message", previewIs("alice", "alice: hi carol", 1)+` && `+listOrderIs("alice", "Team"))

	bob.typeMessage("or 1pm", true)
	carol.waitFor("the group back on top with 2 unread", previewIs("Team", "bob: or 1pm", 2)+` && `+listOrderIs("Team", "alice"))
	carol.screenshot("24-list-previews")

	// bob edits, then deletes, his newest message on his phone.
	bobPhone := testenv.Connect(t, n.URL(), "bob")
	convs, err := bobPhone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatalf("bob lists his conversations: %v", err)
	}
	var team protocol.Conversation
	for _, c := range convs.Conversations {
		if c.Name == "Team" {
			team = c
		}
	}
	if team.LastMessage == nil || team.LastMessage.Body != "or 1pm" {
		t.Fatalf("the server's lastMessage of Team is %+v, want bob's 'or 1pm'", team.LastMessage)
	}
	last := team.LastSeq
	if _, err := bobPhone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: team.ID, Seq: last, Body: "or\n2pm"}); err != nil {
		t.Fatalf("bob edits: %v", err)
	}
	carol.waitFor("the preview edited, on one line", previewIs("Team", "bob: or 2pm", 2))
	deleteMessage(t, t.Context(), bobPhone, team.ID, last)
	carol.waitFor("the preview of a deleted message, one unread less", previewIs("Team", "This message was deleted", 1))
	alice.waitFor("alice's list says the same", previewIs("Team", "This message was deleted", 0))

	carol.do("reload", chromedp.Reload())
	carol.waitConnected()
	carol.waitFor("the previews from the server after a reload", previewIs("Team", "This message was deleted", 1)+` && `+previewIs("alice", "alice: hi carol", 1)+` && `+listOrderIs("Team", "alice"))

	carol.clickConversation("alice")
	carol.typeMessage("hey alice", true)
	carol.waitFor("carol's own message in her list, on top", previewIs("alice", "You: hey alice", 0)+` && `+listOrderIs("alice", "Team"))
	alice.waitFor("carol's message in alice's list", previewIs("carol", "carol: hey alice", 0))
}
