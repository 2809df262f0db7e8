package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/testenv"
)

// chromiumEnv names a browser binary to use instead of the one found on PATH.
const chromiumEnv = "CHAT_TEST_CHROMIUM"

// Test timing. Every wait polls; none of these is a sleep.
const (
	waitTimeout  = 20 * time.Second
	pollInterval = 50 * time.Millisecond
)

// chromiumPath finds the browser. The browser tests never skip: a machine without Chromium
// fails them with a message that says how to get it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium found on PATH (looked for chromium, chromium-browser, google-chrome): " +
		"install it with `apt-get install chromium` (scripts/test does this), or set " + chromiumEnv)
	return ""
}

// screenshotDir is testout/screenshots at the repository root, created on first use.
func screenshotDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source to find the repository root")
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "testout", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create %s: %v", dir, err)
	}
	return dir
}

// browser is one headless Chromium with its own profile directory. Each page opens in its own
// browser context, with its own cookies and localStorage, like two people on two machines.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 760),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return &browser{t: t, ctx: ctx}
}

// page is one tab in its own browser context. It records what the page writes to the console
// and the WebSocket frames it sends; console errors fail the test when it ends.
type page struct {
	t    *testing.T
	name string
	ctx  context.Context

	// allowNetworkErrors lets the browser log failed connections, which it does by itself while
	// a server is down; errors of the page's own code still fail the test.
	allowNetworkErrors bool

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	sent    []string
}

func (b *browser) newPage(name string) *page {
	t := b.t
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("open a tab for %s: %v", name, err)
	}
	p := &page{t: t, name: name, ctx: ctx}
	messages := chromedp.Console(ctx)
	frames := chromedp.Events(ctx, network.WebSocketFrameSent)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m)
			p.mu.Unlock()
		}
	})
	wg.Go(func() {
		for ev, err := range frames {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.sent = append(p.sent, string(ev.Response.PayloadData))
			p.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		p.checkConsole()
		cancel()
		wg.Wait()
	})
	return p
}

// checkConsole fails the test for every error the page logged.
func (p *page) checkConsole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.console {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		if p.allowNetworkErrors && (m.Source == "network" || isConnectionFailure(m.Text)) {
			continue
		}
		p.t.Errorf("%s: console %s: %s (%s:%d)", p.name, m.Type, m.Text, m.URL, m.Line)
	}
}

// isConnectionFailure matches what Chromium logs by itself for a WebSocket or fetch that could not
// connect while the server was down.
func isConnectionFailure(text string) bool {
	return strings.Contains(text, "WebSocket connection to") || strings.Contains(text, "net::ERR_")
}

// sentFrames returns the WebSocket frames the page has sent so far.
func (p *page) sentFrames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.sent...)
}

// do runs browser actions, failing the test on error.
func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fail("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds.
func (p *page) waitFor(what, cond string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(pollInterval), chromedp.WithPollingTimeout(waitTimeout)))
	if err != nil {
		p.fail("waiting for %s: %v", what, err)
	}
}

