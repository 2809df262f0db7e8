package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// chatdStartTimeout bounds a chatd child's start: it waits up to 30 s for its dependencies.
const chatdStartTimeout = time.Minute

// ChatdAddrs is what a chatd process writes to its -addr-file (CHAT_ADDR_FILE) once it listens:
// where it listens, for a test that starts it on port 0.
type ChatdAddrs struct {
	Addr      string `json:"addr"`
	AdminAddr string `json:"adminAddr"` // empty without an admin listener
}

// Chatd is the chatd binary running as a child process (StartChatd).
type Chatd struct {
	*Process
	ChatdAddrs
}

// StartChatd runs the chatd binary (ChatdBinary) on its data directory dataDir, listening on ports
// the kernel picks (CHAT_ADDR and CHAT_ADMIN_ADDR 127.0.0.1:0), logging at warn; env is added to
// its environment after these (and wins over them), args go on its command line (and win over
// the environment). It returns once chatd has written its addresses and answers /readyz; it is
// stopped when the test ends.
func StartChatd(t testing.TB, dataDir string, env []string, args ...string) *Chatd {
	t.Helper()
	dir := t.TempDir() // afresh for each start: an address file left by an earlier run would be read as this one's
	addrFile := filepath.Join(dir, "addrs.json")
	env = append([]string{"CHAT_DATA_DIR=" + dataDir, "CHAT_ADDR=127.0.0.1:0", "CHAT_ADMIN_ADDR=127.0.0.1:0",
		"CHAT_ADDR_FILE=" + addrFile, "CHAT_LOG_LEVEL=warn"}, env...)
	c := &Chatd{Process: StartProcess(t, dir, "chatd", env, ChatdBinary.Path(t), args...)}
	err := WaitStarted([]*Process{c.Process}, chatdStartTimeout, func() error {
		data, err := os.ReadFile(addrFile) // chatd renames the file into place whole
		if err != nil {
			return fmt.Errorf("chatd has not written its addresses: %w", err)
		}
		if err := json.Unmarshal(data, &c.ChatdAddrs); err != nil {
			return fmt.Errorf("%w: chatd's address file %s: %w", ErrGiveUp, addrFile, err)
		}
		resp, err := http.Get("http://" + c.Addr + "/readyz")
		if err != nil {
			return fmt.Errorf("chatd not ready: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("chatd not ready: GET /readyz: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
