package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// These tests drive the bundled page in headless Chromium against a real node (NATS, the store,
// the HTTP server), and assert what a person would see: messages, badges, ticks, the tab title.

// TestTwoPeopleChat: Alice and Bob in two browser contexts. Bob's badge rises while the DM is
// closed and clears when he reads it; Alice sees the read ticks; typing shows; a reload keeps
// Bob signed in with his conversation open; a group shows "read by"; a narrow window works.
func TestTwoPeopleChat(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")

	alice.open(n.URL())
	alice.screenshot("01-sign-in")
	alice.signIn(n.URL(), "Alice")
	bob.signIn(n.URL(), "Bob")
	if got := eval[string](alice, `document.getElementById('me').textContent`); got != "Alice" {
		t.Fatalf("alice's page shows the user %q, want the display name Alice", got)
	}
	unlabeled := eval[[]string](alice, `[...document.querySelectorAll('input, textarea, button')].filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim()).map(e => e.id || e.outerHTML.slice(0, 60))`)
	if len(unlabeled) > 0 {
		t.Fatalf("controls without an accessible name: %v", unlabeled)
	}

	alice.openDMTitled("bob", "Bob")
	bob.waitFor("the new DM to appear in bob's list", fmt.Sprintf(`!!document.querySelector(%q)`, convButton("Alice")))
	for i := 1; i <= 3; i++ {
		alice.typeMessage(fmt.Sprintf("hello %d", i), true)
	}
	alice.waitFor("alice's three messages to be confirmed", `document.querySelectorAll('#messages > li[data-seq][data-state="sent"]').length === 3 && !document.querySelector('#messages > li[data-state="sending"]')`)
	assertShown(t, alice, []shownMessage{{1, "alice", "hello 1"}, {2, "alice", "hello 2"}, {3, "alice", "hello 3"}})
	if read := eval[string](alice, `document.querySelector('#messages > li[data-seq="3"]').dataset.read`); read != "false" {
		t.Fatalf("alice's message 3 shows read=%q before bob opened the DM", read)
	}

	bob.waitFor("bob's badge to show 3 unread", fmt.Sprintf(`document.querySelector(%q)?.querySelector('.badge')?.textContent === '3' && document.title === '(3) chatd'`, convButton("Alice")))
	bob.screenshot("02-unread-badge")

	bob.clickConversation("Alice")
	bob.untilShown(1, 3)
	if eval[bool](bob, `!document.querySelector('#messages > li.divider')`) {
		t.Fatal("bob's DM opened without the new-messages divider before his first unread message")
	}
	bob.waitFor("bob's badge to clear once he has read", fmt.Sprintf(`document.title === 'chatd' && !document.querySelector(%q)?.querySelector('.badge')`, convButton("Alice")))
	alice.waitFor("alice's read ticks", `['1','2','3'].every(s => document.querySelector('#messages > li[data-seq="' + s + '"]')?.dataset.read === 'true')`)
	alice.screenshot("03-read-ticks")

	bob.typeMessage("hi Alice", false)
	alice.waitFor("bob's typing indicator", `document.getElementById('typing').textContent === 'Bob is typing…'`)
	bob.do("send", pressKey("Enter", 13, "\r"))
	alice.untilShown(1, 4)
	alice.waitFor("the typing indicator to clear when bob's message arrives", `document.getElementById('typing').textContent === ''`)
	bob.waitFor("alice's tick on bob's message", `document.querySelector('#messages > li[data-seq="4"]')?.dataset.read === 'true'`)
	bob.screenshot("04-conversation")

	// A reload keeps the sign-in, the open conversation and every message, and nothing is unread.
	// Bob reloads as soon as a message shows, inside the read debounce: the page sends the read
	// cursor as it unloads instead of dropping it.
	alice.typeMessage("see you", true)
	bob.untilShown(1, 5)
	framesBefore := len(bob.sentFrames())
	// The page registers the read a moment after the message shows; reload only once it has, so
	// the read is sent by the debounce or, usually, by the unload itself.
	bob.waitFor("bob's page to register its read of seq 5", `['5'].includes(document.getElementById('messages').dataset.unsentRead) || document.getElementById('messages').dataset.sentRead === '5'`)
	bob.do("reload", chromedp.Reload())
	bob.waitConnected()
	if !sentRead(bob.sentFrames()[framesBefore:], 5) {
		t.Fatalf("bob's page did not send its read cursor for seq 5 when it was unloaded; frames: %v", bob.sentFrames()[framesBefore:])
	}
	bob.waitFor("the DM to reopen after the reload", `document.getElementById('conv-title').textContent === 'Alice'`)
	bob.untilShown(1, 5)
	assertShown(t, bob, []shownMessage{{1, "alice", "hello 1"}, {2, "alice", "hello 2"}, {3, "alice", "hello 3"}, {4, "bob", "hi Alice"}, {5, "alice", "see you"}})
	if state := eval[string](bob, `(document.getElementById('login-view').hidden ? 'signed in' : 'signed out') + ', title ' + document.title + (document.querySelector('#messages > li.divider') ? ', new-messages divider' : '')`); state != "signed in, title chatd" {
		t.Fatalf("after a reload bob's page is %s; want signed in with nothing unread", state)
	}

	// A group: Bob's badge counts it, and Alice sees "read by 1" once he has looked.
	alice.do("create a group",
		chromedp.Click(chromedp.CSS("#group-details summary")),
		chromedp.SetValue(chromedp.ID("group-name"), "Team"),
		chromedp.SetValue(chromedp.ID("group-members"), "bob"),
		chromedp.Click(chromedp.CSS("#group-form button[type=submit]")))
	alice.waitFor("the group to open", `document.getElementById('conv-title').textContent === 'Team'`)
	bob.waitFor("the group to appear in bob's list", fmt.Sprintf(`!!document.querySelector(%q)`, convButton("Team")))
	alice.typeMessage("welcome to the team", true)
	alice.waitFor("the group message to be confirmed", `!!document.querySelector('#messages > li[data-seq="1"][data-state="sent"]')`)
	bob.waitFor("bob's badge for the group", fmt.Sprintf(`document.querySelector(%q)?.querySelector('.badge')?.textContent === '1' && document.title === '(1) chatd'`, convButton("Team")))
	bob.clickConversation("Team")
	bob.untilShown(1, 1)
	bob.waitFor("bob's badge to clear", `document.title === 'chatd'`)
	alice.waitFor(`"read by 1" in the group`, `document.querySelector('#messages > li[data-seq="1"]')?.dataset.readBy === '1'`)
	alice.screenshot("05-group-read-by")

	// A narrow window shows one view at a time, without horizontal scrolling, and the keyboard
	// moves between them.
	bob.do("narrow the window", chromedp.EmulateViewport(380, 720))
	bob.waitFor("the conversation to cover the list", `getComputedStyle(document.getElementById('sidebar')).display === 'none' && getComputedStyle(document.getElementById('back')).display !== 'none'`)
	if eval[bool](bob, `document.documentElement.scrollWidth > window.innerWidth`) {
		t.Fatal("the narrow layout scrolls sideways")
	}
	bob.screenshot("06-narrow-conversation")
	bob.do("go back with the keyboard", chromedp.Focus(chromedp.ID("composer-input")), pressKey("Escape", 27, ""))
	bob.waitFor("the list to show", `getComputedStyle(document.getElementById('sidebar')).display !== 'none' && getComputedStyle(document.getElementById('conversation')).display === 'none'`)
	bob.screenshot("07-narrow-list")
	bob.do("open the DM with the keyboard", chromedp.Focus(chromedp.CSS(convButton("Alice"))), pressKey("Enter", 13, "\r"))
	bob.waitFor("the DM to open from the keyboard", `document.getElementById('conv-title').textContent === 'Alice' && getComputedStyle(document.getElementById('sidebar')).display === 'none'`)
}

