package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// These tests drive the controls of issue 15 (a message menu, a conversation menu, a group-info
// panel, a settings panel, date separators and links) with two or three people, and assert what
// the others see.

// present is a JavaScript condition: an element matches the CSS selector sel.
func present(sel string) string { return fmt.Sprintf(`!!document.querySelector(%q)`, sel) }

// msgSel selects the message with seq in the open conversation.
func msgSel(seq int64) string { return fmt.Sprintf(`#messages > li[data-seq="%d"]`, seq) }

// openMessageMenu opens the menu of message seq with the mouse: the pointer over the message
// shows its button, and a click on it opens the menu.
func (p *page) openMessageMenu(seq int64) {
	p.t.Helper()
	button := msgSel(seq) + " .msg-actions"
	p.waitFor(fmt.Sprintf("message %d with its menu button", seq), fmt.Sprintf(`!!document.querySelector(%q)`, button))
	shown := fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).opacity === '1'`, button)
	// A message arriving meanwhile may scroll the page to the newest, away from the pointer:
	// point again, a few times, before giving up.
	for range 3 {
		p.do(fmt.Sprintf("hover message %d", seq), chromedp.ScrollIntoView(chromedp.CSS(msgSel(seq))), hoverCenter(msgSel(seq)+" .bubble"))
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](shown, chromedp.WithPollingInterval(pollInterval), chromedp.WithPollingTimeout(3*time.Second)))
		cancel()
		if err == nil {
			break
		}
	}
	p.waitFor("the menu button to show on hover", shown)
	p.do(fmt.Sprintf("open message %d's menu", seq), chromedp.Click(chromedp.CSS(button)))
	p.waitFor("the message menu", `!document.getElementById('msg-menu').hidden && document.activeElement === document.getElementById('msg-reply')`)
}

// hoverCenter moves the mouse over the middle of the element sel.
func hoverCenter(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(r => [r.left + r.width / 2, r.top + r.height / 2])(document.querySelector(%q).getBoundingClientRect())`, sel)))
		if err != nil {
			return err
		}
		_, err = cdp.Call(ctx, t, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: box[0], Y: box[1]})
		return err
	})
}

// confirm waits for the confirm step titled like title and presses its button (or Cancel).
func (p *page) confirm(title string, ok bool) {
	p.t.Helper()
	p.waitFor("the confirm step: "+title, fmt.Sprintf(`document.getElementById('confirm').open && document.getElementById('confirm-title').textContent.startsWith(%q)`, title))
	button := "confirm-cancel"
	if ok {
		button = "confirm-ok"
	}
	p.do("answer "+title, chromedp.Click(chromedp.ID(button)))
	p.waitFor("the confirm step to close", `!document.getElementById('confirm').open`)
}

// convMenu opens the open conversation's menu and picks the item with id.
func (p *page) convMenu(item string) {
	p.t.Helper()
	p.do("open the conversation menu", chromedp.Click(chromedp.ID("conv-menu-button")))
	p.waitFor("the conversation menu", fmt.Sprintf(`!document.getElementById('conv-menu').hidden && !document.getElementById(%q).hidden`, item))
	p.do("choose "+item, chromedp.Click(chromedp.ID(item)))
}

// createGroup creates a group through the sidebar and waits for it to open.
func (p *page) createGroup(name string, members ...string) {
	p.t.Helper()
	p.do("create group "+name,
		chromedp.Click(chromedp.CSS("#group-details summary")),
		chromedp.SetValue(chromedp.ID("group-name"), name),
		chromedp.SetValue(chromedp.ID("group-members"), strings.Join(members, ", ")),
		chromedp.Click(chromedp.CSS("#group-form button[type=submit]")))
	p.waitFor("group "+name+" to open", fmt.Sprintf(`document.getElementById('conv-title').textContent === %q`, name))
}

// sentFramesOf decodes the frames of type typ the page sent.
func sentFramesOf(p *page, typ string) []protocol.ClientFrame {
	var out []protocol.ClientFrame
	for _, raw := range p.sentFrames() {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) == nil && f.Type == typ {
			out = append(out, f)
		}
	}
	return out
}

