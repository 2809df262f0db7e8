package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// These tests drive the messaging features of issue 14 on the page (edits, reactions, delivered
// ticks, the server's quotes, presence and the catch-up after a reconnect) with two people, and
// assert what the other one sees.

// twoInADM signs alice and bob in on one node, and alice opens their DM, which both have open.
func twoInADM(t *testing.T) (n *testenv.Node, alice, bob *page) {
	t.Helper()
	n, pages := signedIn(t, "alice", "bob")
	alice, bob = pages[0], pages[1]
	alice.openDM("bob")
	bob.clickConversation("alice")
	return n, alice, bob
}

// openConvID is the id of the conversation the page shows (it keeps it in the address).
func openConvID(p *page) string {
	p.t.Helper()
	return eval[string](p, `decodeURIComponent(location.hash.replace(/^#c=/, ''))`)
}

// bodyIs is a JavaScript condition: message seq shows text as its body.
func bodyIs(seq int64, text string) string {
	return fmt.Sprintf(`(e => !!e && e.textContent === %q)(document.querySelector(%q))`, text, msgSel(seq)+" .body")
}

// chipIs is a JavaScript condition: message seq shows the reaction chip of emoji as "<emoji>
// <count>", pressed (this user's own) or not.
func chipIs(seq int64, emoji string, count int, mine bool) string {
	return fmt.Sprintf(`(e => !!e && e.textContent === %q && e.getAttribute('aria-pressed') === '%t' && e.classList.contains('me') === %t)(document.querySelector(%q))`,
		fmt.Sprintf("%s %d", emoji, count), mine, mine, fmt.Sprintf(`%s .chip[data-emoji="%s"]`, msgSel(seq), emoji))
}

