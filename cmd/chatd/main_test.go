package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// TestMain fails the package if a goroutine outlives the tests (a client's reader, say).
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// stopChatd stops chatd with SIGTERM, as an operator does, and fails the test unless it exits
// cleanly.
func stopChatd(t *testing.T, c *testenv.Chatd) {
	t.Helper()
	if err := c.Stop(); err != nil {
		t.Fatalf("chatd did not stop cleanly on SIGTERM: %v", err)
	}
}

// TestRestartKeepsHistoryAndSeqs restarts the server on the same data directory: history, seqs
// and dev-mode tokens carry over, and the next seq is the last plus one. (The restarted server
// listens on a port of its own; the client dials it there.)
func TestRestartKeepsHistoryAndSeqs(t *testing.T) {
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	server := testenv.StartChatd(t, dataDir, nil) // on its embedded defaults: in-process NATS, embedded store
	base := "http://" + server.Addr
	token, _, err := client.Login(ctx, nil, base, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Login(ctx, nil, base, "bob"); err != nil {
		t.Fatal(err)
	}
	alice, err := client.Dial(ctx, "ws://"+server.Addr+"/ws", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("before restart %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	stopChatd(t, server)
	<-alice.Done()

	server = testenv.StartChatd(t, dataDir, nil)
	defer stopChatd(t, server)
	alice, err = client.Dial(ctx, "ws://"+server.Addr+"/ws", token, nil) // the same token still works
	if err != nil {
		t.Fatalf("dial with the token from before the restart: %v", err)
	}
	defer alice.Close()
	ack, err := alice.Send(ctx, dm.ID, "after restart")
	if err != nil {
		t.Fatal(err)
	}
	if ack.Seq != 4 {
		t.Fatalf("first send after restart got seq %d, want 4", ack.Seq)
	}
	page, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: dm.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 4 || page.Messages[0].Body != "before restart 1" || page.Messages[3].Seq != 4 {
		t.Fatalf("history after restart: %+v", page.Messages)
	}
	// Search works on the embedded defaults, its index kept under the data directory.
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		r, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSearch, Query: "restart"})
		if err != nil {
			return err
		}
		if r.Hits == nil || len(*r.Hits) != 4 {
			return fmt.Errorf("searching restart found %v, want the 4 messages", r.Hits)
		}
		return nil
	})
}

// TestSearchOff: with CHAT_SEARCH_DIR=off a node keeps no index and refuses a search as
// unavailable, and everything else works.
func TestSearchOff(t *testing.T) {
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := testenv.StartChatd(t, dataDir, []string{"CHAT_SEARCH_DIR=off"})
	defer stopChatd(t, server)
	token, _, err := client.Login(ctx, nil, "http://"+server.Addr, "alice")
	if err != nil {
		t.Fatal(err)
	}
	alice, err := client.Dial(ctx, "ws://"+server.Addr+"/ws", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	_, err = alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSearch, Query: "anything"})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeUnavailable {
		t.Fatalf("search with search off: %v; want unavailable", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "search")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a search directory exists with search off (%v)", err)
	}
}

// TestCollectorDefault: chatd runs Go's collector at GOGC=50 (the memory an idle connection costs
// follows the heap's peak, twice the live heap at Go's default) unless GOGC is set, which wins.
func TestCollectorDefault(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want float64
	}{
		{nil, 50},
		{[]string{"GOGC=150"}, 150},
	} {
		server := testenv.StartChatd(t, t.TempDir(), tc.env)
		gogc := promtest.Registered(t, promtest.URL("http://"+server.AdminAddr+"/metrics"), "go_gc_gogc_percent").Value
		stopChatd(t, server)
		if gogc != tc.want {
			t.Errorf("with %q in the environment go_gc_gogc_percent is %v, want %v", tc.env, gogc, tc.want)
		}
	}
}

// TestBadSettingIsRefused: a setting that cannot work stops chatd at start with an error that
// names it, instead of being taken for the default.
func TestBadSettingIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.ChatdBinary.Path(t), "-pooled-writers", "-1", "-data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("chatd with -pooled-writers -1: %v, want a failed exit; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "pooled writers -1: must not be negative") {
		t.Errorf("chatd with -pooled-writers -1 said:\n%s\nwant the setting named", out)
	}
}
