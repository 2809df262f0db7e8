package session_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv/promtest"
)

// The tests read every value from the registry by its exposed name, as a scraper and the
// dashboard do, so a renamed metric or label fails them.

// metricIs checks a series' value now; the series must exist.
func metricIs(t *testing.T, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	if got := promtest.Registered(t, reg, name, labels...).Value; got != want {
		t.Fatalf("%s%v = %v; want %v", name, labels, got, want)
	}
}

// metricSum adds up every series of name.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	var sum float64
	for _, s := range promtest.Gather(t, reg) {
		if s.Name == name {
			sum += s.Value
		}
	}
	return sum
}

func metricsConfig(cfg session.Config) (session.Config, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	cfg.Metrics = session.NewMetrics(reg)
	return cfg, reg
}

// Opened sessions are counted and open; each end is counted by the code seen: a client's own
// close code, or 1006 when its connection just broke.
func TestMetricsCountConnections(t *testing.T) {
	cfg, reg := metricsConfig(session.Config{})
	srv := startServer(t, serverOptions{cfg: cfg})
	a, b := srv.dial("alice"), srv.dial("bob")
	a.read()
	b.read()
	promtest.WaitFor(t, reg, pollTimeout, 2, "chatd_connections_opened_total")
	promtest.WaitFor(t, reg, pollTimeout, 2, "chatd_connections_open")

	_ = a.conn.Close(websocket.StatusNormalClosure, "")
	promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_connections_open")
	promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_connections_closed_total", "code", "1000")

	_ = b.conn.CloseNow() // no close frame: the server sees the connection break
	promtest.WaitFor(t, reg, pollTimeout, 0, "chatd_connections_open")
	promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_connections_closed_total", "code", "1006")
	metricIs(t, reg, 2, "chatd_connections_opened_total")
	if got := metricSum(t, reg, "chatd_connections_closed_total"); got != 2 {
		t.Fatalf("chatd_connections_closed_total sums to %v over its codes; want 2", got)
	}
}

// refusingHandler refuses every session as past the per-user connection cap.
type refusingHandler struct{}

func (refusingHandler) Opened(context.Context, *session.Session) error {
	return protocol.Errorf(protocol.CodeRateLimited, "too many connections")
}

func (refusingHandler) HandleFrame(context.Context, *session.Session, protocol.ClientFrame) error {
	return nil
}

func (refusingHandler) Closed(*session.Session) {}

// A session refused by Opened with too many connections is counted as closed with 4029, and
// never as opened.
func TestMetricsCountSessionsRefusedAtOpen(t *testing.T) {
	cfg, reg := metricsConfig(session.Config{})
	served := make(chan error, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := session.Accept(w, r, nil)
		if err != nil {
			served <- err
			return
		}
		served <- session.New(conn, "alice", session.Peer{}, cfg, nil, zerolog.Nop()).Serve(context.Background(), refusingHandler{})
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	transport := &http.Transport{}
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"),
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	transport.CloseIdleConnections()
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != session.StatusTooManyConnections {
		t.Fatalf("read on a refused session: %v; want a close with %v", err, session.StatusTooManyConnections)
	}
	if err := receive(t, "Serve to return", served); err == nil {
		t.Fatal("Serve of a refused session returned nil; want the Opened error")
	}
	metricIs(t, reg, 1, "chatd_connections_closed_total", "code", "4029")
	metricIs(t, reg, 0, "chatd_connections_opened_total")
	metricIs(t, reg, 0, "chatd_connections_open")
}

// Client frames are counted by type; a type the protocol does not define is counted as unknown,
// never under the client's string, and a frame that is not JSON as invalid.
func TestMetricsCountFramesByType(t *testing.T) {
	cfg, reg := metricsConfig(session.Config{})
	srv := startServer(t, serverOptions{cfg: cfg})
	c := srv.dial("alice")
	c.read()
	for i := range 5 {
		id := fmt.Sprint("t", i)
		c.send(typing(id, "c1"))
		c.reply(id)
	}
	for i := range 3 {
		id := fmt.Sprint("l", i)
		c.send(list(id))
		c.reply(id)
	}
	c.stillOpen("p1")
	const secret = "x-user-42-conversation-7"
	c.send(map[string]any{"type": secret, "id": "u1"})
	if f := c.reply("u1"); f.Code != protocol.CodeUnknownType {
		t.Fatalf("a frame of an unknown type got %+v; want unknown_type", f)
	}
	if err := c.sendRaw([]byte("not json")); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.stillOpen("p2") // the reader handles frames in order: the bad frame has been counted

	metricIs(t, reg, 5, "chatd_frames_received_total", "type", protocol.TypeTyping)
	metricIs(t, reg, 3, "chatd_frames_received_total", "type", protocol.TypeListConversations)
	metricIs(t, reg, 2, "chatd_frames_received_total", "type", protocol.TypePing)
	metricIs(t, reg, 1, "chatd_frames_received_total", "type", "unknown")
	metricIs(t, reg, 1, "chatd_frames_received_total", "type", "invalid")
	if got := metricSum(t, reg, "chatd_frames_received_total"); got != 12 {
		t.Fatalf("chatd_frames_received_total sums to %v; want 12, one per frame sent", got)
	}
	for _, s := range promtest.Gather(t, reg) {
		for label, value := range s.Labels {
			if strings.Contains(value, secret) {
				t.Fatalf("%s has a series labelled %s=%q, a string the client sent", s.Name, label, value)
			}
		}
	}
}

// Every error frame answering a client frame is counted once under its code: refusals of the
// session's limits, frames that do not decode, and errors of the handler.
func TestMetricsCountRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    session.Config
		handle func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error
		frames func(c *client) string // sends the frames; returns the id of the one refused
		code   string
	}{
		{
			name: "rate limited",
			cfg:  session.Config{FrameRate: 0.001, FrameBurst: 1}, // one frame, then no refill to speak of
			frames: func(c *client) string {
				c.send(list("ok"))
				c.reply("ok")
				c.send(list("refused"))
				return "refused"
			},
			code: protocol.CodeRateLimited,
		},
		{
			name: "bad frame",
			frames: func(c *client) string {
				if err := c.sendRaw([]byte(`{"type":"list_conversations","id":"bad"`)); err != nil {
					c.t.Fatalf("send: %v", err)
				}
				return ""
			},
			code: protocol.CodeBadFrame,
		},
		{
			name: "handler error",
			handle: func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
				return protocol.Errorf(protocol.CodeNotMember, "not a member")
			},
			frames: func(c *client) string {
				c.send(typing("nm", "c1"))
				return "nm"
			},
			code: protocol.CodeNotMember,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, reg := metricsConfig(tc.cfg)
			srv := startServer(t, serverOptions{cfg: cfg, handle: tc.handle})
			c := srv.dial("alice")
			c.read()
			id := tc.frames(c)
			if f := c.reply(id); f.Type != protocol.TypeError || f.Code != tc.code {
				t.Fatalf("got %+v; want an error frame with %s", f, tc.code)
			}
			// Counted once the error frame is queued, which may be just after the client reads it.
			promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_frames_refused_total", "code", tc.code)
			if got := metricSum(t, reg, "chatd_frames_refused_total"); got != 1 {
				t.Fatalf("chatd_frames_refused_total sums to %v; want 1, the one error frame", got)
			}
		})
	}
}

