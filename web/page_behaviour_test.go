package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// These tests drive what issue 15 found a person trips over: ticks after a reload, text that
// does not fit, sends that need a hand to get through, and activity the page did not show.

// dmScene is one browser page and one plain client in a DM, on a fresh node.
type dmScene struct {
	node *testenv.Node
	page *page
	peer *client.Conn
	dm   protocol.Conversation
	ctx  context.Context
	link *testenv.FaultProxy // between the page and the node, if the scene was started proxied
}

// startDM signs the page in as user, connects peer as a client and opens their DM on the page.
// If proxied, the page reaches the node through a FaultProxy (the scene's link) that the test
// breaks, and it expects the network errors that follow.
func startDM(t *testing.T, cfg func(*testenv.Env) *testenv.Node, user, peer string, proxied bool) dmScene {
	t.Helper()
	env := testenv.NewEnv(t)
	n := cfg(&env)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	peerConn := testenv.Connect(t, n.URL(), peer)
	p := newBrowser(t).newPage(user)
	url := n.URL()
	var link *testenv.FaultProxy
	if proxied {
		link = testenv.StartFaultProxy(t, n.Addr())
		url = "http://" + link.Addr()
		p.allowNetworkErrors = true
	}
	p.signIn(url, user)
	p.openDM(peer)
	dm, err := peerConn.OpenDM(ctx, user)
	if err != nil {
		t.Fatalf("open the dm from %s: %v", peer, err)
	}
	return dmScene{node: n, page: p, peer: peerConn, dm: dm, ctx: ctx, link: link}
}

func defaultNode(t *testing.T) func(*testenv.Env) *testenv.Node {
	return func(env *testenv.Env) *testenv.Node { return testenv.StartNode(t, env.NodeConfig()) }
}

// send has the client send n messages, "<prefix> 001" and on.
func (s dmScene) send(t *testing.T, prefix string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if _, err := s.peer.Send(s.ctx, s.dm.ID, fmt.Sprintf("%s %03d", prefix, i)); err != nil {
			t.Fatalf("send %s %d: %v", prefix, i, err)
		}
	}
}

// maxReadSent is the highest read cursor the page has sent since frame index from.
func maxReadSent(p *page, from int) int64 {
	var hi int64
	for _, raw := range p.sentFrames()[from:] {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) == nil && f.Type == protocol.TypeRead && f.Seq > hi {
			hi = f.Seq
		}
	}
	return hi
}

// TestReadTicksAfterReload (issue 15, defect 1): carol's message that alice read keeps its ✓✓
// after carol reloads, although it is far above the newest page.
func TestReadTicksAfterReload(t *testing.T) {
	const replies = 55
	s := startDM(t, defaultNode(t), "carol", "alice", false)
	carol := s.page
	carol.typeMessage("Hi Alice", true)
	carol.waitFor("carol's message to be confirmed", `!!document.querySelector('#messages > li[data-seq="1"][data-state="sent"]')`)
	if err := s.peer.Post(s.ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: s.dm.ID, Seq: 1}); err != nil {
		t.Fatalf("alice reads: %v", err)
	}
	carol.waitFor("✓✓ on carol's message", `document.querySelector('#messages > li[data-seq="1"]')?.dataset.read === 'true'`)
	s.send(t, "reply", 1, replies)
	carol.untilShown(1, 1+replies)
	carol.readToBottom(1 + replies)

	carol.do("reload", chromedp.Reload())
	carol.waitConnected()
	carol.waitFor("the newest page after the reload", fmt.Sprintf(`document.getElementById('messages').dataset.lastSeq === '%d'`, 1+replies))
	carol.scrollToTop()
	carol.waitFor("✓✓ on carol's message after the reload", `(e => e?.dataset.read === 'true' && e.querySelector('.tick').textContent === '✓✓')(document.querySelector('#messages > li[data-seq="1"]'))`)
}

// TestRightToLeftText (defect 4): Hebrew and Arabic messages and a Hebrew draft run right to
// left; English stays left to right.
func TestRightToLeftText(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	for _, body := range []string{"שלום, מה שלומך?", "مرحبا بك", "hello there"} {
		if _, err := s.peer.Send(s.ctx, s.dm.ID, body); err != nil {
			t.Fatalf("send %q: %v", body, err)
		}
	}
	bob.untilShown(1, 3)
	got := eval[[]string](bob, `[...document.querySelectorAll('#messages > li[data-seq] .body')].map(e => e.getAttribute('dir') + ':' + (e.matches(':dir(rtl)') ? 'rtl' : 'ltr'))`)
	if want := []string{"auto:rtl", "auto:rtl", "auto:ltr"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("message bodies are laid out %v, want %v", got, want)
	}
	bob.do("write in Hebrew", chromedp.Focus(chromedp.ID("composer-input")), insertText("אני בדרך"))
	if got := eval[string](bob, `(e => e.getAttribute('dir') + ':' + (e.matches(':dir(rtl)') ? 'rtl' : 'ltr'))(document.getElementById('composer-input'))`); got != "auto:rtl" {
		t.Fatalf("the composer with a Hebrew draft is %q, want auto:rtl", got)
	}
}