// TestEditMessage: alice edits her message through its menu (Escape first cancels, then Enter
// saves), and her typing of the new text shows bob no "typing"; bob sees the new text live with
// an "edited" mark, and again after a reload from
// history; bob's menu on alice's message offers no Edit; an edit the server refuses (the message
// was deleted on alice's phone meanwhile) shows the server's words and keeps the text.
func TestEditMessage(t *testing.T) {
	n, alice, bob := twoInADM(t)
	// Set without an input event: no typing frame yet, so the page's 3 s throttle cannot hide one sent while editing.
	alice.do("send see you at 5", chromedp.Evaluate[chromedp.Void](`document.getElementById('composer-input').value = 'see you at 5'`),
		chromedp.Focus(chromedp.ID("composer-input")), pressKey("Enter", 13, "\r"))
	bob.untilShown(1, 1)
	alice.waitFor("the message confirmed", present(msgSel(1)+`[data-state="sent"]`))

	alice.openMessageMenu(1)
	alice.do("choose Edit", chromedp.Click(chromedp.ID("msg-edit")))
	alice.waitFor("the composer to hold the text to edit", `!document.getElementById('edit-bar').hidden && document.getElementById('composer-input').value === 'see you at 5' && document.activeElement === document.getElementById('composer-input') && document.getElementById('send').textContent === 'Save'`)
	alice.do("Escape", pressKey("Escape", 27, ""))
	alice.waitFor("the edit cancelled", `document.getElementById('edit-bar').hidden && document.getElementById('composer-input').value === '' && document.getElementById('send').textContent === 'Send'`)

	alice.openMessageMenu(1)
	alice.do("choose Edit again", chromedp.Click(chromedp.ID("msg-edit")))
	alice.waitFor("the edit bar", `!document.getElementById('edit-bar').hidden`)
	typingBefore := len(sentFramesOf(alice, protocol.TypeTyping))
	alice.do("change the text as a person types it", chromedp.Evaluate[chromedp.Void](`document.getElementById('composer-input').value = ''`), chromedp.Focus(chromedp.ID("composer-input")), insertText("see you at 6"))
	alice.waitFor("the new text in the composer", `document.getElementById('composer-input').value === 'see you at 6'`)
	alice.do("press Enter", pressKey("Enter", 13, "\r"))
	bob.waitFor("the new text with an edited mark", bodyIs(1, "see you at 6")+` && `+present(msgSel(1)+" .meta .edited"))
	alice.waitFor("alice's composer empty again", `document.getElementById('edit-bar').hidden && document.getElementById('composer-input').value === ''`)
	bob.screenshot("14-edited")
	if edits := sentFramesOf(alice, protocol.TypeEditMessage); len(edits) != 1 || edits[0].Seq != 1 || edits[0].Body != "see you at 6" {
		t.Fatalf("alice's edit frames %+v, want one of seq 1 with the new text", edits)
	}
	if typing := sentFramesOf(alice, protocol.TypeTyping)[typingBefore:]; len(typing) != 0 {
		t.Fatalf("alice's page sent %d typing frames while she edited: bob would see her typing", len(typing))
	}
	if got := eval[string](bob, `document.getElementById('typing').textContent`); got != "" {
		t.Fatalf("bob sees %q while alice edits", got)
	}
	if sends := sentFramesOf(alice, protocol.TypeSend); len(sends) != 1 {
		t.Fatalf("alice sent %d messages, want 1: the edit must not be sent as a new message", len(sends))
	}

	bob.openMessageMenu(1)
	if eval[bool](bob, `!document.getElementById('msg-edit').hidden`) {
		t.Fatal("bob's menu on alice's message offers Edit")
	}
	bob.do("close the menu", pressKey("Escape", 27, ""))

	bob.do("reload", chromedp.Reload())
	bob.waitConnected()
	bob.waitFor("the edited text from history, marked", bodyIs(1, "see you at 6")+` && `+present(msgSel(1)+" .meta .edited"))

	// A refused edit: alice's phone deletes the message while the page edits it.
	alice.typeMessage("typo mesage", true)
	alice.waitFor("the second message confirmed", present(msgSel(2)+`[data-state="sent"]`))
	alice.openMessageMenu(2)
	alice.do("choose Edit", chromedp.Click(chromedp.ID("msg-edit")))
	alice.waitFor("the edit bar", `!document.getElementById('edit-bar').hidden`)
	alice.do("correct the text", chromedp.SetValue(chromedp.ID("composer-input"), "typo message"))
	phone := testenv.Connect(t, n.URL(), "alice")
	deleteMessage(t, t.Context(), phone, openConvID(alice), 2)
	alice.do("save", pressKey("Enter", 13, "\r"))
	alice.waitFor("the refusal in the server's words", `!document.getElementById('notice').hidden && /^Could not edit the message: .{8,}/.test(document.getElementById('notice-text').textContent)`)
	if v := eval[string](alice, `document.getElementById('composer-input').value`); v != "typo message" {
		t.Fatalf("after the refusal the composer holds %q, want the edited text kept", v)
	}
	bob.waitFor("bob sees the tombstone, not the edit", present(msgSel(2)+" .body.deleted"))
}

// TestReactions: alice reacts to bob's message from its menu; both see the chip "👍 1", pressed
// on alice's side only; bob adds his with a click on the chip, alice takes hers away with one;
// the counts and "mine" follow live, and after a reload. The page told the server which
// conversation it shows (focus). A reaction past a limit is refused in words.
func TestReactions(t *testing.T) {
	n, alice, bob := twoInADM(t)
	bob.typeMessage("lunch?", true)
	alice.untilShown(1, 1)

	alice.openMessageMenu(1)
	alice.do("react with a thumbs up", chromedp.Click(chromedp.CSS(`#msg-menu .react-pick[data-emoji="👍"]`)))
	bob.waitFor("alice's reaction", chipIs(1, "👍", 1, false))
	alice.waitFor("her own reaction, pressed", chipIs(1, "👍", 1, true))

	bob.do("add his own with the chip", chromedp.Click(chromedp.CSS(msgSel(1)+` .chip[data-emoji="👍"]`)))
	alice.waitFor("two thumbs", chipIs(1, "👍", 2, true))
	bob.waitFor("two thumbs, his pressed", chipIs(1, "👍", 2, true))
	bob.screenshot("14-reactions")

	alice.do("take hers away with the chip", chromedp.Click(chromedp.CSS(msgSel(1)+` .chip[data-emoji="👍"]`)))
	bob.waitFor("one thumb left, his", chipIs(1, "👍", 1, true))
	alice.waitFor("one thumb, not hers", chipIs(1, "👍", 1, false))

	convID := openConvID(alice)
	focused := false
	for _, f := range sentFramesOf(alice, protocol.TypeFocus) {
		focused = focused || f.ConversationID == convID
	}
	if !focused {
		t.Fatalf("alice's page never sent focus with the open conversation %s: %v", convID, sentFramesOf(alice, protocol.TypeFocus))
	}

	alice.do("reload", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("the reaction from history", chipIs(1, "👍", 1, false))

	// Ten reactions of alice's from her phone: the page's eleventh is refused, in words.
	phone := testenv.Connect(t, n.URL(), "alice")
	for i := 1; i <= 10; i++ {
		if _, err := phone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: convID, Seq: 1, Emoji: fmt.Sprintf("r%02d", i)}); err != nil {
			t.Fatalf("react %d from the phone: %v", i, err)
		}
	}
	bob.waitFor("alice's ten reactions", fmt.Sprintf(`document.querySelectorAll(%q).length === 11`, msgSel(1)+" .chip"))
	alice.openMessageMenu(1)
	alice.do("react once more", chromedp.Click(chromedp.CSS(`#msg-menu .react-pick[data-emoji="🎉"]`)))
	alice.waitFor("the limit in words", `!document.getElementById('notice').hidden && document.getElementById('notice-text').textContent.startsWith('Could not react with 🎉: you have 10 reactions')`)
}

