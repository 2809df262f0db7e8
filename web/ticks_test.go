package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// groupTick is a JavaScript condition: own message seq of a group shows a read tick that says it
// was read by n, with text ("Read by n" under the newest own message, ✓✓ under older ones).
func groupTick(seq int64, n int, text string) string {
	return fmt.Sprintf(`(e => !!e && e.closest('li').dataset.readBy === '%d' && e.classList.contains('read') && e.getAttribute('aria-label') === 'Read by %d' && e.textContent === %q)(document.querySelector(%q))`,
		n, n, text, msgSel(seq)+" .tick")
}

// TestGroupReadTicksHold: in a group of three, every message of Alice's that the others have read
// shows it, not only her newest: while they have not looked, each shows ✓; as each reads, every
// one counts them; after she deletes a newer message for everyone, and after a reload, the counts
// stay. A read tick differs from a sent one in shape, not only colour, and is large enough to see
// on a phone, where a reload starts at the list.
func TestGroupReadTicksHold(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob", "carol")
	alice, bob, carol := pages[0], pages[1], pages[2]
	alice.createGroup("Trio", "bob", "carol")
	for i, text := range []string{"one", "two", "three"} {
		alice.send(text)
		alice.waitFor("message "+text+" confirmed", present(msgSel(int64(i+1))+`[data-state="sent"]`))
	}
	for seq := int64(1); seq <= 3; seq++ {
		alice.waitFor(fmt.Sprintf("✓ on message %d, read by nobody yet", seq), fmt.Sprintf(`(e => !!e && e.getAttribute('aria-label') === 'Sent' && e.textContent === '✓')(document.querySelector(%q))`, msgSel(seq)+" .tick"))
	}
	sentStyle := eval[[]string](alice, fmt.Sprintf(`(s => [s.borderTopStyle, s.fontWeight])(getComputedStyle(document.querySelector(%q)))`, msgSel(1)+" .tick"))

	bob.clickConversation("Trio")
	bob.untilShown(1, 3)
	alice.waitFor("read by 1 on every message", groupTick(1, 1, "✓✓")+" && "+groupTick(2, 1, "✓✓")+" && "+groupTick(3, 1, "Read by 1"))
	carol.clickConversation("Trio")
	carol.untilShown(1, 3)
	alice.waitFor("read by 2 on every message", groupTick(1, 2, "✓✓")+" && "+groupTick(2, 2, "✓✓")+" && "+groupTick(3, 2, "Read by 2"))
	alice.waitFor("the readers named on an older message", fmt.Sprintf(`(e => e.title.includes('bob') && e.title.includes('carol'))(document.querySelector(%q))`, msgSel(1)+" .tick"))
	readStyle := eval[[]string](alice, fmt.Sprintf(`(s => [s.borderTopStyle, s.fontWeight])(getComputedStyle(document.querySelector(%q)))`, msgSel(1)+" .tick"))
	if readStyle[0] == sentStyle[0] || readStyle[0] == "none" {
		t.Fatalf("a read tick (border %s, weight %s) has the shape of a sent one (border %s, weight %s): only colour tells them apart", readStyle[0], readStyle[1], sentStyle[0], sentStyle[1])
	}
	alice.screenshot("30-group-read-ticks")

	// A newer message, read, then deleted for everyone: the older ones keep their counts.
	alice.send("oops")
	alice.waitFor("the fourth message read by 2", groupTick(4, 2, "Read by 2")+" && "+groupTick(3, 2, "✓✓"))
	alice.openMessageMenu(4)
	alice.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	alice.confirm("Delete for everyone", true)
	alice.waitFor("the tombstone", present(msgSel(4)+" .body.deleted"))
	alice.waitFor("every message still read by 2 after the delete", groupTick(1, 2, "✓✓")+" && "+groupTick(2, 2, "✓✓")+" && "+groupTick(3, 2, "Read by 2"))

	alice.do("reload", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("every message read by 2 after a reload", groupTick(1, 2, "✓✓")+" && "+groupTick(2, 2, "✓✓")+" && "+groupTick(3, 2, "Read by 2"))

	// A phone: ticks large enough to see, and a reload starts at the list.
	alice.do("a phone", chromedp.EmulateViewport(phoneWidth, phoneHeight, chromedp.EmulateTouch))
	if px := eval[float64](alice, fmt.Sprintf(`parseFloat(getComputedStyle(document.querySelector(%q)).fontSize)`, msgSel(1)+" .tick")); px < 16 {
		t.Fatalf("a tick is set at %.1f px on a phone; want at least 16", px)
	}
	alice.screenshot("31-phone-read-ticks")
	alice.do("reload on the phone", chromedp.Reload())
	alice.waitConnected()
	alice.waitFor("the list, not the conversation, after a reload on a phone", fmt.Sprintf(`!!document.querySelector(%q) && getComputedStyle(document.getElementById('sidebar')).display !== 'none' && getComputedStyle(document.getElementById('conversation')).display === 'none' && location.hash === ''`, convButton("Trio")))
	alice.clickConversation("Trio")
	alice.waitFor("the group opens from the list", `document.getElementById('conv-title').textContent === 'Trio' && getComputedStyle(document.getElementById('sidebar')).display === 'none'`)
}