// systemShown is a JavaScript condition: the open conversation shows a system message body.
func systemShown(body string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages > li.system')].some(e => e.textContent === %q)`, body)
}

// noticeShown is a JavaScript condition: the notice under the top bar says text.
func noticeShown(text string) string {
	return fmt.Sprintf(`!document.getElementById('notice').hidden && document.getElementById('notice-text').textContent === %q`, text)
}

// threeInAGroup signs alice, bob and carol in on one node, and alice creates a group of the three
// that each of them has open.
func threeInAGroup(t *testing.T, name string) (n *testenv.Node, alice, bob, carol *page) {
	t.Helper()
	n, pages := signedIn(t, "alice", "bob", "carol")
	alice, bob, carol = pages[0], pages[1], pages[2]
	alice.createGroup(name, "bob", "carol")
	bob.clickConversation(name)
	carol.clickConversation(name)
	return n, alice, bob, carol
}

// TestReplyShowsQuote: alice answers bob's message through its menu (the mouse, then the
// keyboard); the send carries replyTo, and carol sees the quote of bob's message over alice's
// reply, which takes her to it; once bob deletes his message, carol's quote says so.
func TestReplyShowsQuote(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Team")
	bob.typeMessage("Lunch at noon tomorrow at the usual place?", true)
	for _, p := range []*page{alice, carol} {
		p.untilShown(1, 1)
	}

	alice.openMessageMenu(1)
	// Alice owns the group: her menu offers an admin's Delete for everyone on bob's message too.
	if eval[bool](alice, `document.getElementById('msg-delete').hidden`) {
		t.Fatal("alice's menu on bob's message, in the group she owns, does not offer Delete for everyone")
	}
	alice.do("reply", chromedp.Click(chromedp.ID("msg-reply")))
	alice.waitFor("the composer to show what alice answers", `!document.getElementById('reply-bar').hidden && document.getElementById('reply-sender').textContent === 'bob' && document.getElementById('reply-text').textContent.startsWith('Lunch at noon') && document.activeElement === document.getElementById('composer-input')`)
	alice.do("cancel the reply", chromedp.Click(chromedp.ID("reply-cancel")))
	alice.waitFor("the reply bar to go", `document.getElementById('reply-bar').hidden`)

	// The keyboard: Tab-reachable button, Enter opens the menu on Reply, Enter chooses it.
	alice.do("open the menu with the keyboard", chromedp.Focus(chromedp.CSS(msgSel(1)+" .msg-actions")), pressKey("Enter", 13, "\r"))
	alice.waitFor("the menu with Reply focused", `!document.getElementById('msg-menu').hidden && document.activeElement === document.getElementById('msg-reply')`)
	alice.do("choose Reply with the keyboard", pressKey("Enter", 13, "\r"))
	alice.waitFor("the reply bar again", `!document.getElementById('reply-bar').hidden && document.activeElement === document.getElementById('composer-input')`)
	alice.typeMessage("Yes, see you there", true)
	alice.waitFor("the reply confirmed, with its quote", present(msgSel(2)+`[data-state="sent"] .quote.loaded`))
	alice.waitFor("the reply bar to clear after the send", `document.getElementById('reply-bar').hidden`)
	sends := sentFramesOf(alice, protocol.TypeSend)
	if len(sends) != 1 || sends[0].ReplyTo != 1 {
		t.Fatalf("alice's send frames %+v, want one with replyTo 1", sends)
	}

	carol.untilShown(1, 2)
	carol.waitFor("the quote of bob's message over alice's reply", fmt.Sprintf(`(q => !!q && q.querySelector('.quote-sender').textContent === 'bob' && q.querySelector('.quote-text').textContent === 'Lunch at noon tomorrow at the usual place?')(document.querySelector(%q))`, msgSel(2)+" .quote"))
	carol.screenshot("15-reply-quote")
	carol.do("click the quote", chromedp.Click(chromedp.CSS(msgSel(2)+" .quote")))
	carol.waitFor("bob's message in view with the focus", inView(1)+fmt.Sprintf(` && document.activeElement === document.querySelector(%q)`, msgSel(1)))

	bob.untilShown(1, 2)
	bob.openMessageMenu(1)
	bob.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	bob.confirm("Delete for everyone", true)
	carol.waitFor("the quote to say the message was deleted", fmt.Sprintf(`(q => !!q && q.classList.contains('deleted') && q.textContent === 'deleted message')(document.querySelector(%q))`, msgSel(2)+" .quote"))
	carol.waitFor("the tombstone of bob's message", present(msgSel(1)+` .body.deleted`))
}

