package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// ChatdAddrs is what a chatd process writes to its -addr-file (CHAT_ADDR_FILE) once it listens:
// where it listens, for a test that starts it on port 0.
type ChatdAddrs struct {
	Addr      string `json:"addr"`
	AdminAddr string `json:"adminAddr"` // empty without an admin listener
}

// WaitChatdAddrs waits up to timeout for the addresses chatd writes to path, and returns them.
// Give each start its own path: a file left by an earlier run would be read as this one's.
func WaitChatdAddrs(path string, timeout time.Duration) (ChatdAddrs, error) {
	var addrs ChatdAddrs
	err := Poll(timeout, 20*time.Millisecond, func() error {
		data, err := os.ReadFile(path) // chatd renames the file into place whole
		if err != nil {
			return fmt.Errorf("chatd has not written its addresses: %w", err)
		}
		if err := json.Unmarshal(data, &addrs); err != nil {
			return fmt.Errorf("%w: chatd's address file %s: %w", ErrGiveUp, path, err)
		}
		return nil
	})
	return addrs, err
}
