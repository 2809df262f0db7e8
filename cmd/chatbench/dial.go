package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// dialer spreads connections over source addresses. One source address can hold about 28,000
// connections to one server address (net.ipv4.ip_local_port_range), so past that the generator
// needs more of them; every 127.0.0.x is a local address on Linux.
type dialer struct {
	clients []*http.Client
	n       atomic.Uint64
}

// newDialer returns a dialer over the given source IPs; none means the kernel picks.
func newDialer(sources []net.IP) *dialer {
	d := &dialer{}
	if len(sources) == 0 {
		sources = []net.IP{nil}
	}
	for _, ip := range sources {
		nd := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: -1, Control: bindAddressNoPort}
		if ip != nil {
			nd.LocalAddr = &net.TCPAddr{IP: ip}
		}
		d.clients = append(d.clients, &http.Client{Transport: &http.Transport{
			DialContext:         nd.DialContext,
			MaxIdleConnsPerHost: 64, // sign-ins reuse connections; upgraded ones leave the pool
			IdleConnTimeout:     30 * time.Second,
			ForceAttemptHTTP2:   false,
		}})
	}
	return d
}

// next returns the HTTP client of the next source address, round robin.
func (d *dialer) next() *http.Client {
	return d.clients[(d.n.Add(1)-1)%uint64(len(d.clients))]
}

// closeIdle drops the pooled sign-in connections, which would otherwise hold file descriptors.
func (d *dialer) closeIdle() {
	for _, c := range d.clients {
		c.CloseIdleConnections()
	}
}

// parseSources parses "127.0.0.2-127.0.0.40,10.0.0.5" into addresses; ranges vary the last byte.
func parseSources(spec string) ([]net.IP, error) {
	var out []net.IP
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, isRange := strings.Cut(part, "-")
		first := net.ParseIP(from).To4()
		if first == nil {
			return nil, fmt.Errorf("source %q is not an IPv4 address", from)
		}
		if !isRange {
			out = append(out, first)
			continue
		}
		last := net.ParseIP(to).To4()
		if last == nil || !first.Mask(net.CIDRMask(24, 32)).Equal(last.Mask(net.CIDRMask(24, 32))) || last[3] < first[3] {
			return nil, fmt.Errorf("source range %q must vary only the last byte, upwards", part)
		}
		for b := int(first[3]); b <= int(last[3]); b++ {
			out = append(out, net.IPv4(first[0], first[1], first[2], byte(b)).To4())
		}
	}
	return out, nil
}