// TestReplyToMessageNotLoaded: a reply to a message outside the loaded window shows the quote
// the server put on it (sender and text, nothing loaded); when the answered message is deleted
// for everyone, the quote says so at once, still without it loaded; and the quote loads the
// answered message and shows it.
func TestReplyToMessageNotLoaded(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	s.send(t, "msg", 1, 70)
	if _, err := s.peer.Request(s.ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: s.dm.ID,
		ClientMsgID: uuid.NewString(), Body: "about your first message", ReplyTo: 1}); err != nil {
		t.Fatalf("alice replies: %v", err)
	}
	// Bob has read everything (on another device): the page opens the DM at its newest page.
	bobPhone := testenv.Connect(t, s.node.URL(), "bob")
	if err := bobPhone.Post(s.ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: s.dm.ID, Seq: 71}); err != nil {
		t.Fatalf("bob reads on his phone: %v", err)
	}
	testenv.Push(t, bobPhone, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeCursor && f.ReadSeq == 71
	})
	bob.do("reload, to open the conversation at its newest page", chromedp.Reload())
	bob.waitConnected()
	bob.waitFor("the reply with the server's quote, the first message not loaded", fmt.Sprintf(`document.getElementById('messages').dataset.lastSeq === '71' && Number(document.getElementById('messages').dataset.firstSeq) > 1 && (q => !!q && q.classList.contains('loaded') && q.querySelector('.quote-sender').textContent === 'alice' && q.querySelector('.quote-text').textContent === 'msg 001')(document.querySelector(%q))`, msgSel(71)+" .quote"))

	deleteMessage(t, s.ctx, s.peer, s.dm.ID, 1)
	bob.waitFor("the quote to say the message was deleted", fmt.Sprintf(`!document.querySelector(%q) && (q => !!q && q.classList.contains('deleted') && q.textContent === 'deleted message')(document.querySelector(%q))`, msgSel(1), msgSel(71)+" .quote"))
	bob.do("click the quote", chromedp.Click(chromedp.CSS(msgSel(71)+" .quote")))
	bob.waitFor("the answered message loaded and in view, a tombstone", inView(1)+` && !!document.querySelector('#messages > li[data-seq="1"] .body.deleted')`)
}

