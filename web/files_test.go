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

	"github.com/chatd/chatd/testenv"
)

// TestAttachmentsAcrossNodes: alice, on node 1, attaches a photo with the attach button and sends
// it alone; bob, on node 2, sees its thumbnail in a box of the right size (reserved before it
// loads), the list says "Photo", and a click opens the full image in a dialog that Escape closes.
// An HTML file named .png that alice sends shows bob a card whose link downloads it, never
// renders it: Content-Disposition attachment and the sandboxing CSP.
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

	dir := t.TempDir()
	photo := filepath.Join(dir, "beach.jpg")
	// 600×300 with an EXIF orientation that turns it upright to 300×600: its thumbnail box is
	// 120×240 (the longer side 240 CSS pixels).
	if err := os.WriteFile(photo, testenv.PhotoWithGPS(t, 600, 300), 0o600); err != nil {
		t.Fatal(err)
	}
	alice.do("attach the photo", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{photo}))
	alice.waitFor("the photo uploaded", `!!document.querySelector('#upload-tray li[data-state="done"]')`)
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

	page := filepath.Join(dir, "cat.png")
	if err := os.WriteFile(page, []byte("<!DOCTYPE html><html><body><script>document.title='pwned'</script></body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	alice.do("attach the page", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{page}))
	alice.waitFor("the page uploaded", `!!document.querySelector('#upload-tray li[data-state="done"]')`)
	alice.typeMessage("not a cat", true)
	card := msgSel(2) + " .file-card"
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
}
