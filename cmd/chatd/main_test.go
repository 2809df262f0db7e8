package main_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests (a client's reader, say).
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// startChatd runs the real binary on its embedded defaults (in-process NATS, embedded store)
// in dataDir, on ports the kernel picks, and waits until it is ready; it returns the process and
// the addresses chatd wrote to its -addr-file. env is added to this process's environment, which
// has no GOGC (the collector's setting is chatd's own default unless env gives one).
func startChatd(t *testing.T, dataDir string, env ...string) (*exec.Cmd, testenv.ChatdAddrs) {
	t.Helper()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addrs.json")
	cmd := exec.Command(testenv.ChatdBinary.Path(t))
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
	cmd.Env = append(cmd.Env, "CHAT_DATA_DIR="+dataDir, "CHAT_ADDR=127.0.0.1:0", "CHAT_ADMIN_ADDR=127.0.0.1:0",
		"CHAT_ADDR_FILE="+addrFile, "CHAT_LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, env...)
	logPath := filepath.Join(dir, "chatd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chatd: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the test failed before stopping it
			_ = cmd.Wait()
		}
	})
	addrs, err := testenv.WaitChatdAddrs(addrFile, time.Minute)
	if err != nil {
		log, _ := os.ReadFile(logPath) // only to explain the failure
		t.Fatalf("%v; chatd's log:\n%s", err, log)
	}
	testenv.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		resp, err := http.Get("http://" + addrs.Addr + "/readyz")
		if err != nil {
			return fmt.Errorf("chatd not ready: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("chatd not ready: GET /readyz: %s", resp.Status)
		}
		return nil
	})
	return cmd, addrs
}

func stopChatd(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
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

	server, addrs := startChatd(t, dataDir)
	base := "http://" + addrs.Addr
	token, _, err := client.Login(ctx, nil, base, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Login(ctx, nil, base, "bob"); err != nil {
		t.Fatal(err)
	}
	alice, err := client.Dial(ctx, "ws://"+addrs.Addr+"/ws", token, nil)
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

	server, addrs = startChatd(t, dataDir)
	defer stopChatd(t, server)
	alice, err = client.Dial(ctx, "ws://"+addrs.Addr+"/ws", token, nil) // the same token still works
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
}

// TestCollectorDefault: chatd runs Go's collector at GOGC=50 (the memory an idle connection costs
// follows the heap's peak, twice the live heap at Go's default) unless GOGC is set, which wins.
func TestCollectorDefault(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "go_gc_gogc_percent 50"},
		{[]string{"GOGC=150"}, "go_gc_gogc_percent 150"},
	} {
		server, addrs := startChatd(t, t.TempDir(), tc.env...)
		metrics := getBody(t, "http://"+addrs.AdminAddr+"/metrics")
		stopChatd(t, server)
		if !strings.Contains(metrics, "\n"+tc.want+"\n") {
			t.Errorf("with %q in the environment /metrics has no line %q", tc.env, tc.want)
		}
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body)
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
