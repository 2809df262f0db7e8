package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/url"
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
	bin string
	dir string
	cmd *exec.Cmd
}

// StartStoreProcess runs chatstore on dir, on a port the kernel picks, until the test ends or
// Stop is called.
func StartStoreProcess(t testing.TB, dir string) *StoreProcess {
	t.Helper()
	sp := &StoreProcess{bin: StoreBinary.Path(t), dir: dir}
	if err := sp.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Stop)
	return sp
}

// StartRestartableStore is StartStoreProcess on a port picked by StartOnPorts, so that Restart
// finds its address free again.
func StartRestartableStore(t testing.TB, dir string) *StoreProcess {
	t.Helper()
	sp := &StoreProcess{bin: StoreBinary.Path(t), dir: dir}
	StartOnPorts(t, 1, func(ports []int) error { return sp.start(fmt.Sprintf("127.0.0.1:%d", ports[0])) })
	t.Cleanup(sp.Stop)
	return sp
}

// Restart starts a stopped store again on the same directory and address, so its URI and data
// stay the same.
func (sp *StoreProcess) Restart(t testing.TB) {
	t.Helper()
	uri := sp.URI
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatalf("restart: parse the store's URI: %v", err)
	}
	if err := sp.start(u.Host); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if sp.URI != uri {
		t.Fatalf("restarted store at %s, was %s", sp.URI, uri)
	}
}

// start runs chatstore at addr and waits for the URI it prints once it accepts connections. If
// it exits first, the error has what it wrote to stderr (which says so if addr was taken).
func (sp *StoreProcess) start(addr string) error {
	cmd := exec.Command(sp.bin, "-dir", sp.dir, "-addr", addr)
	var stderr bytes.Buffer // read only once Wait has returned
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("chatstore stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start chatstore: %w", err)
	}
	sp.cmd = cmd
	uri := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n') // an empty line means it exited
		uri <- strings.TrimSpace(line)
	}()
	select {
	case sp.URI = <-uri:
		if sp.URI == "" {
			err := cmd.Wait()
			return fmt.Errorf("chatstore at %s exited before it was ready (%v): %s", addr, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	case <-time.After(time.Minute):
		sp.Stop()
		return fmt.Errorf("chatstore at %s not ready after a minute", addr)
	}
}

// Stop ends the store process gracefully and waits for it.
func (sp *StoreProcess) Stop() {
	if sp.cmd == nil || sp.cmd.ProcessState != nil {
		return
	}
	_ = sp.cmd.Process.Signal(syscall.SIGTERM) // it may have exited already; Wait tells
	_ = sp.cmd.Wait()
}
