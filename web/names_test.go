package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/auth"
)

// idOf is the user id a dev-mode sign-in derives from a display name.
func idOf(t *testing.T, name string) string {
	t.Helper()
	id, _, err := auth.UserIDFromName(name)
	if err != nil {
		t.Fatalf("user id of %q: %v", name, err)
	}
	return id
}

// send types text into the open conversation's composer the way an input method does, and
// sends it.
func (p *page) send(text string) {
	p.t.Helper()
	p.do("send "+text, chromedp.Focus(chromedp.ID("composer-input")), insertText(text), pressKey("Enter", 13, "\r"))
}

// lastSeqShown is the seq of the newest message the open conversation shows.
func lastSeqShown(p *page) int64 {
	p.t.Helper()
	return eval[int64](p, `Number([...document.querySelectorAll('#messages > li[data-seq]')].pop()?.dataset.seq || 0)`)
}

// TestDisplayNames: José, Zoë and 李雷 sign in with their names and see each other by name:
// José finds Zoë by typing the start of her name and opens a DM from the list; 李雷 opens one
// with José by typing his user id. DM titles, list previews, group members, senders and readers
// all show names, never ids. Zoë changes her name in her settings and the others see the new
// one at once; a name the server refuses is told in its words; after a reload the names come back.
func TestDisplayNames(t *testing.T) {
	_, pages := signedIn(t, "José", "Zoë", "李雷")
	jose, zoe, lilei := pages[0], pages[1], pages[2]
	for _, p := range pages {
		p.waitFor("the page greeting "+p.name, fmt.Sprintf(`document.getElementById('me').textContent === %q`, p.name))
	}
	joseID, zoeID := idOf(t, "José"), idOf(t, "Zoë")

	// Find a person by name.
	jose.do("type the start of Zoë's name", chromedp.SendKeys(chromedp.ID("dm-user"), "zo"))
	people := `[...document.querySelectorAll('#dm-results li.person')].map(e => e.querySelector('.person-name').textContent + ' ' + e.dataset.user).join(',')`
	jose.waitFor("Zoë found", fmt.Sprintf(`%s === %q && document.getElementById('dm-user').getAttribute('aria-expanded') === 'true'`, people, "Zoë "+zoeID))
	jose.screenshot("26-find-a-person")
	jose.do("choose Zoë with the keyboard", pressKey("ArrowDown", 40, ""), pressKey("Enter", 13, "\r"))
	jose.waitFor("the DM with Zoë open, titled by her name", `document.getElementById('conv-title').textContent === 'Zoë' && document.getElementById('dm-results').hidden && document.getElementById('dm-user').value === ''`)
	jose.send("¡Hola!")
	zoe.waitFor("José's DM in Zoë's list by name", previewIs("José", "José: ¡Hola!", 1))
	zoe.clickConversation("José")

	// A user id can still be typed.
	lilei.do("type José's id", chromedp.SetValue(chromedp.ID("dm-user"), joseID), chromedp.Click(chromedp.CSS("#dm-form button[type=submit]")))
	lilei.waitFor("the DM with José open, titled by his name", `document.getElementById('conv-title').textContent === 'José'`)
	lilei.send("你好")
	jose.waitFor("李雷's DM in José's list by name", previewIs("李雷", "李雷: 你好", 1))

	// A group: members, senders and readers by name.
	lilei.createGroup("Amigos", joseID, zoeID)
	zoe.clickConversation("Amigos")
	jose.clickConversation("Amigos")
	lilei.send("大家好")
	zoe.waitFor("李雷's message under his name", `[...document.querySelectorAll('#messages > li[data-sender]')].some(e => e.querySelector('.sender')?.textContent === '李雷' && e.querySelector('.body').textContent === '大家好')`)
	for _, p := range []*page{zoe, jose} {
		p.waitFor("the members by name in the header", `(m => m.startsWith('3 members: ') && ['José', 'Zoë', '李雷'].every(x => m.includes(x)) && !m.includes('u-'))(document.getElementById('conv-meta').textContent)`)
	}
	lilei.waitFor("read by José and Zoë, by name", fmt.Sprintf(`(e => !!e && e.getAttribute('aria-label') === 'Read by 2' && e.title.includes('José') && e.title.includes('Zoë'))(document.querySelector(%q))`, msgSel(lastSeqShown(lilei))+" .tick"))
	zoe.convMenu("menu-group-info")
	members := `[...document.querySelectorAll('#group-member-list .member-name')].map(e => e.textContent).sort().join(',')`
	zoe.waitFor("the members by name in group info, 李雷 its creator", members+` === 'José,Zoë (you),李雷' && `+memberPresence(idOf(t, "李雷"))+`.startsWith('created the group')`)
	zoe.do("close group info", chromedp.Click(chromedp.CSS(`#group-info [data-close]`)))

	// Zoë renames herself; the others see it at once.
	zoe.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	zoe.waitFor("her name in the settings", `document.getElementById('name-input').value === 'Zoë'`)
	zoe.do("rename", chromedp.SetValue(chromedp.ID("name-input"), "Zoë  Quinn"), chromedp.Click(chromedp.CSS("#name-form button[type=submit]")))
	zoe.waitFor("saved", `document.getElementById('name-status').textContent === 'Saved. Others see your new name.' && document.getElementById('me').textContent === 'Zoë Quinn'`)
	jose.waitFor("the new name in José's list and group header", fmt.Sprintf(`!!document.querySelector(%q) && document.getElementById('conv-meta').textContent.includes('Zoë Quinn')`, convButton("Zoë Quinn")))
	lilei.waitFor("the new name in 李雷's group header", `document.getElementById('conv-meta').textContent.includes('Zoë Quinn')`)
	zoe.do("a name the server refuses", chromedp.SetValue(chromedp.ID("name-input"), "😀"), chromedp.Click(chromedp.CSS("#name-form button[type=submit]")))
	zoe.waitFor("the refusal in the server's words, the text kept", `document.getElementById('name-status').textContent.startsWith('Could not change your name: a name must be') && document.getElementById('name-input').value === '😀' && document.getElementById('me').textContent === 'Zoë Quinn'`)

	jose.do("reload", chromedp.Reload())
	jose.waitConnected()
	jose.waitFor("the names again after a reload", fmt.Sprintf(`!!document.querySelector(%q) && !!document.querySelector(%q) && document.getElementById('me').textContent === 'José'`, convButton("Zoë Quinn"), convButton("李雷")))
	jose.screenshot("27-names")
	if ids := eval[string](jose, `(document.getElementById('conv-list').innerText.match(/u-[0-9a-f]{16}/) || [''])[0]`); ids != "" {
		t.Fatalf("José's list shows the user id %s", ids)
	}
}