// TestDeleteForEveryone: alice deletes her message with a long-press on a phone, after a
// cancelled first try; bob sees the tombstone. Bob is offered no delete on her message, and a
// delete the server refuses says why.
func TestDeleteForEveryone(t *testing.T) {
	n, pages := signedIn(t, "alice", "bob")
	alice, bob := pages[0], pages[1]
	alice.openDM("bob")
	alice.typeMessage("oops, wrong chat", true)
	alice.typeMessage("this one stays", true)
	alice.typeMessage("and this one goes too", true)
	bob.waitFor("3 unread from alice", unreadShown("alice", 3, 3)) // the badge settled before the click
	bob.clickConversation("alice")
	bob.untilShown(1, 3)

	// Cancelled: nothing is deleted.
	alice.openMessageMenu(1)
	alice.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	alice.confirm("Delete for everyone", false)
	if got := sentFramesOf(alice, protocol.TypeDeleteMessage); len(got) != 0 {
		t.Fatalf("a cancelled delete sent %+v", got)
	}

	// A phone: a finger held on the bubble opens the menu.
	alice.do("a phone with touch", chromedp.EmulateViewport(375, 667, chromedp.EmulateTouch))
	alice.waitFor("the conversation covering the list", `getComputedStyle(document.getElementById('sidebar')).display === 'none' && !!document.querySelector('#messages > li[data-seq="1"] .bubble')`)
	alice.do("scroll message 1 into view", chromedp.ScrollIntoView(chromedp.CSS(msgSel(1))))
	alice.do("hold a finger on message 1", touch(input.DispatchTouchEventTypeTouchStart, msgSel(1)+" .bubble"))
	alice.waitFor("the menu after the long-press", `!document.getElementById('msg-menu').hidden && !document.getElementById('msg-delete').hidden`)
	alice.do("lift the finger", touch(input.DispatchTouchEventTypeTouchEnd, msgSel(1)+" .bubble"))
	alice.screenshot("16-message-menu-phone")
	if eval[bool](alice, `document.getElementById('msg-menu').hidden`) {
		t.Fatal("lifting the finger after the long-press closed the menu")
	}
	alice.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	alice.confirm("Delete for everyone", true)
	bob.waitFor("the tombstone on bob's page", present(msgSel(1)+` .body.deleted`))
	bob.untilShown(1, 3)
	if got := eval[string](bob, `document.querySelector('#messages > li[data-seq="2"] .body').textContent`); got != "this one stays" {
		t.Fatalf("bob's message 2 is %q after alice deleted message 1", got)
	}
	alice.waitFor("the tombstone on alice's page", present(msgSel(1)+` .body.deleted`))

	// Bob may not delete alice's message: his menu offers only Reply.
	bob.openMessageMenu(2)
	if eval[bool](bob, `!document.getElementById('msg-delete').hidden`) {
		t.Fatal("bob's menu on alice's message offers Delete for everyone")
	}
	bob.do("close the menu", pressKey("Escape", 27, ""))
	bob.waitFor("the menu closed, the focus back on its button", `document.getElementById('msg-menu').hidden && document.activeElement === document.querySelector('#messages > li[data-seq="2"] .msg-actions')`)

	// Refused: alice's other device deletes message 3 while she is at the confirm step.
	phone := testenv.Connect(t, n.URL(), "alice")
	alice.do("a desktop window", chromedp.EmulateViewport(1100, 760))
	alice.openMessageMenu(3)
	alice.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	alice.waitFor("the confirm step", `document.getElementById('confirm').open`)
	convID := eval[string](alice, `decodeURIComponent(location.hash.slice(3))`)
	if _, err := phone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: convID, Seq: 3}); err != nil {
		t.Fatalf("alice's phone deletes message 3: %v", err)
	}
	alice.waitFor("message 3 deleted by the phone", present(msgSel(3)+` .body.deleted`))
	alice.confirm("Delete for everyone", true)
	alice.waitFor("the refusal, in words", noticeShown("Could not delete the message: message 3 is deleted and cannot change."))
	bob.waitFor("bob sees message 3 deleted once", present(msgSel(3)+` .body.deleted`))
}