// The writer counts each frame and its bytes.
func TestMetricsCountWrites(t *testing.T) {
	cfg, reg := metricsConfig(session.Config{})
	srv := startServer(t, serverOptions{cfg: cfg})
	c := srv.dial("alice")
	c.read()
	var bytes int
	for i, n := range []int{100, 2000, 30000} {
		frame := frameOfSize(fmt.Sprint("f", i), n)
		bytes += len(frame)
		if !c.sess.Push(frame) {
			t.Fatalf("push %d refused", i)
		}
	}
	eventually(t, "the pushed frames", func() (bool, string) {
		n, ended, status := c.progress()
		return n == 3, fmt.Sprintf("%d frames, ended=%v status=%v", n, ended, status)
	})
	promtest.WaitFor(t, reg, pollTimeout, 3, "chatd_frames_written_total")
	promtest.WaitFor(t, reg, pollTimeout, float64(bytes), "chatd_bytes_written_total")
}

// For a reader who falls behind, ephemeral frames replaced by a newer one of the same key are
// counted as coalesced, and those past MaxEphemeral keys as dropped.
func TestMetricsCountEphemeralFrames(t *testing.T) {
	const maxEphemeral = 4
	cfg, reg := metricsConfig(session.Config{MaxEphemeral: maxEphemeral})
	srv := startServer(t, serverOptions{cfg: cfg, smallBuffers: true})
	c := srv.dial("alice")
	// A frame larger than the socket buffers keeps the writer busy until the client reads, so
	// the ephemeral frames below wait.
	if !c.sess.Push(frameOfSize("blocker", 1<<20)) {
		t.Fatal("push of the blocking frame refused")
	}
	for i := range 10 {
		total := int64(i)
		data, _ := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeBadge, Total: &total})
		c.sess.PushEphemeral("badge", data)
	}
	for i := range 10 {
		data, _ := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeCursor, ConversationID: fmt.Sprint("c", i)})
		c.sess.PushEphemeral(fmt.Sprint("cursor:c", i), data)
	}
	// The badge holds one of the four keys, so three cursors wait and seven are dropped.
	metricIs(t, reg, 9, "chatd_ephemeral_frames_coalesced_total")
	metricIs(t, reg, 7, "chatd_ephemeral_frames_dropped_total")
	if got := c.sess.EphemeralDropped(); got != 16 {
		t.Fatalf("EphemeralDropped = %d; want 16, the coalesced and the dropped", got)
	}
	c.read()
	c.stillOpen("p1")
}