// tickIs is a JavaScript condition: own message seq shows the DM tick named label ("Sent",
// "Delivered" or "Read"), told in words to screen readers.
func tickIs(seq int64, label string) string {
	return fmt.Sprintf(`(e => !!e && e.getAttribute('aria-label') === %q && e.title === %q)(document.querySelector(%q))`, label, label, msgSel(seq)+" .tick")
}

// TestDeliveredTicks: in a DM, alice's messages show ✓ sent while bob has no device online, ✓✓
// delivered once bob's page (signed in, the DM not open) has received them, also after alice
// reloads (from receipts), and ✓✓ read once bob opens the DM.
func TestDeliveredTicks(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")
	bob.signIn(n.URL(), "bob")
	bob.do("leave the page", chromedp.Navigate("about:blank"))

	alice.signIn(n.URL(), "alice")
	alice.openDM("bob")
	alice.typeMessage("are you there?", true)
	alice.waitFor("the message sent, not delivered", tickIs(1, "Sent")+` && document.querySelector('`+msgSel(1)+` .tick').textContent === '✓'`)

	bob.open(n.URL()) // signed in still; no conversation open
	bob.waitConnected()
	if eval[bool](bob, `!document.getElementById('conv-body').hidden`) {
		t.Fatal("bob's page opened a conversation by itself")
	}
	alice.typeMessage("hello?", true)
	alice.waitFor("both messages delivered", tickIs(1, "Delivered")+` && `+tickIs(2, "Delivered")+` && document.querySelector('`+msgSel(2)+` .tick').textContent === '✓✓'`)
	convID := openConvID(alice)
	delivered := false
	for _, f := range sentFramesOf(bob, protocol.TypeDelivered) {
		delivered = delivered || (f.ConversationID == convID && f.Seq == 2)
	}
	if !delivered {
		t.Fatalf("bob's page sent no delivered frame for seq 2: %v", sentFramesOf(bob, protocol.TypeDelivered))
	}

	// The counts catch up within the read window; wait for them before the reload.
	phone := testenv.Connect(t, n.URL(), "alice")
	testenv.CheckFor(t, waitTimeout, pollInterval, func() error { // polling the server, like waitFor polls the page
		r, err := phone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: convID, Seq: 2})
		if err == nil && r.DeliveredTo != nil && *r.DeliveredTo >= 1 {
			return nil
		}
		return fmt.Errorf("receipts never counted bob's delivery: %+v %v", r, err)
	})
	alice.do("reload", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("delivered after the reload", tickIs(1, "Delivered")+` && `+tickIs(2, "Delivered"))

	bob.clickConversation("alice")
	alice.waitFor("both messages read", tickIs(1, "Read")+` && `+tickIs(2, "Read"))
	alice.screenshot("14-read-ticks")
}

// presenceIs is a JavaScript condition: the open DM's header says the peer's presence matches re
// (a regular expression; "^$" for nothing shown).
func presenceIs(re string) string {
	return fmt.Sprintf(`(m => new RegExp(%q).test(m.dataset.presence || '') && m.textContent.includes(m.dataset.presence || ''))(document.getElementById('conv-meta'))`, re)
}

