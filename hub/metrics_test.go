package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/testenv/promtest"
)

// TestMetricsCountDeliveries: one message to three local connections is three pushes and one
// latency, measured from when the bus received it; a seq delivered already (here, or to the
// connection by its sync's replay) counts nothing, nor does a push held for a syncing connection
// until it is released.
func TestMetricsCountDeliveries(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newHub(t, hub.Config{Metrics: hub.NewMetrics(reg)})
	a1, a2, b := newConn("a"), newConn("a"), newConn("b")
	live(t, e, a1, map[string]int64{"x": 0})
	live(t, e, a2, nil)
	live(t, e, b, map[string]int64{"x": 0})
	defer func() {
		for _, c := range []*conn{a1, a2, b} {
			e.Remove(c)
		}
	}()

	const waited = 50 * time.Millisecond // in the bus before the fan-out took it
	steps := []struct {
		name       string
		do         func()
		deliveries float64
		latencies  uint64
		minLatency float64 // seconds, summed over the latencies
	}{
		{"a message to 3 connections", func() { e.DeliverMessage("x", 1, msg("x", 1), time.Now().Add(-waited)) },
			3, 1, waited.Seconds()},
		{"the same seq again", func() { e.DeliverMessage("x", 1, msg("x", 1), time.Now()) }, 3, 1, waited.Seconds()},
		{"an older seq", func() { e.DeliverMessage("x", 0, msg("x", 0), time.Now()) }, 3, 1, waited.Seconds()},
		{"a message read from the store", func() { e.DeliverMessage("x", 2, msg("x", 2), time.Time{}) }, 6, 1, waited.Seconds()},
	}
	for _, st := range steps {
		st.do()
		if got := promtest.Registered(t, reg, "chatd_deliveries_total").Value; got != st.deliveries {
			t.Errorf("%s: chatd_deliveries_total = %v, want %v", st.name, got, st.deliveries)
		}
		latency := promtest.Registered(t, reg, "chatd_deliver_seconds")
		if latency.Count != st.latencies || latency.Sum < st.minLatency {
			t.Errorf("%s: chatd_deliver_seconds has %v observations summing to %vs, want %v of at least %vs",
				st.name, latency.Count, latency.Sum, st.latencies, st.minLatency)
		}
	}

	// A connection that has not synced yet gets its push when it syncs: counted then, with no
	// latency, as it reached no outbox when delivered.
	held := newConn("c")
	add(e, held, map[string]int64{"y": 0})
	defer e.Remove(held)
	e.DeliverMessage("y", 1, msg("y", 1), time.Now())
	if got := promtest.Registered(t, reg, "chatd_deliveries_total").Value; got != 6 {
		t.Errorf("with the only connection holding: chatd_deliveries_total = %v, want 6", got)
	}
	if n := promtest.Registered(t, reg, "chatd_deliver_seconds").Count; n != 1 {
		t.Errorf("with the only connection holding: chatd_deliver_seconds has %v observations, want 1", n)
	}
	if err := e.Sync(context.Background(), held, func(hub.ReplayFunc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := promtest.Registered(t, reg, "chatd_deliveries_total").Value; got != 7 {
		t.Errorf("after the sync released it: chatd_deliveries_total = %v, want 7", got)
	}

	// A connection whose sync replayed a seq does not get it again live: nothing counted.
	replayed := newConn("d")
	add(e, replayed, map[string]int64{"z": 0})
	defer e.Remove(replayed)
	if err := e.Sync(context.Background(), replayed, func(push hub.ReplayFunc) error {
		return push("z", 1, msg("z", 1))
	}); err != nil {
		t.Fatal(err)
	}
	if !e.DeliverMessage("z", 1, msg("z", 1), time.Now()) {
		t.Fatal("z/1 not delivered")
	}
	if got := replayed.seqs("z"); len(got) != 1 {
		t.Fatalf("the replayed connection got z seqs %v, want [1] once", got)
	}
	if got := promtest.Registered(t, reg, "chatd_deliveries_total").Value; got != 7 {
		t.Errorf("after a seq the connection had from its replay: chatd_deliveries_total = %v, want 7", got)
	}
	if n := promtest.Registered(t, reg, "chatd_deliver_seconds").Count; n != 1 {
		t.Errorf("after a seq the connection had from its replay: chatd_deliver_seconds has %v observations, want 1", n)
	}
}
