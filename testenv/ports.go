package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A server that can take any port listens on port 0 and reports the port the kernel gave it
// (chatstore prints its URI, chatd writes its -addr-file, an in-process server returns its
// listener): no other test can take that port first. StartOnPorts is for the others.

// portTries bounds StartOnPorts. One clash is rare (another test binary picking the same port,
// out of some twelve thousand, at that moment); clash after clash means something else holds the
// ports, which more tries would not fix.
const portTries = 3

// StartOnPorts calls start with n TCP ports on 127.0.0.1, for servers that must be given their
// port before they start: routes name every NATS server's cluster port, nginx listens where its
// configuration says, and a server restarted on the same address (or killed while nginx still
// lists it) keeps a port that outlives its process. Nothing holds a picked port until start binds
// it, and other test binaries pick from the same range, so start may find a port taken: when its
// error says an address was already in use, start is called again with fresh ports. Any other
// error fails the test. start must stop whatever it started before it returns an error.
//
// The ports are taken below the kernel's ephemeral range, the range every listener on port 0 and
// every outgoing connection gets its port from (a cluster test once reached another test's node
// through its load balancer so). Below it, only another pick can take a port while its server is
// down between a stop and a restart; a restart cannot move to fresh ports, and fails saying the
// address is in use if that happened.
func StartOnPorts(t testing.TB, n int, start func(ports []int) error) {
	t.Helper()
	for try := 1; ; try++ {
		ports, err := pickPorts(n)
		if err != nil {
			t.Fatal(err)
		}
		err = start(ports)
		if err == nil {
			return
		}
		if !addrInUse(err) || try == portTries {
			t.Fatalf("start on ports %v (try %d of %d): %v", ports, try, portTries, err)
		}
		t.Logf("ports %v: one was taken before the server bound it; trying fresh ones: %v", ports, err)
	}
}

// addrInUse reports whether err says a listener could not bind because its address was in use:
// the error itself for an in-process server, the child's log text for a child process (Go and
// nats-server say "address already in use", nginx "Address already in use").
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(strings.ToLower(err.Error()), "address already in use")
}

// pickPorts returns n distinct ports below the ephemeral range that were free a moment ago.
func pickPorts(n int) ([]int, error) {
	low := ephemeralLow()
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close() // held only so that this pick does not return a port twice
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("find %d free ports below %d: only %d after %d tries", n, low, len(ports), tries)
		}
		port := portFloor + rand.IntN(low-portFloor)
		// Skipping a port in use now saves a failed start; it is no promise for later.
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// portFloor is the lowest port StartOnPorts hands out: above the well-known and most registered
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

// HoldsPort returns nil if process pid has a socket listening on 127.0.0.1:port, and an error
// otherwise. A child process given a picked port that it finds taken keeps running for a while
// (nginx retries its bind for seconds; chatd binds after it has connected to NATS and the store),
// and meanwhile whatever took the port answers there: a probe of the port alone would take that
// for the child, so a start waits for this first. It reads Linux's /proc.
func HoldsPort(pid, port int) error {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return fmt.Errorf("read sockets: %w", err)
	}
	// /proc/net/tcp: "sl local_address rem_address st ... inode", the address as the kernel's
	// 32-bit word in hex, the port in hex, st 0A for LISTEN.
	local := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(net.IPv4(127, 0, 0, 1).To4()), port)
	sockets := make(map[string]bool)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" {
			sockets["socket:["+f[9]+"]"] = true
		}
	}
	if len(sockets) > 0 {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return fmt.Errorf("list descriptors of process %d: %w", pid, err)
		}
		for _, fd := range fds {
			if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && sockets[target] {
				return nil
			}
		}
	}
	return fmt.Errorf("process %d does not listen on 127.0.0.1:%d", pid, port)
}