// TestHistoryPaging seeds 120 messages, then checks that the page opens at the first unread one,
// that scrolling up loads every older page in order, and that the Jump picker's "Oldest message"
// and scrolling down page forward again.
func TestHistoryPaging(t *testing.T) {
	const total, readUpTo = 120, 100
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	seeder := testenv.Connect(t, n.URL(), "alice")
	reader := testenv.Connect(t, n.URL(), "bob")
	dm, err := seeder.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= total; i++ {
		if _, err := seeder.Send(ctx, dm.ID, seedBody(i)); err != nil {
			t.Fatalf("seed message %d: %v", i, err)
		}
	}
	if err := reader.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: readUpTo}); err != nil {
		t.Fatalf("mark read: %v", err)
	}
	testenv.Push(t, reader, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeCursor && f.ReadSeq == readUpTo
	})
	if err := reader.Close(); err != nil { // the cursor is written when the last session closes
		t.Fatalf("close: %v", err)
	}

	b := newBrowser(t)
	bob := b.newPage("bob")
	bob.signIn(n.URL(), "bob")
	bob.waitFor("20 unread", fmt.Sprintf(`document.querySelector(%q)?.querySelector('.badge')?.textContent === '20'`, convButton("alice")))
	bob.clickConversation("alice")
	bob.waitFor("the first unread message at the top of the pane", fmt.Sprintf(`(() => {
		const box = document.getElementById('scroller').getBoundingClientRect();
		const first = document.querySelector('#messages > li[data-seq="%d"]');
		const divider = document.querySelector('#messages > li.divider');
		if (!first || !divider || divider.nextElementSibling !== first) return false;
		const r = first.getBoundingClientRect();
		return r.top >= box.top && r.top < box.top + box.height / 3;
	})()`, readUpTo+1))
	bob.screenshot("08-opened-at-first-unread")

	// Scroll to the top until the first message is there: every page lands above, in order.
	for range 10 {
		if eval[bool](bob, `document.getElementById('messages').dataset.firstSeq === '1'`) {
			break
		}
		first := eval[string](bob, `document.getElementById('messages').dataset.firstSeq`)
		// Measured in the same script that scrolls, before the scroll event can load anything.
		before := eval[float64](bob, fmt.Sprintf(`(() => {
			const sc = document.getElementById('scroller');
			sc.scrollTop = 0;
			return document.querySelector('#messages > li[data-seq="%s"]').getBoundingClientRect().top - sc.getBoundingClientRect().top;
		})()`, first))
		bob.waitFor("an older page", fmt.Sprintf(`document.getElementById('messages').dataset.firstSeq !== %q`, first))
		after := eval[float64](bob, fmt.Sprintf(`document.querySelector('#messages > li[data-seq="%s"]').getBoundingClientRect().top - document.getElementById('scroller').getBoundingClientRect().top`, first))
		if d := after - before; d < -2 || d > 2 {
			t.Fatalf("loading the page before seq %s moved the message the user was reading by %.0f px", first, d)
		}
	}
	bob.untilShown(1, total)
	want := make([]shownMessage, total)
	for i := range want {
		want[i] = shownMessage{int64(i + 1), "alice", seedBody(i + 1)}
	}
	assertShown(t, bob, want)
	if eval[bool](bob, `document.getElementById('messages').dataset.hasBefore !== 'false'`) {
		t.Fatal("the window still claims older messages above seq 1")
	}
	bob.screenshot("09-scrolled-to-the-top")

	// The Jump picker's "Oldest message": a window of the first page, at the top.
	bob.openJumpPicker()
	bob.jumpTo("jump-oldest")
	bob.waitFor("a window of the first page with message 1 in view", windowIs(1, 50)+` && `+inView(1))
	bob.screenshot("10-jumped")
	// Scrolling down pages forward to the newest message.
	for range 10 {
		if eval[bool](bob, `document.getElementById('messages').dataset.hasAfter === 'false'`) {
			break
		}
		last := eval[string](bob, `document.getElementById('messages').dataset.lastSeq`)
		bob.do("scroll to the bottom", chromedp.Evaluate[chromedp.Void](`(s => s.scrollTop = s.scrollHeight)(document.getElementById('scroller'))`))
		bob.waitFor("a newer page", fmt.Sprintf(`document.getElementById('messages').dataset.lastSeq !== %q`, last))
	}
	first := eval[int64](bob, `Number(document.getElementById('messages').dataset.firstSeq)`)
	bob.untilShown(first, total)

	// Deleted for everyone: the message keeps its place as a tombstone.
	if _, err := seeder.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: total}); err != nil {
		t.Fatalf("delete message %d: %v", total, err)
	}
	bob.waitFor("the deleted message's tombstone", fmt.Sprintf(`document.querySelector('#messages > li[data-seq="%d"] .body')?.textContent === 'This message was deleted.'`, total))
	bob.untilShown(first, total)
}

