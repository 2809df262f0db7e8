package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreePorts returns n TCP ports on 127.0.0.1 that were free a moment ago, for servers that must
// be started on a known port (child processes, restarts on the same address). They are taken below
// the kernel's ephemeral range, which is where every listener on port 0 and every outgoing
// connection gets its port: a port handed out from inside that range could be taken by another
// test's listener between this check and the server's start (a cluster test once reached another
// test's node through its load balancer so).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	low := ephemeralLow()
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close() // only held to keep this call from returning a port twice
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			t.Fatalf("find %d free ports below %d: only %d after %d tries", n, low, len(ports), tries)
		}
		port := portFloor + rand.IntN(low-portFloor)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	return ports
}

// portFloor is the lowest port FreePorts hands out: above the well-known and most registered
// service ports.
const portFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default when it cannot
// be read).
func ephemeralLow() int {
	low, high := 32768, 0
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(data), &low, &high) // unparsable: the default stays
	}
	if low <= portFloor+1000 {
		return 32768 // a range reaching down here leaves no room apart from it; use Linux's default
	}
	return low
}
