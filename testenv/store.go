package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StoreProcess is a chatstore running as a child process.
type StoreProcess struct {
	URI string
	cmd *exec.Cmd
}

// StartStoreProcess runs chatstore on dir at addr ("127.0.0.1:0" for a free port) until the test
// ends or Stop is called. Restarting on the same dir keeps the data.
func StartStoreProcess(t testing.TB, dir, addr string) *StoreProcess {
	t.Helper()
	cmd := exec.Command(StoreBinary.Path(t), "-dir", dir, "-addr", addr)
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
