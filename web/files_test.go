package web_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/testenv"
)

// TestAttachmentsAcrossNodes: alice, on node 1, pastes an image into the message box and sends it
// alone; bob, on node 2, sees its thumbnail in a box of the right size (reserved before it loads),
// the list says "Photo", a click opens the full image in a dialog that Escape closes, and his
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