// TestPresenceInDM: alice's DM header shows bob online, "last seen" once his page is gone, online
// again when he is back; when bob turns "Show when I'm online" off, alice sees neither, also
// after a reload.
func TestPresenceInDM(t *testing.T) {
	n, alice, bob := twoInADM(t)
	alice.waitFor("bob online", presenceIs(`^online$`))

	// Signing out closes bob's only socket. (Leaving for another address does not always: the
	// browser may keep the page, socket and all, in its back-forward cache.)
	bob.do("open the settings", chromedp.Click(chromedp.ID("open-settings")))
	bob.do("sign out", chromedp.Click(chromedp.ID("sign-out")))
	alice.waitFor("bob last seen", presenceIs(`^last seen \S`))
	bob.signIn(n.URL(), "bob")
	alice.waitFor("bob online again", presenceIs(`^online$`))
	alice.screenshot("14-presence")

	bob.do("open the settings", chromedp.Click(chromedp.ID("open-settings")))
	bob.waitFor("the presence switch on", `document.getElementById('settings').open && document.getElementById('presence-switch').checked`)
	bob.do("turn presence off", chromedp.Click(chromedp.ID("presence-switch")))
	bob.waitFor("the switch saved", `document.getElementById('presence-status').textContent === 'Whether you are online is hidden.'`)
	alice.waitFor("bob's presence hidden", presenceIs(`^$`))
	hidden := false
	for _, f := range sentFramesOf(bob, protocol.TypeSetPrivacy) {
		hidden = hidden || (f.HidePresence != nil && *f.HidePresence)
	}
	if !hidden {
		t.Fatalf("bob's page sent no set_privacy with hidePresence: %v", sentFramesOf(bob, protocol.TypeSetPrivacy))
	}
	alice.do("reload", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("the DM open again", `document.getElementById('conv-title').textContent === 'bob'`)
	alice.waitFor("bob's presence still hidden", presenceIs(`^$`)+` && document.getElementById('conv-meta').textContent === 'Direct message'`)
}

// TestChangesCaughtUpAfterReconnect: while alice's page is cut off, bob edits one message, reacts
// to another and deletes a third; when the page is back it asks sync for the changes after the
// version it holds and shows all three, without reloading the messages.
func TestChangesCaughtUpAfterReconnect(t *testing.T) {
	s := startDM(t, defaultNode(t), "alice", "bob", true)
	alice, link := s.page, s.link
	s.send(t, "msg", 1, 3)
	alice.untilShown(1, 3)

	link.SetDown(true)
	alice.waitFor("the page to go offline", `document.getElementById('conn-status').dataset.state === 'offline'`)
	change := func(what string, f protocol.ClientFrame) {
		t.Helper()
		f.ConversationID = s.dm.ID
		if _, err := s.peer.Request(s.ctx, f); err != nil {
			t.Fatalf("bob %s: %v", what, err)
		}
	}
	change("edits 1", protocol.ClientFrame{Type: protocol.TypeEditMessage, Seq: 1, Body: "msg 001, edited"})
	change("reacts to 2", protocol.ClientFrame{Type: protocol.TypeReact, Seq: 2, Emoji: "🎉"})
	change("deletes 3", protocol.ClientFrame{Type: protocol.TypeDeleteMessage, Seq: 3})
	histories := len(sentFramesOf(alice, protocol.TypeHistory))

	link.SetDown(false)
	alice.waitConnected()
	alice.waitFor("the edit, the reaction and the deletion", bodyIs(1, "msg 001, edited")+` && `+present(msgSel(1)+" .meta .edited")+` && `+chipIs(2, "🎉", 1, false)+` && `+present(msgSel(3)+" .body.deleted"))
	syncs := sentFramesOf(alice, protocol.TypeSync)
	last := syncs[len(syncs)-1]
	if _, ok := last.Versions[s.dm.ID]; !ok {
		t.Fatalf("the reconnect's sync %+v names no version for the DM", last)
	}
	if h := len(sentFramesOf(alice, protocol.TypeHistory)); h != histories {
		t.Fatalf("the page loaded %d history pages after the reconnect; the changes frame should have been enough", h-histories)
	}
}