// A client that stops reading what it must receive is counted as cut with 4008 both ways.
func TestMetricsCountSlowConsumerCuts(t *testing.T) {
	const frameSize = 1 << 10
	cfg, reg := metricsConfig(session.Config{MaxQueuedBytes: 64 << 10})
	srv := startServer(t, serverOptions{cfg: cfg, smallBuffers: true})
	c := srv.dial("alice")
	for pushed := 0; c.sess.Push(frameOfSize("m", frameSize)); pushed += frameSize {
		if pushed > 64<<20 {
			t.Fatalf("pushed %d bytes to a client that does not read without a cut", pushed)
		}
	}
	metricIs(t, reg, 1, "chatd_slow_consumer_cuts_total")
	c.read()
	c.closedWith(session.StatusSlowConsumer)
	promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_connections_closed_total", "code", "4008")
	promtest.WaitFor(t, reg, pollTimeout, 0, "chatd_connections_open")
	metricIs(t, reg, 1, "chatd_slow_consumer_cuts_total")
}

// A peer that stops answering pings is counted as closed with 1008 and its cut is logged at
// warn with user, session and remote address.
func TestPingTimeoutIsCountedAndLogged(t *testing.T) {
	const interval = 20 * time.Millisecond
	cfg, reg := metricsConfig(session.Config{PingInterval: interval, PongTimeout: 3 * interval})
	srv := startServer(t, serverOptions{cfg: cfg})
	c := srv.dial("alice") // not reading, so its pongs are never sent
	receive(t, "the session to give up on the silent peer", c.sess.Done())
	c.read()
	c.closedWith(websocket.StatusPolicyViolation)
	promtest.WaitFor(t, reg, pollTimeout, 1, "chatd_connections_closed_total", "code", "1008")
	lines := srv.log.Lines(t, "ping timeout; closing")
	if len(lines) != 1 {
		t.Fatalf("got %d ping timeout lines; want 1; logs:\n%s", len(lines), srv.log.String())
	}
	l := lines[0]
	if l["level"] != "warn" || l["user"] != "alice" || l["session"] != c.sess.ID() || l["remote"] == "" || l["closeCode"] != 1008.0 {
		t.Fatalf("ping timeout logged as %v; want warn with user, session, remote and close code", l)
	}
}

// A flood of cuts over sessions sharing a Limits writes a bounded number of lines, and the next
// line after a pause says how many were held back, so none goes unaccounted.
func TestCutLogsAreRateLimited(t *testing.T) {
	const flood = 60
	const msg = "slow consumer: write queue full; closing"
	// One frame is past four times a one-byte queue: every first push cuts its session at once.
	cfg := session.Config{MaxQueuedBytes: 1}
	srv := startServer(t, serverOptions{cfg: cfg, limits: session.NewLimits(cfg)})
	clients := make([]*client, flood+1)
	for i := range clients {
		clients[i] = srv.dial(fmt.Sprint("user", i))
		clients[i].read()
	}
	start := time.Now()
	for _, c := range clients[:flood] {
		if c.sess.Push(frameOfSize("m", 100)) {
			t.Fatal("push past the queue limit was taken")
		}
	}
	elapsed := time.Since(start)
	for _, c := range clients[:flood] {
		c.closedWith(session.StatusSlowConsumer)
		receive(t, "the cut session to end", srv.handler.closed)
	}
	logged := len(srv.log.Lines(t, msg))
	// 20 at once and 5 a second; the margin is for a machine slow enough to spread the flood.
	if limit := 20 + 5*int(elapsed/time.Second+1); logged > limit || logged == 0 {
		t.Fatalf("%d cuts in %v wrote %d lines; want between 1 and %d", flood, elapsed, logged, limit)
	}

	time.Sleep(300 * time.Millisecond) // the budget refills at 5 lines a second; refilling is the point
	if clients[flood].sess.Push(frameOfSize("m", 100)) {
		t.Fatal("push past the queue limit was taken")
	}
	lines := srv.log.Lines(t, msg)
	if len(lines) != logged+1 {
		t.Fatalf("the cut after the pause wrote %d lines; want 1", len(lines)-logged)
	}
	// Each line counts the cuts held back since the line before it. On a loaded machine the flood
	// may outlast a refill, so a line written during it may carry part of the count.
	var reported float64
	for _, l := range lines {
		if n, ok := l["suppressedCutLogs"].(float64); ok {
			reported += n
		}
	}
	if want := float64(flood + 1 - len(lines)); reported != want {
		t.Fatalf("the lines say %v cuts were suppressed; want %v (%d cuts, %d lines)", reported, want, flood+1, len(lines))
	}
	last := lines[len(lines)-1]
	if last["level"] != "warn" || last["user"] != fmt.Sprint("user", flood) || last["remote"] == "" {
		t.Fatalf("cut logged as %v; want warn with the user and remote address", last)
	}
}

// Without Metrics (the default) every path that records runs and records nothing.
func TestNilMetricsRecordNothing(t *testing.T) {
	srv := startServer(t, serverOptions{cfg: session.Config{MaxQueuedBytes: 64 << 10}})
	c := srv.dial("alice")
	c.read()
	c.send(map[string]any{"type": "nonsense", "id": "u1"})
	c.reply("u1")
	c.send(list("l1"))
	c.reply("l1")
	c.sess.PushEphemeral("badge", []byte(`{"type":"badge"}`))
	c.sess.Push(frameOfSize("m", 100))
	c.stillOpen("p1")
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	receive(t, "the session to end", srv.handler.closed)
}