// fail saves a screenshot and the page's state, then fails the test.
func (p *page) fail(format string, args ...any) {
	p.t.Helper()
	msg := fmt.Sprintf(format, args...)
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('conn-status').textContent + ' | title=' + document.title + ' | messages=' + [...document.querySelectorAll('#messages > li')].map(e => (e.dataset.seq || e.dataset.state || e.className) + ':' + e.textContent.slice(0, 40)).join(' / ')`))
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		name := filepath.Join(screenshotDir(p.t), "FAILED-"+p.t.Name()+"-"+p.name+".png")
		_ = os.WriteFile(name, png, 0o644) // best effort: the failure below is what matters
	}
	p.t.Fatalf("%s: %s\n  page state: %s", p.name, msg, status)
}

// screenshot saves what the page shows as testout/screenshots/<name>.png, after checking that
// no view shows a JavaScript placeholder value.
func (p *page) screenshot(name string) {
	p.t.Helper()
	if bad := eval[string](p, `(document.body.innerText.match(/\b(null|undefined|NaN|\[object Object\])\b/) || [''])[0]`); bad != "" {
		p.fail("the %s view shows %q", name, bad)
	}
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.fail("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir(p.t), name+".png"), png, 0o644); err != nil {
		p.t.Fatalf("save screenshot %s: %v", name, err)
	}
}

// open loads the page and waits for the sign-in form (or, if signed in, the chat).
func (p *page) open(baseURL string) {
	p.t.Helper()
	p.do("open "+baseURL, chromedp.Navigate(baseURL+"/"))
	p.waitFor("the page to start", `!document.getElementById('login-view').hidden || !document.getElementById('chat-view').hidden`)
}

// signIn opens the page, signs in with a display name and waits until the page is connected.
func (p *page) signIn(baseURL, name string) {
	p.t.Helper()
	p.open(baseURL)
	p.do("sign in as "+name,
		chromedp.SendKeys(chromedp.ID("login-name"), name),
		chromedp.Click(chromedp.ID("login-submit")))
	p.waitConnected()
}

// signedIn starts a node and a browser with a page for each of names, signed in in that order
// under that name (a display name: the page greets it), and returns the pages in that order.
func signedIn(t *testing.T, names ...string) (*testenv.Node, []*page) {
	t.Helper()
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	pages := make([]*page, len(names))
	for i, name := range names {
		pages[i] = b.newPage(name)
		pages[i].signIn(n.URL(), name)
	}
	return n, pages
}

func (p *page) waitConnected() {
	p.t.Helper()
	p.waitFor("the page to be connected", `document.getElementById('conn-status').dataset.state === 'connected'`)
}

// openDM starts (or finds) the DM with a user through the sidebar form, typing their user id,
// which is also their display name.
func (p *page) openDM(userID string) {
	p.t.Helper()
	p.openDMTitled(userID, userID)
}

// openDMTitled opens the DM with userID, typing the id, and waits for it to show the user's
// display name as its title.
func (p *page) openDMTitled(userID, title string) {
	p.t.Helper()
	p.do("open a DM with "+userID,
		chromedp.SetValue(chromedp.ID("dm-user"), userID),
		chromedp.Click(chromedp.CSS("#dm-form button[type=submit]")))
	p.waitFor("the DM with "+title+" to open", fmt.Sprintf(`document.getElementById('conv-title').textContent === %q && !document.getElementById('conv-body').hidden`, title))
}

// clickConversation opens the conversation whose list entry is named title.
func (p *page) clickConversation(title string) {
	p.t.Helper()
	sel := convButton(title)
	p.waitFor("conversation "+title+" in the list", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
	p.do("open conversation "+title, chromedp.Click(chromedp.CSS(sel)))
	p.waitFor("conversation "+title+" to open", fmt.Sprintf(`document.getElementById('conv-title').textContent === %q`, title))
}

// convButton selects a conversation's list entry by its title: its label is the title, a comma,
// then what else the entry shows.
func convButton(title string) string {
	return fmt.Sprintf(`button.conv[aria-label^=%q]`, title+", ")
}

// typeMessage types into the composer; with enter it sends.
func (p *page) typeMessage(text string, enter bool) {
	p.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.ID("composer-input"), text)}
	if enter {
		steps = append(steps, pressKey("Enter", 13, "\r"))
	}
	p.do("type "+text, steps...)
}

// pressKey presses a key the way a keyboard does: one keyDown that carries the key's text, so a
// handler that prevents the default also prevents the text. (chromedp's KeyEvent sends the text
// as a separate char event that no page handler can cancel, so Enter would also type a newline.)
func pressKey(key string, code int64, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: key, Code: key,
			Text: text, UnmodifiedText: text, WindowsVirtualKeyCode: code, NativeVirtualKeyCode: code}
		if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, down); err != nil {
			return fmt.Errorf("press %s: %w", key, err)
		}
		up := down
		up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
		if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, up); err != nil {
			return fmt.Errorf("release %s: %w", key, err)
		}
		return nil
	})
}

// shownMessage is a confirmed message as the page shows it.
type shownMessage struct {
	Seq    int64  `json:"seq"`
	Sender string `json:"sender"`
	Body   string `json:"body"`
}

// shownMessages lists the confirmed messages in the open conversation, top to bottom.
func shownMessages(p *page) []shownMessage {
	p.t.Helper()
	return eval[[]shownMessage](p, `[...document.querySelectorAll('#messages > li[data-seq]')].map(e => ({seq: Number(e.dataset.seq), sender: e.dataset.sender || '', body: e.querySelector('.body').textContent}))`)
}

// assertShown checks that the open conversation shows exactly want, in order, once each.
func assertShown(t *testing.T, p *page, want []shownMessage) {
	t.Helper()
	got := shownMessages(p)
	if len(got) != len(want) {
		t.Fatalf("%s shows %d messages, want %d:\n got %v\nwant %v", p.name, len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s message %d = %+v, want %+v", p.name, i, got[i], want[i])
		}
	}
}

// untilShown waits until the open conversation shows seqs from..to with no other message.
func (p *page) untilShown(from, to int64) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("messages %d..%d", from, to), fmt.Sprintf(`(() => {
		const seqs = [...document.querySelectorAll('#messages > li[data-seq]')].map(e => Number(e.dataset.seq));
		if (seqs.length !== %d) return false;
		return seqs.every((s, i) => s === %d + i);
	})()`, to-from+1, from))
}

// insertText types text at the caret the way an input method or a paste does: one input event
// for all of it, subject to the same limits (maxlength) as typing.
func insertText(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text}); err != nil {
			return fmt.Errorf("insert %d characters: %w", len(text), err)
		}
		return nil
	})
}

// scrollToTop scrolls the open conversation up, page by page, until its first message is loaded.
func (p *page) scrollToTop() {
	p.t.Helper()
	for range 20 {
		if eval[bool](p, `document.getElementById('messages').dataset.hasBefore === 'false'`) {
			return
		}
		first := eval[string](p, `document.getElementById('messages').dataset.firstSeq`)
		p.do("scroll to the top", chromedp.Evaluate[chromedp.Void](`document.getElementById('scroller').scrollTop = 0`))
		p.waitFor("an older page", fmt.Sprintf(`document.getElementById('messages').dataset.firstSeq !== %q`, first))
	}
	p.fail("the first message did not load after 20 pages")
}

// inView is a JavaScript condition: the message with seq is wholly inside the message pane.
func inView(seq int64) string {
	return fmt.Sprintf(`(() => {
		const e = document.querySelector('#messages > li[data-seq="%d"]');
		if (!e) return false;
		const box = document.getElementById('scroller').getBoundingClientRect(), r = e.getBoundingClientRect();
		return r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
	})()`, seq)
}

// readToBottom scrolls the open conversation down until the page has sent its read cursor for
// seq and shows nothing unread: the page marks read only what has been on screen.
func (p *page) readToBottom(seq int64) {
	p.t.Helper()
	p.do(fmt.Sprintf("scroll down until %d is read", seq), chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
		const sc = document.getElementById('scroller');
		sc.scrollTop = sc.scrollHeight;
		return document.getElementById('messages').dataset.sentRead === '%d' && document.title === 'chatd';
	})()`, seq), chromedp.WithPollingInterval(pollInterval), chromedp.WithPollingTimeout(waitTimeout)))
}