// sentRead reports whether frames, up to the first sync (a new page's first frame), hold a read
// cursor for seq.
func sentRead(frames []string, seq int64) bool {
	for _, raw := range frames {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) != nil || f.Type == protocol.TypeSync {
			return false
		}
		if f.Type == protocol.TypeRead && f.Seq == seq {
			return true
		}
	}
	return false
}

func seedBody(i int) string { return fmt.Sprintf("seed %03d", i) }

// TestServerRestart stops the node mid-chat and starts it again on the same address. The pages
// reconnect by themselves; what was sent meanwhile arrives (more than the server replays, so the
// rest comes from history); a send that failed while the server was down goes out again by
// itself once the page is back; every message shows once, in order, and is stored once.
func TestServerRestart(t *testing.T) {
	const syncLimit, sentWhileAway = 5, 12
	env := testenv.NewEnv(t)
	cfg := env.NodeConfig()
	cfg.Chat.SyncLimit = syncLimit
	n := testenv.StartRestartableNode(t, cfg)
	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")
	alice.allowNetworkErrors, bob.allowNetworkErrors = true, true
	alice.signIn(n.URL(), "alice")
	bob.signIn(n.URL(), "bob")
	alice.openDM("bob")
	alice.typeMessage("before 1", true)
	alice.typeMessage("before 2", true)
	bob.clickConversation("alice")
	bob.untilShown(1, 2)

	n.Stop()
	for _, p := range []*page{alice, bob} {
		p.waitFor("the page to notice the server is gone", `document.getElementById('conn-status').dataset.state === 'offline'`)
	}
	alice.typeMessage("while down", true)
	alice.waitFor("the failed send with a Retry button", `!!document.querySelector('#messages > li[data-state="failed"] button.retry')`)
	alice.screenshot("11-offline-failed-send")

	n.Restart()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	other := testenv.Connect(t, n.URL(), "alice") // Alice's phone, sending while the pages reconnect
	dm, err := other.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= sentWhileAway; i++ {
		if _, err := other.Send(ctx, dm.ID, fmt.Sprintf("from phone %02d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	alice.waitConnected()
	bob.waitConnected()
	// The failed send is resent as the page reconnects, while the phone sends: it lands somewhere
	// among the phone's messages, once.
	last := int64(3 + sentWhileAway)
	bob.untilShown(1, last)
	alice.untilShown(1, last)
	alice.waitFor("no pending or failed message left", `!document.querySelector('#messages > li[data-state]:not([data-seq])')`)
	want := shownMessages(alice)
	var phone []string
	resent := 0
	for i, m := range want {
		switch {
		case m.Seq != int64(i+1) || m.Sender != "alice":
			t.Fatalf("alice's message %d is %+v", i, m)
		case i < 2:
			if m.Body != fmt.Sprintf("before %d", i+1) {
				t.Fatalf("alice's message %d is %+v", i, m)
			}
		case m.Body == "while down":
			resent++
		default:
			phone = append(phone, m.Body)
		}
	}
	var wantPhone []string
	for i := 1; i <= sentWhileAway; i++ {
		wantPhone = append(wantPhone, fmt.Sprintf("from phone %02d", i))
	}
	if resent != 1 || !slices.Equal(phone, wantPhone) {
		t.Fatalf("after the restart alice shows %v: want the phone's messages in order and \"while down\" once", want)
	}
	assertShown(t, bob, want)
	// Read state recovers too: Bob reads everything, and Alice sees that.
	bob.readToBottom(last)
	alice.waitFor("alice's tick on her newest message", fmt.Sprintf(`document.querySelector('#messages > li[data-seq="%d"]')?.dataset.read === 'true'`, last))
	bob.screenshot("12-after-restart")
	assertStored(t, ctx, other, dm.ID, want)
}

// TestNetworkDrop cuts the network under a page while a send is in flight and its ack is lost.
// The page reconnects by itself and learns from the replay that the message was stored; a message
// written while offline is sent by itself once the page is back; nothing is stored twice.
func TestNetworkDrop(t *testing.T) {
	env := testenv.NewEnv(t)
	cfg := env.NodeConfig()
	// Two quick sends pass, a third is refused as retryable; the Retry at the end needs this.
	cfg.Session.SendRate, cfg.Session.SendBurst = 1, 2
	n := testenv.StartNode(t, cfg)
	link := testenv.StartFaultProxy(t, n.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	bobConn := testenv.Connect(t, n.URL(), "bob")
	b := newBrowser(t)
	alice := b.newPage("alice")
	alice.allowNetworkErrors = true
	alice.signIn("http://"+link.Addr(), "alice")
	alice.openDM("bob")
	alice.typeMessage("one", true)
	alice.waitFor("the first message to be confirmed", `!!document.querySelector('#messages > li[data-seq="1"][data-state="sent"]')`)

	// The send reaches the server, the ack never comes back.
	link.SwallowReplies(true)
	alice.typeMessage("lost ack", true)
	got := testenv.Push(t, bobConn, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.Body == "lost ack"
	})
	if eval[bool](alice, `!document.querySelector('#messages > li[data-state="sending"]')`) {
		t.Fatal("alice's page shows the send confirmed although its ack was swallowed")
	}
	link.SetDown(true)
	link.SwallowReplies(false)
	alice.waitFor("the page to go offline", `document.getElementById('conn-status').dataset.state === 'offline'`)
	alice.waitFor("the unconfirmed send to offer a retry", `document.querySelectorAll('#messages > li[data-state="failed"] button.retry').length === 1`)
	alice.typeMessage("written offline", true)
	alice.waitFor("both unsent messages to offer a retry", `document.querySelectorAll('#messages > li[data-state="failed"] button.retry').length === 2`)
	alice.screenshot("13-network-down")

	link.SetDown(false)
	alice.waitConnected()
	// The replay carries "lost ack" with its clientMsgId: the page confirms it without a resend,
	// and then sends "written offline".
	alice.untilShown(1, 3)
	alice.waitFor("nothing left unsent", `!document.querySelector('#messages > li[data-state]:not([data-seq])')`)
	want := []shownMessage{{1, "alice", "one"}, {2, "alice", "lost ack"}, {3, "alice", "written offline"}}
	assertShown(t, alice, want)
	assertStored(t, ctx, bobConn, got.ConversationID, want)

	// A burst past the send limit: the server refuses with a retryable error after the frame went
	// out, and Retry sends it again until it passes.
	burst := []string{"burst 1", "burst 2", "burst 3"}
	alice.do("send a burst faster than the limit", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const input = document.getElementById('composer-input'), form = document.getElementById('composer');
		for (const body of %s) { input.value = body; form.requestSubmit(); }
	})()`, mustJSON(t, burst))))
	alice.waitFor("a send refused by the rate limit", `!!document.querySelector('#messages > li[data-state="failed"] button.retry')`)
	alice.do("retry until the burst is stored", chromedp.Poll[chromedp.Void](`(() => {
		document.querySelector('#messages > li[data-state="failed"] button.retry')?.click();
		return document.querySelectorAll('#messages > li[data-seq]').length === 6 && !document.querySelector('#messages > li[data-state]:not([data-seq])');
	})()`, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout)))
	// A retried message may land after one sent later; each must be there once, gapless.
	shown := shownMessages(alice)
	if len(shown) != 6 || !slices.Equal(shown[:3], want) {
		t.Fatalf("after the burst alice shows %v", shown)
	}
	var bodies []string
	for i, m := range shown[3:] {
		if m.Seq != int64(4+i) || m.Sender != "alice" {
			t.Fatalf("burst message %d = %+v", i, m)
		}
		bodies = append(bodies, m.Body)
	}
	if slices.Sort(bodies); !slices.Equal(bodies, burst) {
		t.Fatalf("the burst shows as %v, want each of %v once", bodies, burst)
	}
	want = shown
	assertStored(t, ctx, bobConn, got.ConversationID, want)

	// Every send frame of one message carried the same clientMsgId, and one was sent more than once.
	ids := map[string]map[string]bool{}
	frames := map[string]int{}
	for _, raw := range alice.sentFrames() {
		var f protocol.ClientFrame
		if json.Unmarshal([]byte(raw), &f) != nil || f.Type != protocol.TypeSend {
			continue
		}
		if ids[f.Body] == nil {
			ids[f.Body] = map[string]bool{}
		}
		ids[f.Body][f.ClientMsgID] = true
		frames[f.Body]++
	}
	resent := false
	for _, m := range want {
		if len(ids[m.Body]) != 1 {
			t.Fatalf("the sends of %q used clientMsgIds %v, want exactly one", m.Body, ids[m.Body])
		}
		resent = resent || frames[m.Body] > 1
	}
	if !resent {
		t.Fatalf("no message was sent twice (frames per body: %v): the retry path was not exercised", frames)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %v: %v", v, err)
	}
	return string(b)
}

// assertStored checks the conversation's stored history is exactly want.
func assertStored(t *testing.T, ctx context.Context, c *client.Conn, convID string, want []shownMessage) {
	t.Helper()
	page, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: convID, Limit: protocol.MaxPageSize})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var got []string
	for _, m := range page.Messages {
		got = append(got, fmt.Sprintf("%d %s %s", m.Seq, m.SenderID, m.Body))
	}
	var exp []string
	for _, m := range want {
		exp = append(exp, fmt.Sprintf("%d %s %s", m.Seq, m.Sender, m.Body))
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Fatalf("stored history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
}
