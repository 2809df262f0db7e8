package testenv

import (
	"net"
	"testing"
)

// FreePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	listeners := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find free port: %v", err)
		}
		listeners[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range listeners {
		if err := l.Close(); err != nil {
			t.Fatalf("release port: %v", err)
		}
	}
	return ports
}