// touch sends one touch event at the middle of the element sel.
func touch(typ input.DispatchTouchEventType, sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(r => [r.left + r.width / 2, r.top + r.height / 2])(document.querySelector(%q).getBoundingClientRect())`, sel)))
		if err != nil {
			return err
		}
		points := []*input.TouchPoint{{X: box[0], Y: box[1]}}
		if typ == input.DispatchTouchEventTypeTouchEnd {
			points = []*input.TouchPoint{}
		}
		_, err = cdp.Call(ctx, t, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: typ, TouchPoints: points})
		return err
	})
}

// TestLeaveGroup: carol leaves through the conversation menu; the group leaves her list, and
// alice and bob see "carol left" and two members.
func TestLeaveGroup(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Trip")
	carol.convMenu("menu-leave")
	carol.confirm("Leave Trip", true)
	carol.waitFor("the group gone from carol's list", fmt.Sprintf(`!document.querySelector(%q) && document.getElementById('conv-body').hidden`, convButton("Trip")))
	for _, p := range []*page{alice, bob} {
		p.waitFor("the system message", systemShown("carol left"))
		p.waitFor("two members", `document.getElementById('conv-meta').textContent.startsWith('2 members')`)
	}
	bob.screenshot("17-after-leave")
	alice.do("open the conversation menu", chromedp.Click(chromedp.ID("conv-menu-button")))
	alice.waitFor("the group's menu", `!document.getElementById('conv-menu').hidden && document.activeElement === document.getElementById('menu-group-info')`)
	if got := eval[string](alice, `[...document.querySelectorAll('#conv-menu [role=menuitem]')].filter(b => !b.hidden).map(b => b.textContent).join(', ')`); got != "Group info, Search in this conversation, Delete for me, Leave group" {
		t.Fatalf("the group's menu offers %s", got)
	}
	alice.do("close the menu", pressKey("Escape", 27, ""))
	alice.waitFor("the menu closed, the group still open", `document.getElementById('conv-menu').hidden && document.activeElement === document.getElementById('conv-menu-button') && !document.getElementById('conv-body').hidden`)
}

// TestDeleteConversationForMe: bob deletes his DM with alice for himself; alice keeps it and
// its history; her next message brings it back to bob with only that message.
func TestDeleteConversationForMe(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob")
	alice, bob := pages[0], pages[1]
	alice.openDM("bob")
	alice.typeMessage("one", true)
	alice.typeMessage("two", true)
	bob.waitFor("2 unread from alice", unreadShown("alice", 2, 2))
	bob.clickConversation("alice")
	bob.untilShown(1, 2)

	bob.convMenu("menu-hide")
	bob.confirm("Delete this conversation for you", true)
	bob.waitFor("the DM gone from bob's list", fmt.Sprintf(`!document.querySelector(%q) && document.getElementById('conv-body').hidden`, convButton("alice")))
	if frames := sentFramesOf(bob, protocol.TypeHideConversation); len(frames) != 1 {
		t.Fatalf("bob's page sent %d hide_conversation frames, want 1", len(frames))
	}
	alice.do("reload", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("alice's DM still open", `document.getElementById('conv-title').textContent === 'bob'`)
	alice.untilShown(1, 2)

	alice.typeMessage("three", true)
	bob.waitFor("the DM back in bob's list with 1 unread", unreadShown("alice", 1, 1))
	bob.clickConversation("alice")
	bob.untilShown(3, 3)
}

// TestGroupInfoMembers: alice adds carol in the group-info panel (carol gets the group, bob sees
// it said); a user who does not exist is refused in words with the input kept; bob, who did not
// create the group, is offered no Remove; alice removes carol and carol loses the group.
func TestGroupInfoMembers(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob", "carol")
	alice, bob, carol := pages[0], pages[1], pages[2]
	alice.createGroup("Team", "bob")
	bob.clickConversation("Team")

	alice.convMenu("menu-group-info")
	members := `[...document.querySelectorAll('#group-member-list > li')].map(e => e.dataset.user).join(',')`
	alice.waitFor("the panel with two members", `document.getElementById('group-info').open && document.getElementById('group-info-title').textContent === 'Team' && `+members+` === 'alice,bob'`)
	alice.do("add carol", chromedp.SetValue(chromedp.ID("add-members-input"), "carol"), chromedp.Click(chromedp.CSS("#add-members-form button[type=submit]")))
	carol.waitFor("the group in carol's list", fmt.Sprintf(`!!document.querySelector(%q)`, convButton("Team")))
	bob.waitFor("bob sees carol added", systemShown("alice added carol"))
	alice.waitFor("three members in alice's panel", members+` === 'alice,bob,carol' && document.getElementById('group-members-heading').textContent === '3 members'`)
	alice.screenshot("18-group-info")

	alice.do("add someone unknown", chromedp.SetValue(chromedp.ID("add-members-input"), "nobody"), chromedp.Click(chromedp.CSS("#add-members-form button[type=submit]")))
	alice.waitFor("the refusal in the panel, the input kept", `document.getElementById('group-info-error').textContent === 'Could not add nobody: no such user: nobody.' && document.getElementById('add-members-input').value === 'nobody'`)

	bob.convMenu("menu-group-info")
	bob.waitFor("bob's panel with three members", `document.getElementById('group-info').open && `+members+` === 'alice,bob,carol'`)
	if n := eval[int](bob, `document.querySelectorAll('#group-member-list .remove-member').length`); n != 0 {
		t.Fatalf("bob, who did not create the group, is offered Remove %d times", n)
	}

	alice.do("alice removes carol", chromedp.Click(chromedp.CSS(`#group-member-list > li[data-user="carol"] .remove-member`)))
	alice.confirm("Remove carol", true)
	carol.waitFor("the group gone from carol's list", fmt.Sprintf(`!document.querySelector(%q)`, convButton("Team")))
	bob.waitFor("bob sees carol removed", systemShown("alice removed carol"))
	bob.waitFor("bob's panel down to two", members+` === 'alice,bob'`)
}

