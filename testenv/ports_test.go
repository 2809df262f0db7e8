package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/chatd/chatd/embedded"
)

// TestMain fails the package if a goroutine outlives the tests (a NATS server that failed to
// start, say).
func TestMain(m *testing.M) { VerifyTestMain(m) }

// listenAt takes 127.0.0.1:port for the rest of the test, as a server of a test binary running
// beside would.
func listenAt(t *testing.T, port int) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestStartOnPortsTriesAgainWhenAPortIsTaken: a port taken between the pick and the server's
// bind (the failure of issue 32: "bind: address already in use" from the store of
// TestHardeningReadyzSaysWhatInWords) costs a second try, not the test. The first try's port is
// taken before chatstore starts on it; chatstore exits saying so, and StartOnPorts starts it again
// on a fresh port.
func TestStartOnPortsTriesAgainWhenAPortIsTaken(t *testing.T) {
	sp := &StoreProcess{dir: t.TempDir()}
	var tries [][]int
	var firstErr error
	StartOnPorts(t, 1, func(ports []int) error {
		tries = append(tries, ports)
		if len(tries) == 1 {
			listenAt(t, ports[0])
			firstErr = sp.start(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
			return firstErr
		}
		return sp.start(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	})
	if len(tries) != 2 || firstErr == nil || !addrInUse(firstErr) {
		t.Fatalf("%d tries on %v, the first failing with %v; want 2, the first on a taken port", len(tries), tries, firstErr)
	}
	port := tries[1][0]
	if want := fmt.Sprintf("mongodb://127.0.0.1:%d/", port); sp.URI != want {
		t.Fatalf("store at %s, want %s", sp.URI, want)
	}
	if err := HoldsPort(sp.Pid(), port); err != nil {
		t.Fatalf("the store does not hold the port of the second try: %v", err)
	}
}

// TestHoldsPortTellsWhoseListenerItIs: a probe of a port reaches whoever listens there; HoldsPort
// says whether that is the process the test started.
func TestHoldsPortTellsWhoseListenerItIs(t *testing.T) {
	mine := listenAt(t, 0).Addr().(*net.TCPAddr).Port
	store := StartStoreProcess(t, t.TempDir())
	var storePort int
	if _, err := fmt.Sscanf(store.URI, "mongodb://127.0.0.1:%d/", &storePort); err != nil {
		t.Fatalf("store URI %s: %v", store.URI, err)
	}
	for _, c := range []struct {
		pid, port int
		holds     bool
	}{
		{os.Getpid(), mine, true},
		{store.Pid(), storePort, true},
		{store.Pid(), mine, false},
		{os.Getpid(), storePort, false},
	} {
		if err := HoldsPort(c.pid, c.port); (err == nil) != c.holds {
			t.Errorf("HoldsPort(%d, %d) = %v; want held: %t", c.pid, c.port, err, c.holds)
		}
	}
}

// TestNATSOnATakenPortSaysSo: an in-process NATS server whose client or cluster port is taken
// fails its start at once, saying so, so StartOnPorts can tell a clash (NATSCluster, a server
// restarted on its port) and need not wait out the start's timeout.
func TestNATSOnATakenPortSaysSo(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		port := listenAt(t, 0).Addr().(*net.TCPAddr).Port
		cfg := embedded.NATSConfig{Port: port, StoreDir: t.TempDir()}
		if cluster {
			cfg = embedded.NATSConfig{Name: "n1", StoreDir: t.TempDir(), ClusterName: "test", ClusterPort: port,
				Routes: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}}
		}
		began := time.Now()
		ns, err := embedded.StartNATS(cfg)
		if err == nil {
			ns.Shutdown()
			t.Fatalf("cluster %t: started on taken port %d", cluster, port)
		}
		if !addrInUse(err) {
			t.Errorf("cluster %t: %v; want it to say the address is in use", cluster, err)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("cluster %t: failed after %s", cluster, took)
		}
	}
}

// TestAddrInUse: what in-process servers and child processes say when their port is taken.
func TestAddrInUse(t *testing.T) {
	l := listenAt(t, 0)
	_, bindErr := net.Listen("tcp", l.Addr().String())
	for _, c := range []struct {
		err  error
		want bool
	}{
		{bindErr, true},
		{fmt.Errorf("start node: listen on 127.0.0.1:1: %w", bindErr), true},
		{errors.New(`chatd exited: {"level":"error","error":"listen on 127.0.0.1:20001: listen tcp 127.0.0.1:20001: bind: address already in use"}`), true},
		{errors.New(`nginx: [emerg] bind() to 127.0.0.1:20001 failed (98: Address already in use)`), true},
		{errors.New("chatstore not ready after a minute"), false},
		{errors.New("listen tcp 127.0.0.1:80: bind: permission denied"), false},
	} {
		if got := addrInUse(c.err); got != c.want {
			t.Errorf("addrInUse(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}
