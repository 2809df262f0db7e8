package web_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/testenv"
)

// fakeNotifications stands in for the browser's Notification (a headless browser cannot grant
// the permission) and for the tab's visibility: window.__notes lists the notifications the page
// made, window.__setHidden(true) hides the tab as switching away from it does.
const fakeNotifications = `(() => {
	window.__notes = [];
	class FakeNotification {
		constructor(title, options) {
			this.title = title;
			this.body = (options && options.body) || '';
			this.tag = (options && options.tag) || '';
			this.closed = false;
			window.__notes.push(this);
		}
		close() { this.closed = true; if (this.onclose) this.onclose(); }
		static requestPermission() { FakeNotification.permission = 'granted'; return Promise.resolve('granted'); }
	}
	FakeNotification.permission = 'default';
	window.Notification = FakeNotification;
	Object.defineProperty(Document.prototype, 'visibilityState', { configurable: true, get() { return window.__hidden ? 'hidden' : 'visible'; } });
	Object.defineProperty(Document.prototype, 'hidden', { configurable: true, get() { return !!window.__hidden; } });
	window.__setHidden = (hidden) => { window.__hidden = hidden; document.dispatchEvent(new Event('visibilitychange')); };
})()`

// stubNotifications makes every document the page loads start with fakeNotifications.
func (p *page) stubNotifications() {
	p.t.Helper()
	p.do("stub notifications", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdpage.AddScriptToEvaluateOnNewDocument, cdpage.AddScriptToEvaluateOnNewDocumentParams{Source: fakeNotifications})
		return err
	}))
}

// notesAre is a JavaScript condition: the page made exactly these notifications ("title|body"),
// in order.
func notesAre(t *testing.T, notes ...string) string {
	return fmt.Sprintf(`JSON.stringify(window.__notes.map(n => n.title + '|' + n.body)) === %q`, mustJSON(t, notes))
}

// faviconShows is a JavaScript condition: the tab's icon is a drawn PNG showing n unread.
func faviconShows(n int) string {
	return fmt.Sprintf(`(l => l.href.startsWith('data:image/png;base64,') && l.dataset.unread === '%d')(document.getElementById('favicon'))`, n)
}

// TestDesktopNotifications: alice turns on "Notify me" in her settings (the browser's permission
// is asked from that click) and hides her tab. bob's message in their DM brings her a desktop
// notification; bob's message in a group she muted does not, nor does her own message from her
// phone, nor bob's next message once her tab is visible again. The tab's icon counts her unread
// messages, and a click on the notification opens the DM.
func TestDesktopNotifications(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")
	alice.stubNotifications()
	alice.signIn(n.URL(), "alice")
	bob.signIn(n.URL(), "bob")
	alice.waitFor("a plain tab icon", faviconShows(0))

	alice.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	alice.do("turn on Notify me", chromedp.Click(chromedp.ID("notify-switch")))
	alice.waitFor("notifications on, permission asked", `document.getElementById('notify-switch').checked && Notification.permission === 'granted' && document.getElementById('notify-status').textContent === 'You are notified of new messages while this tab is hidden.'`)
	alice.do("close settings", chromedp.Click(chromedp.CSS(`#settings [data-close]`)))

	alice.createGroup("Team", "bob")
	alice.convMenu("menu-notify-nothing")
	alice.waitFor("Team muted in the list", present(convButton("Team")+" .conv-muted"))
	alice.openDM("bob")
	alice.clickConversation("Team")
	bob.clickConversation("Team")
	alice.do("hide alice's tab", chromedp.Evaluate[chromedp.Void](`window.__setHidden(true)`))

	bob.typeMessage("in the muted group", true)
	alice.waitFor("bob's group message arrived", previewIs("Team", "bob: in the muted group", 1))
	alicePhone := testenv.Connect(t, n.URL(), "alice")
	dm, err := alicePhone.OpenDM(t.Context(), "bob")
	if err != nil {
		t.Fatalf("alice's phone opens the DM: %v", err)
	}
	if _, err := alicePhone.Send(t.Context(), dm.ID, "from my phone"); err != nil {
		t.Fatalf("alice sends from her phone: %v", err)
	}
	alice.waitFor("alice's own message arrived", previewIs("bob", "You: from my phone", 0))
	bob.clickConversation("alice")
	bob.typeMessage("are you there?", true)
	alice.waitFor("one notification, for bob's DM message", notesAre(t, "bob|are you there?")+fmt.Sprintf(` && window.__notes[0].tag === %q`, dm.ID))
	alice.waitFor("the tab's icon and title counting 2 unread", faviconShows(2)+` && document.title === '(2) chatd'`)

	alice.do("show alice's tab", chromedp.Evaluate[chromedp.Void](`window.__setHidden(false)`))
	alice.waitFor("the group read, now that it is seen", faviconShows(1))
	bob.typeMessage("still there?", true)
	alice.waitFor("bob's message arrived", previewIs("bob", "bob: still there?", 2))
	alice.waitFor("no notification while the tab is visible", notesAre(t, "bob|are you there?"))

	alice.do("click the notification", chromedp.Evaluate[chromedp.Void](`window.__notes[0].onclick(new Event('click'))`))
	alice.waitFor("the DM open, the notification gone", `document.getElementById('conv-title').textContent === 'bob' && window.__notes[0].closed`)
	alice.waitFor("everything read: a plain icon again", faviconShows(0))
}
