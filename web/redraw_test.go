package web_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// mouseAt sends one mouse event of typ (moved, pressed or released, the left button) at the
// middle of the element sel, as a hand on a mouse does between the two halves of a click.
func mouseAt(typ input.DispatchMouseEventType, sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(r => [r.left + r.width / 2, r.top + r.height / 2])(document.querySelector(%q).getBoundingClientRect())`, sel)))
		if err != nil {
			return err
		}
		p := input.DispatchMouseEventParams{Type: typ, X: box[0], Y: box[1]}
		if typ != input.DispatchMouseEventTypeMouseMoved {
			p.Button, p.ClickCount = input.MouseButtonLeft, 1
		}
		_, err = cdp.Call(ctx, t, input.DispatchMouseEvent, p)
		return err
	})
}

// TestClickSurvivesRedraw: bob presses the mouse on the 👍 chip under his message; before he
// lets go, alice reacts with 🎉 and reads the message, which changes what bob's page shows of it
// (a new chip, his tick); the release still completes his click, and alice sees his 👍 join
// hers. The same for the message's menu button while alice takes her 🎉 away.
func TestClickSurvivesRedraw(t *testing.T) {
	_, alice, bob := twoInADM(t)
	bob.typeMessage("lunch?", true)
	alice.untilShown(1, 1)
	alice.openMessageMenu(1)
	alice.do("react with a thumbs up", chromedp.Click(chromedp.CSS(`#msg-menu .react-pick[data-emoji="👍"]`)))
	bob.waitFor("alice's reaction", chipIs(1, "👍", 1, false))

	chip := msgSel(1) + ` .chip[data-emoji="👍"]`
	bob.do("press on the chip", mouseAt(input.DispatchMouseEventTypeMouseMoved, chip), mouseAt(input.DispatchMouseEventTypeMousePressed, chip))
	alice.openMessageMenu(1)
	alice.do("react with a party popper", chromedp.Click(chromedp.CSS(`#msg-menu .react-pick[data-emoji="🎉"]`)))
	bob.waitFor("alice's second reaction and her read, while bob holds the button", chipIs(1, "🎉", 1, false)+` && `+tickIs(1, "Read"))
	bob.do("release on the chip", mouseAt(input.DispatchMouseEventTypeMouseReleased, chip))
	alice.waitFor("bob's thumbs up joining alice's", chipIs(1, "👍", 2, true))
	bob.waitFor("two thumbs, his pressed", chipIs(1, "👍", 2, true))

	button := msgSel(1) + " .msg-actions"
	bob.do("show the menu button", hoverCenter(msgSel(1)+" .bubble"))
	bob.waitFor("the menu button shown", fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).opacity === '1'`, button))
	bob.do("press on the menu button", mouseAt(input.DispatchMouseEventTypeMousePressed, button))
	alice.do("take her party popper away", chromedp.Click(chromedp.CSS(msgSel(1)+` .chip[data-emoji="🎉"]`)))
	bob.waitFor("the party popper gone while bob holds the button", fmt.Sprintf(`!document.querySelector(%q)`, msgSel(1)+` .chip[data-emoji="🎉"]`))
	bob.do("release on the menu button", mouseAt(input.DispatchMouseEventTypeMouseReleased, button))
	bob.waitFor("the message menu open", `!document.getElementById('msg-menu').hidden && document.activeElement === document.getElementById('msg-reply')`)
}

// TestRemoveSurvivesPresenceChange: alice, who created the group, presses the mouse on Remove
// beside carol in the group-info panel; before she lets go carol signs out, and her row changes to
// "last seen"; the release still completes the click: the confirm step opens, and once alice
// confirms, bob sees carol removed.
func TestRemoveSurvivesPresenceChange(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Team")
	alice.convMenu("menu-group-info")
	row := `#group-member-list > li[data-user="carol"]`
	alice.waitFor("carol online in the panel", fmt.Sprintf(`document.querySelector(%q)?.dataset.presence === 'online'`, row+" .member-presence"))

	remove := row + " .remove-member"
	alice.do("press on Remove", mouseAt(input.DispatchMouseEventTypeMouseMoved, remove), mouseAt(input.DispatchMouseEventTypeMousePressed, remove))
	// Signing out closes carol's only socket (leaving for another address may keep it, in the
	// back-forward cache).
	carol.do("open the settings", chromedp.Click(chromedp.ID("open-settings")))
	carol.do("sign out", chromedp.Click(chromedp.ID("sign-out")))
	alice.waitFor("carol's row saying she was last seen, while alice holds the button",
		fmt.Sprintf(`(document.querySelector(%q)?.dataset.presence || '').startsWith('last seen')`, row+" .member-presence"))
	alice.do("release on Remove", mouseAt(input.DispatchMouseEventTypeMouseReleased, remove))
	alice.confirm("Remove carol", true)
	bob.waitFor("bob sees carol removed", systemShown("alice removed carol"))
}
