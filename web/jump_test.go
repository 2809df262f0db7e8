package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// openJumpPicker presses the conversation's Jump button and waits for its picker.
func (p *page) openJumpPicker() {
	p.t.Helper()
	p.do("press Jump", chromedp.Click(chromedp.ID("jump-button")))
	p.waitFor("the jump picker", `document.getElementById('jump-picker').open`)
}

// jumpTo picks target in the open jump picker (the radio of that id) and confirms with its
// Jump button.
func (p *page) jumpTo(target string) {
	p.t.Helper()
	p.do("choose "+target, chromedp.Click(chromedp.ID(target)))
	p.do("confirm the jump", chromedp.Click(chromedp.ID("jump-go")))
	p.waitFor("the picker to close", `!document.getElementById('jump-picker').open`)
}

// windowIs is a JavaScript condition: the open conversation's loaded window is first..last.
func windowIs(first, last int64) string {
	return fmt.Sprintf(`document.getElementById('messages').dataset.firstSeq === '%d' && document.getElementById('messages').dataset.lastSeq === '%d'`, first, last)
}

// notRead is a JavaScript condition: own message seq shows a tick that is not Read.
func notRead(seq int64) string {
	return fmt.Sprintf(`(e => !!e && ['Sent', 'Delivered'].includes(e.getAttribute('aria-label')))(document.querySelector(%q))`, msgSel(seq)+" .tick")
}

// TestJumpPicker: the conversation header has no position slider but a Jump button; its picker
// moves only on an explicit confirm (choosing with the arrow keys moves nothing, Cancel moves
// nothing), and jumps to the oldest message, to the first message of a date, to the first unread
// and to the newest, each loaded as a window of range pages. What bob reads by jumping is what
// alice sees read: her newest message shows Read only once bob has jumped to it.
func TestJumpPicker(t *testing.T) {
	const total, readUpTo = 150, 120
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	alicePhone := testenv.Connect(t, n.URL(), "alice")
	bobPhone := testenv.Connect(t, n.URL(), "bob")
	dm, err := alicePhone.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= total; i++ {
		if _, err := alicePhone.Send(ctx, dm.ID, seedBody(i)); err != nil {
			t.Fatalf("seed message %d: %v", i, err)
		}
	}
	// Messages 1-50 were written twenty days ago, 51-100 ten days ago, the rest today.
	now := time.Now()
	noon := func(daysAgo int) time.Time {
		return time.Date(now.Year(), now.Month(), now.Day()-daysAgo, 12, 0, 0, 0, time.Local)
	}
	cfg := storage.Config{URI: env.MongoURI, Database: env.Database}
	testenv.BackdateMessages(t, cfg, dm.ID, 1, 50, noon(20))
	testenv.BackdateMessages(t, cfg, dm.ID, 51, 100, noon(10))
	if err := bobPhone.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: readUpTo}); err != nil {
		t.Fatalf("bob reads on his phone: %v", err)
	}
	testenv.Push(t, bobPhone, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeCursor && f.ReadSeq == readUpTo
	})

	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")
	alice.signIn(n.URL(), "alice")
	alice.clickConversation("bob")
	alice.waitFor("alice's newest message, not read", notRead(total))
	bob.signIn(n.URL(), "bob")
	bob.clickConversation("alice")
	bob.waitFor("bob's page opened at his first unread message", inView(readUpTo+1)+` && !!document.querySelector('#messages > li.divider')`)
	if eval[bool](bob, `!!document.querySelector('input[type=range], #jump-slider')`) {
		t.Fatal("the conversation still shows a position slider")
	}

	// Choosing is not jumping: arrows move through the choices, Cancel leaves everything as it was.
	before := eval[string](bob, `document.getElementById('messages').dataset.firstSeq + '-' + document.getElementById('messages').dataset.lastSeq`)
	bob.openJumpPicker()
	bob.waitFor("the picker offering the 30 unread, focused", `document.activeElement === document.getElementById('jump-unread') && document.getElementById('jump-unread').checked && document.getElementById('jump-unread-label').textContent.includes('30 unread')`)
	bob.screenshot("22-jump-picker")
	bob.do("arrow through the choices", pressKey("ArrowDown", 40, ""), pressKey("ArrowDown", 40, ""))
	bob.waitFor("another choice made", `!document.getElementById('jump-unread').checked`)
	if got := eval[string](bob, `document.getElementById('messages').dataset.firstSeq + '-' + document.getElementById('messages').dataset.lastSeq`); got != before || !eval[bool](bob, `document.getElementById('jump-picker').open`) {
		t.Fatalf("choosing with the arrows moved the conversation from %s to %s (or closed the picker)", before, got)
	}
	bob.do("cancel", chromedp.Click(chromedp.CSS(`#jump-picker .panel-actions [data-close]`)))
	bob.waitFor("the picker closed", `!document.getElementById('jump-picker').open`)
	if got := eval[string](bob, `document.getElementById('messages').dataset.firstSeq + '-' + document.getElementById('messages').dataset.lastSeq`); got != before {
		t.Fatalf("Cancel moved the conversation from %s to %s", before, got)
	}

	// The oldest message: the first page, at the top.
	bob.openJumpPicker()
	bob.jumpTo("jump-oldest")
	bob.waitFor("the first page with message 1 at the top", windowIs(1, 50)+` && `+inView(1)+` && document.getElementById('messages').dataset.hasBefore === 'false'`)
	alice.waitFor("alice's newest message still not read", notRead(total))

	// A date: the first message written on it, under its day's separator at the top of the pane.
	bob.openJumpPicker()
	tenDaysAgo := noon(10).Format("2006-01-02")
	bob.do("pick the date ten days ago", chromedp.Click(chromedp.ID("jump-on-date")), chromedp.SetValue(chromedp.ID("jump-date"), tenDaysAgo))
	bob.do("confirm the jump", chromedp.Click(chromedp.ID("jump-go")))
	bob.waitFor("the picker to close", `!document.getElementById('jump-picker').open`)
	bob.waitFor("message 51 at the top under its day's separator, in a window of its own", inView(51)+` && (() => {
		const e = document.querySelector('#messages > li[data-seq="51"]'), day = e.previousElementSibling;
		const top = document.getElementById('scroller').getBoundingClientRect().top;
		const list = document.getElementById('messages').dataset;
		return day.classList.contains('day') && Math.abs(day.getBoundingClientRect().top - top) < 30 && list.firstSeq !== '1' && list.lastSeq !== '150';
	})()`)
	bob.screenshot("23-jumped-to-date")

	// The first unread: under the new-messages line.
	bob.openJumpPicker()
	bob.jumpTo("jump-unread")
	bob.waitFor("the new-messages line at the top, the first unread under it", `(() => {
		const d = document.querySelector('#messages > li.divider');
		if (!d) return false;
		const top = document.getElementById('scroller').getBoundingClientRect().top;
		return Math.abs(d.getBoundingClientRect().top - top) < 30 && Number(d.nextElementSibling.dataset.seq) > 120;
	})()`)
	alice.waitFor("alice's newest message still not read", notRead(total))

	// The newest: alice sees bob read her last message.
	bob.openJumpPicker()
	bob.jumpTo("jump-newest")
	bob.waitFor("the newest message in view", inView(total)+` && document.getElementById('messages').dataset.hasAfter === 'false'`)
	alice.waitFor("alice's newest message read", tickIs(total, "Read"))
	bob.waitFor("nothing unread for bob", `document.title === 'chatd'`)
}
