package web_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// TestAttachmentsAcrossNodes: alice, on node 1, pastes an image into the message box and sends it
// alone; bob, on node 2, sees its thumbnail in a box of the right size (reserved before it loads),
// the list says "Photo", a click (or Enter) opens the full image in a dialog that Escape or its
// button closes, and his
// reply quotes it as "Photo". An HTML file named .png that alice attaches with the attach button
// shows bob a card whose link downloads it, never renders it: Content-Disposition attachment and
// the sandboxing CSP. Carol, not a member, is refused bob's link with her token; once alice
// deletes the photo's message for everyone, the link answers 404.
func TestAttachmentsAcrossNodes(t *testing.T) {
	env := testenv.NewEnv(t)
	nodes := make([]*testenv.Node, 2)
	for i := range nodes {
		cfg := env.NodeConfig()
		cfg.NodeID = fmt.Sprintf("web-files-%d", i+1)
		cfg.Sequencer.Partitions = 4
		nodes[i] = testenv.StartNode(t, cfg)
	}
	b := newBrowser(t)
	bob := b.newPage("bob")
	bob.signIn(nodes[1].URL(), "bob")
	alice := b.newPage("alice")
	alice.signIn(nodes[0].URL(), "alice")
	alice.openDM("bob")
	bob.clickConversation("alice")

	// A 300×600 PNG drawn in alice's page and pasted into the message box, as a screenshot is:
	// its thumbnail box is 120×240 (the longer side 240 CSS pixels).
	alice.do("paste an image", chromedp.Focus(chromedp.ID("composer-input")), chromedp.Evaluate[chromedp.Void](pasteImageJS, chromedp.EvalAwaitPromise))
	alice.waitFor("the image uploaded", `!!document.querySelector('#upload-tray li[data-state="done"]')`)
	alice.do("send it alone", chromedp.Focus(chromedp.ID("composer-input")), pressKey("Enter", 13, "\r"))
	alice.waitFor("the tray emptied", `document.getElementById('upload-tray').hidden`)

	thumb := msgSel(1) + " img.thumb-img"
	bob.waitFor("the thumbnail's box reserved at 120×240", fmt.Sprintf(
		`(e => !!e && e.getAttribute('width') === '120' && e.getAttribute('height') === '240' && Math.round(e.getBoundingClientRect().width) === 120 && Math.round(e.getBoundingClientRect().height) === 240)(document.querySelector(%q))`, thumb))
	bob.waitFor("the thumbnail loaded", fmt.Sprintf(`(e => e.complete && e.naturalWidth > 0 && e.naturalWidth <= 320)(document.querySelector(%q))`, thumb))
	bob.waitFor("the list to say Photo", fmt.Sprintf(`(e => !!e && e.textContent.includes(': Photo'))(document.querySelector(%q))`, convButton("alice")+" .conv-sub"))
	bob.screenshot("34-thumbnail")

	bob.do("open the photo", chromedp.Click(chromedp.CSS(msgSel(1)+" .thumb")))
	bob.waitFor("the full image in the dialog", `document.getElementById('image-viewer').open && document.getElementById('image-full').complete && document.getElementById('image-full').naturalWidth === 300 && document.getElementById('image-full').naturalHeight === 600`)
	bob.screenshot("34-full-image")
	bob.do("Escape", pressKey("Escape", 27, ""))
	bob.waitFor("the dialog closed, the focus back on the thumbnail", fmt.Sprintf(`!document.getElementById('image-viewer').open && document.activeElement === document.querySelector(%q)`, msgSel(1)+" .thumb"))
	bob.do("Enter on the thumbnail", pressKey("Enter", 13, "\r"))
	bob.waitFor("the viewer open again from the keyboard", `document.getElementById('image-viewer').open`)
	bob.do("close it with its button", chromedp.Click(chromedp.ID("image-close")))
	bob.waitFor("the viewer closed", `!document.getElementById('image-viewer').open`)

	// Bob replies to the photo: the quote says "Photo".
	bob.openMessageMenu(1)
	bob.do("reply", chromedp.Click(chromedp.ID("msg-reply")))
	bob.typeMessage("nice", true)
	bob.waitFor("the reply quoting a Photo", fmt.Sprintf(`(e => !!e && e.textContent === 'Photo')(document.querySelector(%q))`, msgSel(2)+" .quote-text"))

	dir := t.TempDir()
	page := filepath.Join(dir, "cat.png")
	if err := os.WriteFile(page, []byte("<!DOCTYPE html><html><body><script>document.title='pwned'</script></body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	alice.do("attach the page", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{page}))
	alice.waitFor("the page uploaded", `!!document.querySelector('#upload-tray li[data-state="done"]')`)
	alice.typeMessage("not a cat", true)
	card := msgSel(3) + " .file-card"
	bob.waitFor("a card for cat.png with its link", fmt.Sprintf(`(e => !!e && e.querySelector('.file-name').textContent === 'cat.png' && e.querySelector('a.file-download').getAttribute('href') !== null)(document.querySelector(%q))`, card))
	href := eval[string](bob, fmt.Sprintf(`document.querySelector(%q).getAttribute('href')`, card+" a.file-download"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nodes[1].URL()+href, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") ||
		resp.Header.Get("Content-Security-Policy") != "default-src 'none'; sandbox" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("the HTML file is served %d with %v", resp.StatusCode, resp.Header)
	}
	bob.screenshot("34-file-card")

	// The photo's link as bob's page holds it: carol, not a member, is refused it with her token;
	// after alice deletes the message for everyone it is 404.
	link := eval[string](bob, fmt.Sprintf(`document.querySelector(%q).getAttribute('src')`, thumb))
	carolToken, _, err := client.Login(ctx, nil, nodes[0].URL(), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if status := fetchStatus(t, ctx, nodes[0].URL()+link, carolToken); status != http.StatusForbidden {
		t.Fatalf("bob's photo link with carol's token: %d; want 403", status)
	}
	alice.openMessageMenu(1)
	alice.do("delete for everyone", chromedp.Click(chromedp.ID("msg-delete")))
	alice.confirm("Delete for everyone", true)
	bob.waitFor("the photo's message deleted", present(msgSel(1)+` .body.deleted`)+` && !document.querySelector(`+fmt.Sprintf("%q", msgSel(1)+" .thumb")+`)`)
	if status := fetchStatus(t, ctx, nodes[1].URL()+link, ""); status != http.StatusNotFound {
		t.Fatalf("the deleted photo's link: %d; want 404", status)
	}
}

// fetchStatus gets a URL, with a token when one is given, and returns the status.
func fetchStatus(t *testing.T, ctx context.Context, rawURL, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pasteImageJS draws a 300×600 picture, red over blue, and pastes it as a PNG file into the
// focused message box, as the browser does with a copied screenshot.
const pasteImageJS = `(async () => {
  const canvas = document.createElement('canvas');
  canvas.width = 300; canvas.height = 600;
  const g = canvas.getContext('2d');
  g.fillStyle = 'red'; g.fillRect(0, 0, 300, 300);
  g.fillStyle = 'blue'; g.fillRect(0, 300, 300, 300);
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
  const data = new DataTransfer();
  data.items.add(new File([blob], 'image.png', { type: 'image/png' }));
  document.activeElement.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
})()`

// TestUploadProgressAndCancel: on a slow upload link (the browser's network throttled to 200 kB/s
// for uploads), a file's progress bar moves; Cancel takes it out of the tray, aborts the upload,
// and the server keeps nothing of it; Send with nothing left sends nothing.
func TestUploadProgressAndCancel(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	bob := b.newPage("bob")
	bob.signIn(n.URL(), "bob")
	alice := b.newPage("alice")
	alice.signIn(n.URL(), "alice")
	alice.openDM("bob")
	alice.do("throttle uploads", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
			MatchedNetworkConditions: []*network.Conditions{{URLPattern: n.URL() + "/api/conversations/*", UploadThroughput: 200_000, DownloadThroughput: -1}}})
		return err
	}))
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16), 0o600); err != nil {
		t.Fatal(err)
	}
	alice.do("attach a 3 MiB file", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{big}))
	alice.waitFor("its progress bar moving", `(e => !!e && e.value > 0 && e.value < e.max)(document.querySelector('#upload-tray li[data-state="uploading"] progress'))`)
	alice.screenshot("34-upload-progress")
	alice.do("cancel it", chromedp.Click(chromedp.CSS(`#upload-tray .upload-cancel`)))
	alice.waitFor("the tray empty", `document.getElementById('upload-tray').hidden && !document.querySelector('#upload-tray li')`)
	promtest.WaitFor(t, promtest.URL(n.AdminURL()+"/metrics"), waitTimeout, 1, "chatd_upload_refusals_total", "reason", "failed")
	for info, err := range env.Blobs.ListOlder(context.Background(), "files/", time.Now().Add(time.Hour)) {
		t.Fatalf("the cancelled upload left %v (%v)", info.Key, err)
	}
	alice.do("press Enter with nothing to send", chromedp.Focus(chromedp.ID("composer-input")), pressKey("Enter", 13, "\r"))
	if sends := sentFramesOf(alice, "send"); len(sends) != 0 {
		t.Fatalf("alice's page sent %d messages with nothing in them", len(sends))
	}
}
