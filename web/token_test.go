package web_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/testenv"
)

// TestTokenNotInWebSocketURL: the page sends its token as a WebSocket subprotocol, never in the
// WebSocket URL, which browsers print in console errors when a connection fails. The URLs come
// from Chrome's own network events, so the test sees every socket the page opened, whatever the
// page's code says it does.
func TestTokenNotInWebSocketURL(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	testenv.Connect(t, n.URL(), "bob") // the DM's other end, so the page has someone to write to
	alice := newBrowser(t).newPage("alice")

	// Listen calls the func on the tab's read loop, in order, so every socket created before a
	// later command returns is recorded by then. chromedp enables the network domain itself when
	// it attaches to a tab. Canceling the page's context when the test ends stops the calls.
	var (
		mu     sync.Mutex
		wsURLs []string
	)
	if err := chromedp.Listen(alice.ctx, func(ev any) {
		if ev, ok := ev.(*network.EventWebSocketCreated); ok {
			mu.Lock()
			wsURLs = append(wsURLs, ev.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen for alice's WebSockets: %v", err)
	}

	alice.signIn(n.URL(), "Alice")
	// A confirmed message proves the socket the page opened is signed in: the ack comes over it.
	alice.openDM("bob")
	alice.typeMessage("token check", true)
	alice.waitFor("alice's message to be confirmed", `!!document.querySelector('#messages > li[data-seq="1"][data-state="sent"]')`)
	assertShown(t, alice, []shownMessage{{1, "alice", "token check"}})

	mu.Lock()
	defer mu.Unlock()
	if len(wsURLs) == 0 {
		t.Fatal("Chrome saw the page open no WebSocket, yet the page is connected")
	}
	for _, u := range wsURLs {
		if strings.Contains(strings.ToLower(u), "token") {
			t.Errorf("the page opened a WebSocket with its token in the URL: %s", u)
		}
	}
}
