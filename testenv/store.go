package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// storeStartTimeout bounds chatstore's start, a few seconds even on a loaded machine.
const storeStartTimeout = time.Minute

// StoreProcess is a chatstore running as a child process.
type StoreProcess struct {
	*Process
	// URI is the MongoDB URI chatstore printed once it accepted connections.
	URI string
	dir string
}

// StartStoreProcess runs chatstore on dir, on a port the kernel picks, until the test ends or
// Stop is called.
func StartStoreProcess(t testing.TB, dir string) *StoreProcess {
	t.Helper()
	sp := &StoreProcess{dir: dir}
	if err := sp.start(t, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return sp
}

// StartRestartableStore is StartStoreProcess on a port picked by StartOnPorts, so that Restart
// finds its address free again.
func StartRestartableStore(t testing.TB, dir string) *StoreProcess {
	t.Helper()
	sp := &StoreProcess{dir: dir}
	StartOnPorts(t, 1, func(ports []int) error { return sp.start(t, fmt.Sprintf("127.0.0.1:%d", ports[0])) })
	return sp
}

// Restart starts a store from StartRestartableStore again after it was stopped, on the same
// directory and address, so its URI and data stay the same.
func (sp *StoreProcess) Restart(t testing.TB) {
	t.Helper()
	uri := sp.URI
	sp.Process.Restart(t)
	if err := sp.waitURI(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if sp.URI != uri {
		t.Fatalf("restarted store at %s, was %s", sp.URI, uri)
	}
}

// start runs chatstore at addr and waits for its URI. If it exits first, the error has the end of
// its log (which says so if addr was taken).
func (sp *StoreProcess) start(t testing.TB, addr string) error {
	t.Helper()
	sp.Process = StartProcess(t, t.TempDir(), "chatstore", nil, StoreBinary.Path(t), "-dir", sp.dir, "-addr", addr)
	return sp.waitURI()
}

// waitURI waits for the URI the current run prints on its own line once it accepts connections.
func (sp *StoreProcess) waitURI() error {
	return WaitStarted([]*Process{sp.Process}, storeStartTimeout, func() error {
		out, err := sp.Output()
		if err != nil {
			return err
		}
		for line := range strings.Lines(out) {
			if uri, ok := strings.CutSuffix(line, "\n"); ok && strings.HasPrefix(uri, "mongodb://") {
				sp.URI = uri
				return nil
			}
		}
		return errors.New("chatstore has not printed its URI")
	})
}
