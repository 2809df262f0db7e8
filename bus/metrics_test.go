package bus_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/bus"
	"github.com/chatd/chatd/testenv/promtest"
)

// TestMetricsCountReceivedByKind: every message taken from NATS counts once under the kind of
// its subject, and a persisted message reaches the handler with the time it was received.
func TestMetricsCountReceivedByKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := &recorder{}
	b, busConn, other := setup(t, bus.Config{Dispatchers: 1, Metrics: bus.NewMetrics(reg)}, r)
	b.WatchConversation("c1")
	b.WatchUser("u1")
	flush(t, busConn)

	before := time.Now()
	publish(t, other, "chat.conv.c1.msg", "m1")
	promtest.WaitFor(t, reg, 5*time.Second, 1, "chatd_bus_messages_received_total", "kind", "message")
	waitEvents(t, r, "c1", event{"msg", "c1", "m1"})
	r.mu.Lock()
	received := r.received
	r.mu.Unlock()
	if len(received) != 1 || received[0].Before(before) || received[0].After(time.Now()) {
		t.Errorf("HandleMessage got receive times %v, want one between the publish (%v) and now", received, before)
	}

	publish(t, other, "chat.conv.c1.evt", "e1")
	publish(t, other, "chat.conv.c1.evt", "e2")
	publish(t, other, "chat.user.u1", "badge")
	publish(t, other, "chat.conv.c1.unknown", "ignored")
	promtest.WaitFor(t, reg, 5*time.Second, 2, "chatd_bus_messages_received_total", "kind", "conversation_event")
	promtest.WaitFor(t, reg, 5*time.Second, 1, "chatd_bus_messages_received_total", "kind", "user_event")
	promtest.WaitFor(t, reg, 5*time.Second, 1, "chatd_bus_messages_received_total", "kind", "other")
	if got := promtest.Registered(t, reg, "chatd_bus_messages_received_total", "kind", "message").Value; got != 1 {
		t.Errorf(`chatd_bus_messages_received_total{kind="message"} = %v after events only, want still 1`, got)
	}
}

// TestMetricsGaugeSubscriptionsAndQueue: the subscriptions gauge follows watches and unwatches
// (a repeated watch replaces its subscription) and drops to nothing when the bus closes; the
// queue gauge counts what waits behind a busy dispatcher.
func TestMetricsGaugeSubscriptionsAndQueue(t *testing.T) {
	url := startNATS(t)
	busConn, other := connect(t, url), connect(t, url)
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // before Close, which waits for the handler
	r := &recorder{hold: map[string]chan struct{}{"slow": release}, entered: make(chan string, 1)}
	b := bus.New(bus.Config{Dispatchers: 1, Metrics: bus.NewMetrics(reg)}, busConn, zerolog.Nop())
	b.SetHandler(r)
	closed := false
	defer func() {
		if !closed {
			unblock()
			b.Close()
		}
	}()

	subscriptions := func() float64 { return promtest.Registered(t, reg, "chatd_bus_subscriptions").Value }
	for _, st := range []struct {
		name string
		do   func()
		want float64
	}{
		{"nothing watched", func() {}, 0},
		{"two conversations and a user", func() { b.WatchConversation("slow"); b.WatchConversation("c1"); b.WatchUser("u1") }, 3},
		{"a conversation watched again", func() { b.WatchConversation("c1") }, 3},
		{"a user unwatched", func() { b.UnwatchUser("u1") }, 2},
		{"a user never watched unwatched", func() { b.UnwatchUser("u2") }, 2},
	} {
		st.do()
		if got := subscriptions(); got != st.want {
			t.Errorf("%s: chatd_bus_subscriptions = %v, want %v", st.name, got, st.want)
		}
	}
	flush(t, busConn)

	holdSlow(t, other, r)
	for i := range 3 {
		publish(t, other, "chat.conv.c1.msg", fmt.Sprint(i))
	}
	promtest.WaitFor(t, reg, 5*time.Second, 3, "chatd_bus_dispatch_queue_depth")
	unblock()
	waitEvents(t, r, "c1", event{"msg", "c1", "0"}, event{"msg", "c1", "1"}, event{"msg", "c1", "2"})
	if got := promtest.Registered(t, reg, "chatd_bus_dispatch_queue_depth").Value; got != 0 {
		t.Errorf("chatd_bus_dispatch_queue_depth = %v once all was handled, want 0", got)
	}

	b.Close()
	closed = true
	if got := subscriptions(); got != 0 {
		t.Errorf("chatd_bus_subscriptions = %v after Close, want 0", got)
	}
}