// TestOverlongDraftKept (defect 6): a paste over the server's limit (protocol.MaxBodyBytes, in
// UTF-8 bytes) is kept whole, warned about, and not sent until it fits.
func TestOverlongDraftKept(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	warned := `!document.getElementById('composer-warning').hidden && document.getElementById('send').disabled && document.getElementById('composer-input').getAttribute('aria-invalid') === 'true'`
	clear := `document.getElementById('composer-warning').hidden && !document.getElementById('send').disabled`

	long := strings.Repeat("a", protocol.MaxBodyBytes+3616)
	bob.do("paste 20,000 characters", chromedp.Focus(chromedp.ID("composer-input")), insertText(long))
	if n := eval[int](bob, `document.getElementById('composer-input').value.length`); n != len(long) {
		t.Fatalf("the composer kept %d of the %d pasted characters", n, len(long))
	}
	bob.waitFor("the too-long warning", warned)
	if w := eval[string](bob, `document.getElementById('composer-warning').textContent`); !strings.Contains(w, "16,384") {
		t.Fatalf("the warning %q does not say the limit", w)
	}
	frames := len(bob.sentFrames())
	bob.do("try to send", pressKey("Enter", 13, "\r"))
	if n := eval[int](bob, `document.getElementById('composer-input').value.length`); n != len(long) {
		t.Fatalf("after Enter the composer holds %d characters, want the %d kept", n, len(long))
	}

	// Characters under the limit, bytes over it: counted the way the server counts.
	wide := strings.Repeat("é", protocol.MaxBodyBytes/2+1)
	bob.do("replace with 8,193 two-byte characters", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(e => { e.select(); document.execCommand('insertText', false, %q); })(document.getElementById('composer-input'))`, wide)))
	bob.waitFor("the warning for 16,386 bytes", warned)
	bob.do("delete one character", pressKey("Backspace", 8, ""))
	bob.waitFor("the warning to clear at 16,384 bytes", clear)
	bob.do("send", pressKey("Enter", 13, "\r"))
	got := testenv.Push(t, s.peer, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeMessage })
	if want := strings.Repeat("é", protocol.MaxBodyBytes/2); got.Body != want {
		t.Fatalf("alice got a body of %d bytes, want the %d-byte draft", len(got.Body), len(want))
	}
	for _, raw := range bob.sentFrames()[frames:] {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) == nil && f.Type == protocol.TypeSend && len(f.Body) > protocol.MaxBodyBytes {
			t.Fatalf("the page sent a body of %d bytes", len(f.Body))
		}
	}
}

// TestFailedSendsResentOnReconnect (defect 7): messages written while the network is down are
// sent by themselves once it is back, in the order written, each stored once.
func TestFailedSendsResentOnReconnect(t *testing.T) {
	s := startDM(t, defaultNode(t), "alice", "bob", true)
	alice, link := s.page, s.link
	alice.typeMessage("one", true)
	alice.waitFor("the first message to be confirmed", `!!document.querySelector('#messages > li[data-seq="1"][data-state="sent"]')`)

	link.SetDown(true)
	alice.waitFor("the page to go offline", `document.getElementById('conn-status').dataset.state === 'offline'`)
	for _, body := range []string{"offline 1", "offline 2", "offline 3"} {
		alice.typeMessage(body, true)
	}
	alice.waitFor("three unsent messages", `document.querySelectorAll('#messages > li[data-state="failed"]').length === 3`)
	link.SetDown(false)
	alice.waitConnected()
	alice.untilShown(1, 4)
	want := []shownMessage{{1, "alice", "one"}, {2, "alice", "offline 1"}, {3, "alice", "offline 2"}, {4, "alice", "offline 3"}}
	assertShown(t, alice, want)
	alice.waitFor("no message left unsent", `!document.querySelector('#messages > li[data-state]:not([data-seq])')`)
	assertStored(t, s.ctx, s.peer, s.dm.ID, want)
	ids := map[string]map[string]bool{}
	for _, raw := range alice.sentFrames() {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) == nil && f.Type == protocol.TypeSend {
			if ids[f.Body] == nil {
				ids[f.Body] = map[string]bool{}
			}
			ids[f.Body][f.ClientMsgID] = true
		}
	}
	for _, m := range want {
		if len(ids[m.Body]) != 1 {
			t.Fatalf("%q was sent with clientMsgIds %v, want exactly one", m.Body, ids[m.Body])
		}
	}
}

// TestNewMessageCue (defect 2): scrolled up, a new message shows a cue in the pane that jumps to
// it; at the bottom of a window that got 140 px shorter, new messages are still followed.
func TestNewMessageCue(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	s.send(t, "msg", 1, 30)
	bob.untilShown(1, 30)
	bob.readToBottom(30) // a burst of more than a screen is not followed past what bob has seen
	bob.waitFor("the newest message in view", inView(30))
	// Scroll events are dispatched with the next frame: two frames later the page has seen this
	// one, as it has long seen a user's scroll before a new message arrives.
	bob.do("scroll up", chromedp.Evaluate[chromedp.Void](`window.scrolledUp = false;
		document.getElementById('scroller').scrollTop = 0;
		requestAnimationFrame(() => requestAnimationFrame(() => { window.scrolledUp = true; }));`))
	bob.waitFor("the page to have seen the scroll", `window.scrolledUp === true`)
	bob.waitFor("the cue to stay hidden while nothing is new", `document.getElementById('jump-latest').hidden`)
	s.send(t, "msg", 31, 31)
	bob.untilShown(1, 31)
	bob.waitFor(`the "1 new message" cue`, `(e => !e.hidden && e.textContent.includes('1 new message'))(document.getElementById('jump-latest'))`)
	if eval[bool](bob, inView(31)) {
		t.Fatal("the new message scrolled into view although bob was reading above")
	}
	bob.do("click the cue", chromedp.Click(chromedp.ID("jump-latest")))
	bob.waitFor("the new message in view and the cue gone", inView(31)+` && document.getElementById('jump-latest').hidden`)

	bob.do("make the window 140 px shorter", chromedp.EmulateViewport(1100, 620))
	bob.waitFor("the shorter window", `window.innerHeight === 620`)
	s.send(t, "msg", 32, 33)
	bob.untilShown(1, 33)
	bob.waitFor("the newest message followed in the shorter window", inView(33)+` && document.getElementById('jump-latest').hidden`)
}

// TestBacklogNotMarkedRead (defect 3): after an outage longer than the replay, the page shows
// where the user left off and marks read only what has been on screen.
func TestBacklogNotMarkedRead(t *testing.T) {
	const before, missed = 20, 130
	s := startDM(t, func(env *testenv.Env) *testenv.Node {
		cfg := env.NodeConfig()
		cfg.Chat.SyncLimit = 50
		return testenv.StartNode(t, cfg)
	}, "bob", "alice", true)
	bob, link := s.page, s.link
	s.send(t, "msg", 1, before)
	bob.untilShown(1, before)
	bob.readToBottom(before)

	link.SetDown(true)
	bob.waitFor("the page to go offline", `document.getElementById('conn-status').dataset.state === 'offline'`)
	s.send(t, "msg", before+1, before+missed)
	frames := len(bob.sentFrames())
	link.SetDown(false)
	bob.waitConnected()
	// The replay may come in more than one piece: the page shows the first missed message, marks
	// what has been on screen read, and may then move on to the next unseen one. What must hold
	// is below: nothing is marked read that was not on screen, and it never jumps far ahead.
	bob.waitFor("the screenful on show to be marked read", fmt.Sprintf(`Number(document.getElementById('messages').dataset.sentRead) > %d`, before))
	shownUpTo := eval[int64](bob, `Math.max(...[...document.querySelectorAll('#messages > li[data-seq]')].filter(e => { const b = document.getElementById('scroller').getBoundingClientRect(), r = e.getBoundingClientRect(); return r.bottom > b.top && r.top < b.bottom; }).map(e => Number(e.dataset.seq)))`)
	if read := maxReadSent(bob, frames); read > shownUpTo {
		t.Fatalf("after the outage the page marked %d read, but only up to %d has been on screen", read, shownUpTo)
	}
	if shownUpTo > before+60 {
		t.Fatalf("the page scrolled past the first missed message, to %d", shownUpTo)
	}
	bob.waitFor("the cue counting what is left", fmt.Sprintf(`(e => !e.hidden && /\d+ new messages/.test(e.textContent))(document.getElementById('jump-latest'))`))
	bob.do("jump to the latest", chromedp.Click(chromedp.ID("jump-latest")))
	bob.waitFor("everything read once bob is at the bottom", fmt.Sprintf(`document.getElementById('messages').dataset.sentRead === '%d' && document.title === 'chatd'`, before+missed))
}

// TestLongMessages (defect 5): a 16 KB message with no spaces wraps inside its bubble, and long
// messages are collapsed behind "Show more".
func TestLongMessages(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	unbroken := strings.Repeat("x", protocol.MaxBodyBytes)
	lines := make([]string, 60)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %02d", i+1)
	}
	for _, body := range []string{unbroken, strings.Join(lines, "\n"), "short"} {
		if _, err := s.peer.Send(s.ctx, s.dm.ID, body); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	bob.untilShown(1, 3)
	if eval[bool](bob, `(s => s.scrollWidth > s.clientWidth)(document.getElementById('scroller')) || document.documentElement.scrollWidth > window.innerWidth`) {
		t.Fatal("the 16 KB message without spaces makes the pane scroll sideways")
	}
	for _, seq := range []int{1, 2} {
		sel := fmt.Sprintf(`document.querySelector('#messages > li[data-seq="%d"]')`, seq)
		collapsed := eval[float64](bob, sel+`.getBoundingClientRect().height`)
		if collapsed > 360 {
			t.Fatalf("message %d is %.0f px tall, want it collapsed", seq, collapsed)
		}
		if got := eval[string](bob, sel+`.querySelector('button.show-more')?.getAttribute('aria-expanded') || 'no toggle'`); got != "false" {
			t.Fatalf("message %d's Show more toggle: %s", seq, got)
		}
		bob.do("show more", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#messages > li[data-seq="%d"] button.show-more`, seq))))
		bob.waitFor("the whole message", fmt.Sprintf(`(e => e.querySelector('button.show-more').getAttribute('aria-expanded') === 'true' && e.getBoundingClientRect().height > %f)(%s)`, collapsed+100, sel))
		if seq == 1 && eval[int](bob, sel+`.querySelector('.body').textContent.length`) != len(unbroken) {
			t.Fatal("the expanded message is not the whole body")
		}
		bob.do("show less", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#messages > li[data-seq="%d"] button.show-more`, seq))))
		bob.waitFor("the message collapsed again", fmt.Sprintf(`%s.getBoundingClientRect().height <= %f`, sel, collapsed+1))
	}
	if eval[bool](bob, `!!document.querySelector('#messages > li[data-seq="3"] button.show-more')`) {
		t.Fatal("a short message has a Show more toggle")
	}
	if eval[bool](bob, `(s => s.scrollWidth > s.clientWidth)(document.getElementById('scroller'))`) {
		t.Fatal("the pane scrolls sideways after expanding")
	}
}