// TestReadReceiptsSwitch: with read receipts off in bob's settings, alice is not told he read
// her message; once he turns them on again, she sees ✓✓ when he reads.
func TestReadReceiptsSwitch(t *testing.T) {
	n, pages := signedIn(t, "alice", "bob")
	alice, bob := pages[0], pages[1]
	alicePhone := testenv.Connect(t, n.URL(), "alice")

	setReceipts := func(on bool) {
		t.Helper()
		bob.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
		bob.waitFor("the settings panel", `document.getElementById('settings').open`)
		if eval[bool](bob, `document.getElementById('receipts-switch').checked`) != on {
			bob.do("flip the read-receipts switch", chromedp.Click(chromedp.ID("receipts-switch")))
		}
		want := "Your read receipts are hidden."
		if on {
			want = "Others see when you have read their messages."
		}
		bob.waitFor("the switch saved", fmt.Sprintf(`document.getElementById('receipts-status').textContent === %q && !document.getElementById('receipts-switch').disabled`, want))
		bob.do("close settings", chromedp.Click(chromedp.CSS("#settings .panel-close")))
		bob.waitFor("settings closed", `!document.getElementById('settings').open`)
	}

	setReceipts(false)
	alice.openDM("bob")
	alice.typeMessage("one", true)
	bob.waitFor("1 unread from alice", unreadShown("alice", 1, 1))
	bob.clickConversation("alice")
	bob.readToBottom(1) // the tab title clears with the server's badge: the read is applied
	convID := eval[string](alice, `decodeURIComponent(location.hash.slice(3))`)
	r, err := alicePhone.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: convID, Seq: 1})
	if err != nil {
		t.Fatalf("receipts: %v", err)
	}
	if r.ReadBy == nil || *r.ReadBy != 0 || len(r.Readers) != 0 {
		t.Fatalf("with receipts off, alice's message shows read by %v %v", r.ReadBy, r.Readers)
	}
	if eval[string](alice, `document.querySelector('#messages > li[data-seq="1"]').dataset.read`) != "false" {
		t.Fatal("alice's page shows ✓✓ although bob's read receipts are off")
	}

	setReceipts(true)
	alice.typeMessage("two", true)
	bob.readToBottom(2)
	alice.waitFor("✓✓ on alice's second message", present(msgSel(2)+`[data-read="true"]`))
}

// TestBlockUser: alice blocks bob from their DM's menu; bob's send is refused with a visible
// error and his text kept; alice's settings list him, and unblocking there lets his next message
// through. Blocking an unknown user is refused in words.
func TestBlockUser(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob")
	alice, bob := pages[0], pages[1]
	alice.openDM("bob")
	alice.typeMessage("hi", true)
	bob.waitFor("1 unread from alice", unreadShown("alice", 1, 1))
	bob.clickConversation("alice")
	bob.untilShown(1, 1)

	alice.convMenu("menu-block")
	alice.confirm("Block bob", true)
	alice.waitFor("the DM saying bob is blocked", `document.getElementById('conv-meta').textContent.startsWith('Direct message · you blocked bob')`)

	bob.typeMessage("hello?", true)
	bob.waitFor("the refusal under bob's message, his text kept", `(e => !!e && e.querySelector('.fail').textContent === 'Not sent: you cannot send to this user: a block stands between you.' && e.querySelector('.body').textContent === 'hello?')(document.querySelector('#messages > li[data-state="failed"]'))`)
	bob.screenshot("19-blocked-send")

	alice.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	blocked := `[...document.querySelectorAll('#blocked-list > li')].map(e => e.dataset.user).join(',')`
	alice.waitFor("bob in the blocked list", `document.getElementById('settings').open && `+blocked+` === 'bob' && document.getElementById('blocked-empty').hidden`)
	alice.screenshot("20-settings")
	alice.do("block someone unknown", chromedp.SetValue(chromedp.ID("block-user"), "nobody"), chromedp.Click(chromedp.CSS("#block-form button[type=submit]")))
	alice.waitFor("the refusal, in words", `/^Could not block nobody: .+\.$/.test(document.getElementById('settings-error').textContent) && document.getElementById('block-user').value === 'nobody'`)
	alice.do("unblock bob", chromedp.Click(chromedp.CSS(`#blocked-list > li[data-user="bob"] .unblock`)))
	alice.waitFor("nobody blocked", blocked+` === '' && !document.getElementById('blocked-empty').hidden`)
	alice.do("close settings", pressKey("Escape", 27, ""))
	alice.waitFor("settings closed, the DM still open", `!document.getElementById('settings').open && document.getElementById('conv-title').textContent === 'bob' && /^Direct message( · online)?$/.test(document.getElementById('conv-meta').textContent)`)

	bob.typeMessage("hello again", true)
	alice.waitFor("bob's message after the unblock", `[...document.querySelectorAll('#messages > li[data-seq]')].some(e => e.dataset.sender === 'bob' && e.querySelector('.body').textContent === 'hello again')`)
}

