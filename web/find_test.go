package web_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// foundIn is a JavaScript expression: the people a finder's list shows, "<name> <user id>" each,
// comma separated.
func foundIn(results string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#%s li.person')].map(e => e.querySelector('.person-name').textContent + ' ' + e.dataset.user).join(',')`, results)
}

// chipsIn is a JavaScript expression: the names on the chips of a group form, in order.
func chipsIn(list string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#%s > li')].map(e => e.textContent.replace(/×$/, '')).join(',')`, list)
}

// TestFindPeopleForGroups: Alice makes a group by picking people by name in the new-group form
// ("jan" finds Mary Jane, chosen with the keyboard; "jos" finds José, chosen with a click; Zoë,
// picked by mistake, taken out again by her chip's button), and the frame carries their ids.
// Mary Jane and José see the group by its name with its members by name. Alice adds Zoë by
// name in group info: Zoë gets the group, José sees "Alice added Zoë", Mary Jane's group info
// lists all four by name. José blocks Mary Jane by name in his settings; her "Message a user"
// of José then says only that she cannot message José, by name.
func TestFindPeopleForGroups(t *testing.T) {
	_, pages := signedIn(t, "Alice", "Mary Jane", "José", "Zoë")
	alice, mary, jose, zoe := pages[0], pages[1], pages[2], pages[3]
	for _, p := range pages {
		p.waitFor("the page greeting "+p.name, fmt.Sprintf(`document.getElementById('me').textContent === %q`, p.name))
	}
	maryID, joseID, zoeID := idOf(t, "Mary Jane"), idOf(t, "José"), idOf(t, "Zoë")

	alice.do("open the new-group form", chromedp.Click(chromedp.CSS("#group-details summary")),
		chromedp.SendKeys(chromedp.ID("group-name"), "Amigos"))
	alice.do("look for jan", chromedp.SendKeys(chromedp.ID("group-members"), "jan"))
	alice.waitFor("Mary Jane found by jan", fmt.Sprintf(`%s === %q && document.getElementById('group-members').getAttribute('aria-expanded') === 'true'`, foundIn("group-results"), "Mary Jane "+maryID))
	alice.do("choose Mary Jane with the keyboard", pressKey("ArrowDown", 40, ""), pressKey("Enter", 13, "\r"))
	alice.waitFor("a chip for Mary Jane, the box empty, the form not sent", fmt.Sprintf(`%s === 'Mary Jane' && document.getElementById('group-members').value === '' && document.getElementById('group-results').hidden && document.getElementById('conv-body').hidden`, chipsIn("group-picked")))

	alice.do("look for jos", chromedp.SendKeys(chromedp.ID("group-members"), "jos"))
	alice.waitFor("José found by jos", fmt.Sprintf(`%s === %q`, foundIn("group-results"), "José "+joseID))
	alice.do("click José", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#group-results li[data-user=%q]`, joseID))))
	alice.waitFor("chips for Mary Jane and José", chipsIn("group-picked")+` === 'Mary Jane,José'`)

	alice.do("look for zo", chromedp.SendKeys(chromedp.ID("group-members"), "zo"))
	alice.waitFor("Zoë found by zo", fmt.Sprintf(`%s === %q`, foundIn("group-results"), "Zoë "+zoeID))
	alice.do("pick Zoë", pressKey("ArrowDown", 40, ""), pressKey("Enter", 13, "\r"))
	alice.waitFor("three chips", chipsIn("group-picked")+` === 'Mary Jane,José,Zoë'`)
	alice.screenshot("28-group-picked-by-name")
	alice.do("take Zoë out", chromedp.Click(chromedp.CSS(`#group-picked button[aria-label="Remove Zoë"]`)))
	alice.waitFor("Mary Jane and José left, the focus in the box", chipsIn("group-picked")+` === 'Mary Jane,José' && document.activeElement.id === 'group-members'`)

	alice.do("create the group", chromedp.Click(chromedp.CSS("#group-form button[type=submit]")))
	alice.waitFor("the group open, the chips gone", `document.getElementById('conv-title').textContent === 'Amigos' && document.getElementById('group-picked').hidden`)
	created := sentFramesOf(alice, "create_group")
	if len(created) != 1 || !slices.Equal(created[0].Members, []string{maryID, joseID}) {
		t.Fatalf("create_group frames sent: %+v; want one with members [%s %s]", created, maryID, joseID)
	}

	header := func(names ...string) string {
		return fmt.Sprintf(`(m => m.startsWith('%d members: ') && %q.split(',').every(x => m.includes(x)) && !/u-|mary-jane|alice/.test(m))(document.getElementById('conv-meta').textContent)`, len(names), strings.Join(names, ","))
	}
	for _, p := range []*page{mary, jose} {
		p.clickConversation("Amigos")
		p.waitFor("the members by name in the header", header("Alice", "José", "Mary Jane"))
	}

	// A third by name in group info.
	alice.convMenu("menu-group-info")
	alice.waitFor("group info", `document.getElementById('group-info').open && document.activeElement.id === 'add-members-input'`)
	alice.do("look for zo", chromedp.SendKeys(chromedp.ID("add-members-input"), "zo"))
	alice.waitFor("Zoë found by zo", fmt.Sprintf(`%s === %q`, foundIn("add-results"), "Zoë "+zoeID))
	alice.do("choose Zoë with the keyboard", pressKey("ArrowDown", 40, ""), pressKey("Enter", 13, "\r"))
	alice.waitFor("a chip for Zoë", chipsIn("add-picked")+` === 'Zoë' && document.getElementById('add-members-input').value === ''`)
	alice.do("add", chromedp.Click(chromedp.CSS("#add-members-form button[type=submit]")))
	alice.waitFor("four members in the panel, the chip gone", `document.getElementById('group-members-heading').textContent === '4 members' && document.getElementById('add-picked').hidden`)
	added := sentFramesOf(alice, "add_members")
	if len(added) != 1 || !slices.Equal(added[0].Members, []string{zoeID}) {
		t.Fatalf("add_members frames sent: %+v; want one with members [%s]", added, zoeID)
	}

	zoe.clickConversation("Amigos")
	zoe.waitFor("the members by name in Zoë's header", header("Alice", "José", "Mary Jane", "Zoë"))
	jose.waitFor("José sees Zoë added, by name", systemShown("Alice added Zoë"))
	jose.waitFor("four members by name in José's header", header("Alice", "José", "Mary Jane", "Zoë"))
	mary.convMenu("menu-group-info")
	members := `[...document.querySelectorAll('#group-member-list .member-name')].map(e => e.textContent).sort().join(',')`
	mary.waitFor("the members by name in Mary Jane's group info", members+` === 'Alice,José,Mary Jane (you),Zoë'`)

	// Block a user by name.
	jose.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	jose.waitFor("the settings panel", `document.getElementById('settings').open`)
	jose.do("look for ma", chromedp.SendKeys(chromedp.ID("block-user"), "ma"))
	jose.waitFor("Mary Jane found by ma", fmt.Sprintf(`%s === %q`, foundIn("block-results"), "Mary Jane "+maryID))
	jose.do("click Mary Jane", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#block-results li[data-user=%q]`, maryID))))
	jose.waitFor("her name in the box, nobody blocked yet", `document.getElementById('block-user').value === 'Mary Jane' && document.getElementById('block-results').hidden && document.querySelectorAll('#blocked-list > li').length === 0`)
	jose.do("block", chromedp.Click(chromedp.CSS("#block-form button[type=submit]")))
	jose.waitFor("Mary Jane in the blocked list by name", fmt.Sprintf(`(e => !!e && e.querySelector('.member-name').textContent === 'Mary Jane')(document.querySelector('#blocked-list > li[data-user=%q]')) && document.getElementById('block-user').value === ''`, maryID))
	if blocks := sentFramesOf(jose, "block_user"); len(blocks) != 1 || blocks[0].UserID != maryID {
		t.Fatalf("block_user frames sent: %+v; want one for %s", blocks, maryID)
	}

	// Mary Jane, blocked, finds José and tries to message him: she learns nothing of the block,
	// and he is named, never shown by id.
	mary.do("close group info", pressKey("Escape", 27, ""))
	mary.waitFor("group info closed", `!document.getElementById('group-info').open`)
	mary.do("look for jos", chromedp.SendKeys(chromedp.ID("dm-user"), "jos"))
	mary.waitFor("José found by jos", fmt.Sprintf(`%s === %q`, foundIn("dm-results"), "José "+joseID))
	mary.do("pick José and open", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dm-results li[data-user=%q]`, joseID))),
		chromedp.Click(chromedp.CSS("#dm-form button[type=submit]")))
	mary.waitFor("a refusal that names José and says nothing of a block", fmt.Sprintf(`(t => t === 'You cannot message José.' && !t.includes(%q) && !/block/i.test(t))(document.getElementById('sidebar-error').textContent)`, joseID))
	mary.screenshot("29-blocked-open-dm")

	// A group with José: refused in the server's words, with his name in place of his id.
	mary.do("open the new-group form", chromedp.Click(chromedp.CSS("#group-details summary")),
		chromedp.SendKeys(chromedp.ID("group-name"), "Just us"), chromedp.SendKeys(chromedp.ID("group-members"), "jos"))
	mary.waitFor("José found for the group", fmt.Sprintf(`%s === %q`, foundIn("group-results"), "José "+joseID))
	mary.do("pick José and create", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#group-results li[data-user=%q]`, joseID))),
		chromedp.Click(chromedp.CSS("#group-form button[type=submit]")))
	mary.waitFor("the refusal, naming José", fmt.Sprintf(`(t => t === 'no such user: José' && !t.includes(%q))(document.getElementById('sidebar-error').textContent)`, joseID))
}