// TestPhoneShowsActivityElsewhere (defect 8): on a phone, inside one conversation, a message in
// another shows on the back button.
func TestPhoneShowsActivityElsewhere(t *testing.T) {
	s := startDM(t, defaultNode(t), "bob", "alice", false)
	bob := s.page
	bob.do("a phone-sized window", chromedp.EmulateViewport(375, 667))
	bob.waitFor("the conversation covering the list", `getComputedStyle(document.getElementById('sidebar')).display === 'none'`)
	carol := testenv.Connect(t, s.node.URL(), "carol")
	dm, err := carol.OpenDM(s.ctx, "bob")
	if err != nil {
		t.Fatalf("carol opens a dm: %v", err)
	}
	if _, err := carol.Send(s.ctx, dm.ID, "are you there?"); err != nil {
		t.Fatalf("carol sends: %v", err)
	}
	bob.waitFor("the back button to count carol's message", `(b => b.querySelector('.badge')?.textContent === '1' && /1 unread/.test(b.getAttribute('aria-label')) && b.getBoundingClientRect().width > 0)(document.getElementById('back'))`)
	s.send(t, "in the open dm", 1, 1)
	bob.untilShown(1, 1)
	if got := eval[string](bob, `document.querySelector('#back .badge')?.textContent || ''`); got != "1" {
		t.Fatalf("after a message in the open DM the back button shows %q, want 1 (only other conversations)", got)
	}
	bob.screenshot("14-phone-activity-elsewhere")
	bob.do("go back", chromedp.Click(chromedp.ID("back")))
	bob.waitFor("carol's unread DM in the list", fmt.Sprintf(`document.querySelector(%q)?.querySelector('.badge')?.textContent === '1'`, convButton("carol")))
}
