package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StoreBinEnv names a prebuilt chatstore binary; without it the tests build one once per test binary.
const StoreBinEnv = "CHAT_TEST_STORE_BIN"

var storeBin struct {
	once sync.Once
	path string
	err  error
}

// storeBinary returns the path of a chatstore binary built without the race detector: FerretDB's
// pure-Go SQLite runs about ten times slower under -race, which would make the store the test.
func storeBinary() (string, error) {
	storeBin.once.Do(func() {
		if p := os.Getenv(StoreBinEnv); p != "" {
			storeBin.path = p
			return
		}
		dir, err := os.MkdirTemp("", "chatstore-bin-")
		if err != nil {
			storeBin.err = fmt.Errorf("make build dir: %w", err)
			return
		}
		storeBin.path = filepath.Join(dir, "chatstore")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", storeBin.path, "github.com/chatd/chatd/cmd/chatstore")
		if out, err := cmd.CombinedOutput(); err != nil {
			storeBin.err = fmt.Errorf("build chatstore: %w: %s", err, out)
		}
	})
	return storeBin.path, storeBin.err
}

// StoreProcess is a chatstore running as a child process.
type StoreProcess struct {
	URI string
	cmd *exec.Cmd
}

// StartStoreProcess runs chatstore on dir at addr ("127.0.0.1:0" for a free port) until the test
// ends or Stop is called. Restarting on the same dir keeps the data.
func StartStoreProcess(t testing.TB, dir, addr string) *StoreProcess {
	t.Helper()
	bin, err := storeBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-dir", dir, "-addr", addr)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("chatstore stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chatstore: %v", err)
	}
	sp := &StoreProcess{cmd: cmd}
	t.Cleanup(sp.Stop)
	uri := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n') // an empty line means it died; reported below
		uri <- strings.TrimSpace(line)
	}()
	select {
	case sp.URI = <-uri:
		if sp.URI == "" {
			t.Fatalf("chatstore exited before it was ready")
		}
	case <-time.After(time.Minute):
		t.Fatalf("chatstore not ready after a minute")
	}
	return sp
}

// Stop ends the store process gracefully and waits for it.
func (sp *StoreProcess) Stop() {
	if sp.cmd.ProcessState != nil {
		return
	}
	_ = sp.cmd.Process.Signal(syscall.SIGTERM) // it may have exited already; Wait tells
	_ = sp.cmd.Wait()
}
