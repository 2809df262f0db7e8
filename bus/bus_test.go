package bus_test

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/bus"
	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a test leaves a dispatcher (or a NATS goroutine) running.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// event is one Handler call.
type event struct{ kind, id, data string }

func (e event) String() string { return e.kind + "(" + e.id + ", " + e.data + ")" }

// recorder is a Handler that records every call. A conversation listed in hold blocks its
// dispatcher: the call reports on entered and returns once hold's channel is closed.
type recorder struct {
	hold    map[string]chan struct{}
	entered chan string

	mu     sync.Mutex
	events []event
	// received holds the receive time HandleMessage was given, per message in arrival order.
	received []time.Time
}

func (r *recorder) record(kind, id string, data []byte) {
	if h, ok := r.hold[id]; ok {
		r.entered <- id
		<-h
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{kind, id, string(data)})
}

func (r *recorder) HandleMessage(id string, data []byte, received time.Time) {
	r.mu.Lock()
	r.received = append(r.received, received)
	r.mu.Unlock()
	r.record("msg", id, data)
}
func (r *recorder) HandleChange(id string, data []byte) { r.record("chg", id, data) }
func (r *recorder) HandleConversationEvent(id string, data []byte) {
	r.record("evt", id, data)
}
func (r *recorder) HandleUserEvent(id string, data []byte) { r.record("user", id, data) }

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// of is the recorded events whose id is id.
func (r *recorder) of(id string) []event {
	return slices.DeleteFunc(r.snapshot(), func(e event) bool { return e.id != id })
}

// startNATS starts a core NATS server on a random port for the test.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready in 5s")
	}
	return s.ClientURL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// setup starts a server, a bus on its own connection handing events to h, and a second
// connection that stands for the other nodes publishing. The bus closes when the test ends.
func setup(t *testing.T, cfg bus.Config, h bus.Handler) (b *bus.Bus, busConn, other *nats.Conn) {
	t.Helper()
	url := startNATS(t)
	busConn, other = connect(t, url), connect(t, url)
	b = bus.New(cfg, busConn, zerolog.Nop())
	b.SetHandler(h)
	t.Cleanup(b.Close)
	return b, busConn, other
}

// flush waits until the server has processed everything sent on nc (a subscription, say).
func flush(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("flush nats connection: %v", err)
	}
}

func publish(t *testing.T, nc *nats.Conn, subject, data string) {
	t.Helper()
	if err := nc.Publish(subject, []byte(data)); err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
}

// holdSlow publishes a message of the conversation "slow", which r holds, and waits until it
// holds up its dispatcher in the handler.
func holdSlow(t *testing.T, other *nats.Conn, r *recorder) {
	t.Helper()
	publish(t, other, "chat.conv.slow.msg", "big fan-out")
	select {
	case <-r.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow conversation's message never reached the handler")
	}
}

// waitEvents waits until the events recorded for id are exactly want.
func waitEvents(t *testing.T, r *recorder, id string, want ...event) {
	t.Helper()
	testenv.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		if got := r.of(id); !slices.Equal(got, want) {
			return fmt.Errorf("events of %s = %v, want %v (all events: %v)", id, got, want, r.snapshot())
		}
		return nil
	})
}

func TestWatchAndUnwatchConversation(t *testing.T) {
	r := &recorder{}
	// One dispatcher handles every subject in arrival order, so once an event published after
	// them has arrived, events that were going to arrive have.
	b, busConn, other := setup(t, bus.Config{Dispatchers: 1}, r)
	b.WatchConversation("c1")
	b.WatchConversation("c2")
	flush(t, busConn)

	publish(t, other, "chat.conv.c1.msg", "m1")
	publish(t, other, "chat.conv.c1.evt", "e1")
	waitEvents(t, r, "c1", event{"msg", "c1", "m1"}, event{"evt", "c1", "e1"})
	// The bus's own PublishConversation, from another connection than those two: only now is
	// its order after them certain.
	if err := b.PublishConversation("c1", []byte("e2")); err != nil {
		t.Fatalf("publish conversation event: %v", err)
	}
	waitEvents(t, r, "c1", event{"msg", "c1", "m1"}, event{"evt", "c1", "e1"}, event{"evt", "c1", "e2"})

	b.UnwatchConversation("c1")
	flush(t, busConn)
	publish(t, other, "chat.conv.c1.msg", "after unwatch")
	publish(t, other, "chat.conv.c1.evt", "after unwatch")
	publish(t, other, "chat.conv.c2.evt", "marker")
	waitEvents(t, r, "c2", event{"evt", "c2", "marker"})
	if got := r.of("c1"); len(got) != 3 {
		t.Fatalf("events of c1 after UnwatchConversation = %v, want the 3 from before", got)
	}
}