// TestSignOutThisDevice: alice signs out of one browser in its settings: that page is on sign-in,
// stays there after a reload, and its socket is closed; her other browser stays signed in and
// still gets bob's messages.
func TestSignOutThisDevice(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	laptop, desktop := b.newPage("alice-laptop"), b.newPage("alice-desktop")
	laptop.signIn(n.URL(), "alice")
	desktop.signIn(n.URL(), "alice")
	bobConn := testenv.Connect(t, n.URL(), "bob")
	metrics := promtest.URL(n.AdminURL() + "/metrics")
	promtest.WaitFor(t, metrics, waitTimeout, 3, "chatd_connections_open")

	laptop.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	laptop.waitFor("the settings panel", `document.getElementById('settings').open`)
	laptop.do("sign out of this device", chromedp.Click(chromedp.ID("sign-out")))
	signedOut := `!document.getElementById('login-view').hidden && document.getElementById('chat-view').hidden && localStorage.getItem('chatd.auth') === null`
	laptop.waitFor("the sign-in view", signedOut)
	promtest.WaitFor(t, metrics, waitTimeout, 1, "chatd_connections_closed_total", "code", "1000")
	promtest.WaitFor(t, metrics, waitTimeout, 2, "chatd_connections_open")
	laptop.do("reload", chromedp.Reload())
	laptop.waitFor("the page to start", `!document.getElementById('login-view').hidden || !document.getElementById('chat-view').hidden`)
	if !eval[bool](laptop, signedOut) {
		t.Fatal("after a reload the signed-out page is signed in again")
	}

	dm, err := bobConn.OpenDM(t.Context(), "alice")
	if err != nil {
		t.Fatalf("bob opens the dm: %v", err)
	}
	if _, err := bobConn.Send(t.Context(), dm.ID, "still there?"); err != nil {
		t.Fatalf("bob sends: %v", err)
	}
	desktop.waitFor("bob's message on alice's other browser", unreadShown("bob", 1, 1))
	promtest.WaitFor(t, metrics, waitTimeout, 2, "chatd_connections_open")
}

