package web_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file drive search and mentions in the page: the search box over the list,
// the "@" offer in the composer, mentions shown as names and the "@" badge of the list.

// joseID is the user id dev-mode sign-in gives "José" (docs/PROTOCOL.md, the name rule).
const joseID = "u-d994e1d001886fe5"

// searchNode starts a node with a search index.
func searchNode(t *testing.T) *testenv.Node {
	t.Helper()
	cfg := testenv.NewEnv(t).NodeConfig()
	cfg.SearchDir = filepath.Join(t.TempDir(), "search")
	return testenv.StartNode(t, cfg)
}

// indexed waits until c's user finds the message seq of conv by query: the index is fed
// asynchronously, and the browser's search should not race it.
func indexed(t *testing.T, c *client.Conn, query, conv string, seq int64) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		r, err := c.Request(t.Context(), protocol.ClientFrame{Type: protocol.TypeSearch, Query: query})
		if err != nil {
			return err
		}
		if r.Hits == nil || !slices.ContainsFunc(*r.Hits, func(h protocol.SearchHit) bool { return h.ConversationID == conv && h.Seq == seq }) {
			return fmt.Errorf("%q does not find message %d yet", query, seq)
		}
		return nil
	})
}

// TestSearchFromTheListOpensTheHitInPlace: bob searches a word from the box over the list; the
// hit, with the word marked, opens his DM with alice at that message, 80 messages back, loaded
// around it (history around its seq, newer ones still to come) and focused. Then "Search in this
// conversation" narrows the box to the DM, and a search there is sent for the DM only.
func TestSearchFromTheListOpensTheHitInPlace(t *testing.T) {
	n := searchNode(t)
	alice := testenv.Connect(t, n.URL(), "alice")
	b := newBrowser(t)
	bob := b.newPage("bob")
	bob.signIn(n.URL(), "bob")
	dm, err := alice.OpenDM(t.Context(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := alice.Send(t.Context(), dm.ID, "the walrus arrives on Tuesday")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 80 {
		if _, err := alice.Send(t.Context(), dm.ID, fmt.Sprintf("filler %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	indexed(t, alice, "walrus", dm.ID, ack.Seq)
	bob.waitFor("the DM in the list", present(convButton("alice")))

	bob.do("search for walrus",
		chromedp.SendKeys(chromedp.ID("search-input"), "WALRUS"),
		chromedp.Click(chromedp.CSS("#search-form button[type=submit]")))
	hit := fmt.Sprintf(`#search-results button.hit[data-seq="%d"]`, ack.Seq)
	bob.waitFor("one hit, the word marked", present(hit)+fmt.Sprintf(` && document.querySelector(%q).querySelector('mark').textContent === 'walrus'`, hit)+
		` && document.querySelectorAll('#search-results .hit').length === 1`)
	bob.do("open the hit", chromedp.Click(chromedp.CSS(hit)))
	bob.waitFor("the message open in place and focused", fmt.Sprintf(
		`document.getElementById('conv-title').textContent === 'alice' && document.activeElement && document.activeElement.matches(%q) && document.getElementById('messages').dataset.hasAfter === 'true'`,
		msgSel(ack.Seq)))
	bob.screenshot("35-search-hit-open")

	// The conversation menu narrows the box to the open conversation.
	bob.convMenu("menu-search")
	bob.waitFor("the box narrowed to the DM, focused", `!document.getElementById('search-scope').hidden && document.getElementById('search-scope-text').textContent === 'In alice' && document.activeElement === document.getElementById('search-input')`)
	bob.do("search for filler 79 in the DM",
		chromedp.SetValue(chromedp.ID("search-input"), "filler 79"),
		chromedp.Click(chromedp.CSS("#search-form button[type=submit]")))
	bob.waitFor("the one message with both words", fmt.Sprintf(`document.querySelectorAll('#search-results .hit').length === 1 && !!document.querySelector('#search-results .hit[data-seq="%d"]')`, ack.Seq+80))
	if got := sentFramesOf(bob, protocol.TypeSearch); len(got) != 2 || got[1].ConversationID != dm.ID || got[0].ConversationID != "" {
		t.Errorf("bob's search frames %+v; want one over everything, then one in the DM", got)
	}
}

// TestMentionOffersMembersAndHighlightsThem: in a group, alice types "@Jo" in the composer; the
// page offers José by his display name, and Enter puts his mention in the draft. The message
// sent shows "@José" on both screens, highlighted on his, and his list's preview says "@José" too.
func TestMentionOffersMembersAndHighlightsThem(t *testing.T) {
	n := searchNode(t)
	b := newBrowser(t)
	alice, jose := b.newPage("alice"), b.newPage("José")
	alice.signIn(n.URL(), "alice")
	jose.signIn(n.URL(), "José")
	testenv.Connect(t, n.URL(), "Joan") // a member whose name also starts with Jo
	alice.createGroup("Team", joseID, "joan")
	alice.waitFor("José's name known", `document.getElementById('conv-meta').textContent.includes('José')`)

	alice.typeMessage("look @Jo", false)
	alice.waitFor("José and Joan offered", `(l => !l.hidden && [...l.querySelectorAll('[role=option]')].map(o => o.textContent).sort().join(',') === 'Joan,José')(document.getElementById('mention-results'))`)
	// The keyboard: down to José if Joan is first, then Enter picks him.
	if eval[string](alice, `document.querySelector('#mention-results [aria-selected=true]').textContent`) != "José" {
		alice.do("arrow down", pressKey("ArrowDown", 40, ""))
	}
	alice.waitFor("José selected", `document.querySelector('#mention-results [aria-selected=true]').textContent === 'José'`)
	alice.do("pick", pressKey("Enter", 13, "\r"))
	alice.waitFor("the token in the draft", fmt.Sprintf(`document.getElementById('composer-input').value === %q && document.getElementById('mention-results').hidden`, "look "+message.MentionToken(joseID)+" "))
	alice.typeMessage("please", true)

	jose.clickConversation("Team")
	jose.waitFor("the mention highlighted for José", `(s => !!s && s.textContent === '@José')(document.querySelector('#messages .mention.mention-me'))`)
	alice.waitFor("the mention shown as his name for alice, not highlighted", `(s => !!s && s.textContent === '@José' && !s.classList.contains('mention-me'))(document.querySelector('#messages .mention'))`)
	jose.waitFor("the list's preview showing the mention as his name, not its token", fmt.Sprintf(`(e => !!e && e.textContent === 'alice: look @José please')(document.querySelector(%q))`, convButton("Team")+" .conv-sub"))
	jose.screenshot("35-mention-highlighted")
}

// TestMentionBadgeCountsAndClears: alice mentions José twice in a group while he looks at
// another conversation; his list shows the "@" badge, said as two mentions; opening the group
// reads them, and the badge goes.
func TestMentionBadgeCountsAndClears(t *testing.T) {
	n := searchNode(t)
	b := newBrowser(t)
	jose := b.newPage("José")
	jose.signIn(n.URL(), "José")
	alice := testenv.Connect(t, n.URL(), "alice")
	testenv.Connect(t, n.URL(), "bob")
	jose.openDM("bob")
	g, err := alice.CreateGroup(t.Context(), "Team", []string{joseID})
	if err != nil {
		t.Fatal(err)
	}
	jose.waitFor("the group in the list", present(convButton("Team")))
	for _, body := range []string{"hi " + message.MentionToken(joseID), "plain", "again " + message.MentionToken(joseID)} {
		if _, err := alice.Send(t.Context(), g.ID, body); err != nil {
			t.Fatal(err)
		}
	}
	jose.waitFor("the @ badge, said as 2 mentions", fmt.Sprintf(`(b => !!b && !!b.querySelector('.mention-badge') && b.getAttribute('aria-label').includes('@ 2 mentioning you'))(document.querySelector(%q))`, convButton("Team")))
	jose.screenshot("35-mention-badge")
	jose.clickConversation("Team")
	jose.waitFor("the badge gone once read", fmt.Sprintf(`(b => !!b && !b.querySelector('.mention-badge') && !b.getAttribute('aria-label').includes('mentioning'))(document.querySelector(%q))`, convButton("Team")))
}