func TestUserEvents(t *testing.T) {
	r := &recorder{}
	b, busConn, other := setup(t, bus.Config{}, r)
	b.WatchUser("u1")
	flush(t, busConn)

	// PublishUser from another node's bus reaches this one.
	sender := bus.New(bus.Config{}, other, zerolog.Nop())
	t.Cleanup(sender.Close)
	if err := sender.PublishUser("u1", []byte("badge")); err != nil {
		t.Fatalf("publish user event: %v", err)
	}
	publish(t, other, "chat.user.u2", "not watched")
	waitEvents(t, r, "u1", event{"user", "u1", "badge"})
	if got := r.of("u2"); len(got) != 0 {
		t.Fatalf("events of unwatched u2 = %v, want none", got)
	}
}

func TestConversationEventsArriveInPublishOrder(t *testing.T) {
	const n = 1000
	r := &recorder{}
	b, busConn, other := setup(t, bus.Config{}, r)
	b.WatchConversation("c1")
	flush(t, busConn)

	// Messages, changes and events interleaved: one conversation's events share one order (a
	// change never overtakes the message it changes). Each payload is its own publish number.
	var want []event
	for i := range n {
		kind := []string{"msg", "chg", "evt"}[i%3]
		publish(t, other, "chat.conv.c1."+kind, strconv.Itoa(i))
		want = append(want, event{kind, "c1", strconv.Itoa(i)})
	}
	testenv.CheckFor(t, 10*time.Second, 2*time.Millisecond, func() error {
		if got := r.of("c1"); len(got) < n {
			return fmt.Errorf("%d of %d events arrived", len(got), n)
		}
		return nil
	})
	got := r.of("c1")
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d arrived as %v, want %v (%v ... )", i, got[i], want[i], got[max(0, i-3):min(len(got), i+3)])
		}
	}
	if len(got) != n {
		t.Fatalf("%d events arrived, want %d: %v", len(got), n, got[n:])
	}
}

func TestBlockedConversationDoesNotHoldUpOthers(t *testing.T) {
	// The dispatcher of a conversation is a hash of its id under a seed the bus picks at random,
	// so the test cannot choose ids that land apart. It watches many and expects only that some
	// land off the blocked conversation's dispatcher: all 32 sharing one of 4 dispatchers has
	// probability 4^-32 = 2^-64. A handler that holds up every conversation fails every time.
	const dispatchers, others = 4, 32
	release := make(chan struct{})
	r := &recorder{hold: map[string]chan struct{}{"slow": release}, entered: make(chan string, 1)}
	b, busConn, other := setup(t, bus.Config{Dispatchers: dispatchers}, r)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // runs before b.Close, which waits for the handler
	ids := []string{"slow"}
	for i := range others {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	for _, id := range ids {
		b.WatchConversation(id)
	}
	flush(t, busConn)

	holdSlow(t, other, r)
	for _, id := range ids[1:] {
		publish(t, other, "chat.conv."+id+".msg", "hi")
	}
	testenv.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		if got := r.snapshot(); len(got) == 0 {
			return fmt.Errorf("no event of %d other conversations arrived while one handler call blocked", others)
		}
		return nil
	})
	t.Logf("%d of %d other conversations got through while one handler call blocked", len(r.snapshot()), others)

	// Those behind the slow one are delayed, not lost.
	unblock()
	testenv.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		if got := r.snapshot(); len(got) != len(ids) {
			return fmt.Errorf("%d of %d events arrived after the slow handler returned: %v", len(got), len(ids), got)
		}
		return nil
	})
}

func TestCloseStopsDispatchers(t *testing.T) {
	url := startNATS(t)
	busConn, other := connect(t, url), connect(t, url)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the server's and connections' goroutines outlive the bus

	r := &recorder{}

	b := bus.New(bus.Config{Dispatchers: 8}, busConn, zerolog.Nop())
	b.SetHandler(r)
	b.WatchConversation("c9")
	flush(t, busConn)
	publish(t, other, "chat.conv.c9.msg", "m1")
	waitEvents(t, r, "c9", event{"msg", "c9", "m1"})
	b.Close()
}