// TestDateSeparatorsAndLinks: messages of three days show a separator before each day's first
// message ("Yesterday", "Today"); addresses in a message are safe links, anything else stays text.
func TestDateSeparatorsAndLinks(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	testenv.Connect(t, n.URL(), "bob") // bob's account
	alice := testenv.Connect(t, n.URL(), "alice")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	const linky = `see https://example.com/a_(b)?q=1. or (http://example.org/x) but not javascript:alert(1) nor <b>bold</b> <a href="javascript:alert(2)">x</a>`
	for _, body := range []string{"ten days ago", "yesterday", linky, "later today"} {
		if _, err := alice.Send(ctx, dm.ID, body); err != nil {
			t.Fatalf("send %q: %v", body, err)
		}
	}
	// Back-date the first two in the store, before bob's page loads them.
	cfg := storage.Config{URI: env.MongoURI, Database: env.Database}
	now := time.Now()
	testenv.BackdateMessages(t, cfg, dm.ID, 1, 1, now.AddDate(0, 0, -10))
	testenv.BackdateMessages(t, cfg, dm.ID, 2, 2, now.AddDate(0, 0, -1))

	bob := newBrowser(t).newPage("bob")
	bob.signIn(n.URL(), "bob")
	bob.clickConversation("alice")
	bob.untilShown(1, 4)
	type item struct {
		Kind  string `json:"kind"`
		Label string `json:"label"`
	}
	got := eval[[]item](bob, `[...document.querySelectorAll('#messages > li')].filter(e => !e.classList.contains('divider')).map(e => e.classList.contains('day') ? {kind: 'day', label: e.textContent} : {kind: 'msg ' + e.dataset.seq, label: ''})`)
	var shape []string
	for _, it := range got {
		shape = append(shape, it.Kind)
	}
	if want := "day msg 1 day msg 2 day msg 3 msg 4"; strings.Join(shape, " ") != want {
		t.Fatalf("the list is %q, want %q", strings.Join(shape, " "), want)
	}
	if got[2].Label != "Yesterday" || got[4].Label != "Today" || got[0].Label == "" || got[0].Label == "Today" {
		t.Fatalf("the separators say %q, %q, %q", got[0].Label, got[2].Label, got[4].Label)
	}
	bob.screenshot("21-days-and-links")

	type link struct {
		Href, Text, Rel, Target string
	}
	links := eval[[]link](bob, `[...document.querySelectorAll('#messages a')].map(a => ({Href: a.getAttribute('href'), Text: a.textContent, Rel: a.rel, Target: a.target}))`)
	want := []link{
		{"https://example.com/a_(b)?q=1", "https://example.com/a_(b)?q=1", "noopener noreferrer", "_blank"},
		{"http://example.org/x", "http://example.org/x", "noopener noreferrer", "_blank"},
	}
	if fmt.Sprint(links) != fmt.Sprint(want) {
		t.Fatalf("links %+v, want %+v", links, want)
	}
	if got := eval[string](bob, `document.querySelector('#messages > li[data-seq="3"] .body').textContent`); got != linky {
		t.Fatalf("message 3 shows %q, want the text as sent", got)
	}
	if n := eval[int](bob, `document.querySelectorAll('#messages b, #messages [href^="javascript"]').length`); n != 0 {
		t.Fatalf("message 3 made %d elements out of its text", n)
	}
}

// memberPresence is a JavaScript expression: what the open group-info panel says under member u.
func memberPresence(u string) string {
	return fmt.Sprintf(`(document.querySelector('#group-member-list > li[data-user="%s"] .member-presence')?.textContent || '')`, u)
}

// TestGroupInfoCreatorAndPresence: only alice, who created the group, is offered Remove (for
// the others, not herself), and everyone's panel says who created it; the panel says who is
// online, and once carol has signed out, alice and bob see when she was last seen.
func TestGroupInfoCreatorAndPresence(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Team")
	removable := `[...document.querySelectorAll('#group-member-list > li')].filter(e => e.querySelector('.remove-member')).map(e => e.dataset.user).join(',')`

	alice.convMenu("menu-group-info")
	alice.waitFor("Remove for bob and carol in alice's panel, carol online", removable+` === 'bob,carol' && `+memberPresence("carol")+` === 'online' && `+memberPresence("bob")+` === 'online'`)
	bob.convMenu("menu-group-info")
	bob.waitFor("no Remove in bob's panel, alice named as the creator, carol online",
		removable+` === '' && document.querySelectorAll('#group-member-list > li').length === 3 && `+memberPresence("alice")+` === 'created the group · online' && `+memberPresence("carol")+` === 'online'`)
	bob.screenshot("25-group-info-presence")

	// Signing out closes carol's only socket (a page left for another address may stay, socket
	// and all, in the back-forward cache).
	carol.do("open the settings", chromedp.Click(chromedp.ID("open-settings")))
	carol.do("sign out", chromedp.Click(chromedp.ID("sign-out")))
	for _, p := range []*page{alice, bob} {
		p.waitFor("carol last seen", memberPresence("carol")+`.startsWith('last seen ')`)
	}
	if got := eval[string](alice, memberPresence("bob")); got != "online" {
		t.Fatalf("alice's panel says %q of bob, want online", got)
	}
}
