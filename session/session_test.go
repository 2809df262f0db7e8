package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
)

// A frame whose work blocks must not stop the reader: pings are answered, other conversations
// proceed, and frames of the blocked conversation wait their turn and are answered in order.
func TestReaderKeepsReadingWhileFramesInFlight(t *testing.T) {
	releaseA1 := make(chan struct{})
	var a1Done, a2SawA1Done atomic.Bool
	a2Started := make(chan struct{})
	srv := startServer(t, serverOptions{handle: func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
		switch f.ID {
		case "a1":
			select {
			case <-releaseA1:
			case <-ctx.Done():
				return ctx.Err()
			}
			a1Done.Store(true)
		case "a2":
			a2SawA1Done.Store(a1Done.Load())
			close(a2Started)
		}
		return s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	}})
	c := srv.dial("alice")
	c.read()

	c.send(typing("a1", "A"))
	c.stillOpen("p1") // answered while a1 is blocked
	c.send(typing("b1", "B"))
	if f := c.reply("b1"); f.Type != protocol.TypeOK {
		t.Fatalf("b1 answered with %+v; want ok", f)
	}
	c.send(typing("a2", "A"))
	c.stillOpen("p2") // the reader has handed a2 on by now
	close(releaseA1)
	c.reply("a2")
	<-a2Started
	if !a2SawA1Done.Load() {
		t.Fatal("a2 was handled while a1 of the same conversation was still running")
	}
	frames, _, _ := c.snapshot()
	var order []string
	for _, f := range frames {
		if f.ID == "a1" || f.ID == "a2" {
			order = append(order, f.ID)
		}
	}
	if strings.Join(order, ",") != "a1,a2" {
		t.Fatalf("replies of conversation A came as %v; want [a1 a2]", order)
	}
}

// Past MaxInFlight frames at once, a frame is refused with a retry hint and the socket stays
// open; a frame waiting for its conversation's turn holds a slot too.
func TestInFlightCapRefusesExtraFrames(t *testing.T) {
	release := make(chan struct{})
	srv := startServer(t, serverOptions{
		cfg: session.Config{MaxInFlight: 4},
		handle: func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
		},
	})
	c := srv.dial("alice")
	c.read()

	// f2 and f3 share a conversation, so f3 waits for f2; the reader sees them in this order.
	for _, f := range []map[string]any{list("f0"), list("f1"), typing("f2", "X"), typing("f3", "X"), list("f4"), typing("f5", "Y")} {
		c.send(f)
	}
	for _, id := range []string{"f4", "f5"} {
		f := c.reply(id)
		if f.Type != protocol.TypeError || f.Code != protocol.CodeRateLimited || !f.Retryable || f.RetryAfterMs != 50 {
			t.Fatalf("%s answered with %+v; want a retryable rate_limited error with retryAfterMs 50", id, f)
		}
	}
	c.stillOpen("p1")
	close(release)
	for _, id := range []string{"f0", "f1", "f2", "f3"} {
		if f := c.reply(id); f.Type != protocol.TypeOK {
			t.Fatalf("%s answered with %+v; want ok", id, f)
		}
	}
	c.send(list("f6")) // the slots were given back
	if f := c.reply("f6"); f.Type != protocol.TypeOK {
		t.Fatalf("f6 answered with %+v; want ok", f)
	}
}

// A burst of 10,000 pings from a client that reads is answered ping by ping, with pongs or
// refusals, and the socket stays open; waiting as long as the last refusal said is enough.
func TestPingBurstIsAnsweredAndSocketStaysOpen(t *testing.T) {
	const burst = 10000
	srv := startServer(t, serverOptions{})
	c := srv.dial("alice")
	c.read()

	for i := range burst {
		if err := c.sendRaw(fmt.Appendf(nil, `{"type":"ping","id":"%d"}`, i)); err != nil {
			t.Fatalf("send ping %d: %v", i, err)
		}
	}
	var pongs, refused int
	var retryAfter time.Duration
	eventually(t, fmt.Sprintf("%d replies", burst), func() (bool, string) {
		n, ended, status := c.progress()
		return n >= burst, fmt.Sprintf("%d replies, ended=%v status=%v", n, ended, status)
	})
	frames, ended, status := c.snapshot()
	if ended {
		t.Fatalf("the connection closed with %v during the burst", status)
	}
	answered := make(map[string]bool, burst)
	for _, f := range frames {
		if answered[f.ID] {
			t.Fatalf("ping %s answered twice", f.ID)
		}
		answered[f.ID] = true
		switch {
		case f.Type == protocol.TypePong:
			pongs++
		case f.Type == protocol.TypeError && f.Code == protocol.CodeRateLimited && f.Retryable && f.RetryAfterMs > 0:
			refused++
			retryAfter = time.Duration(f.RetryAfterMs) * time.Millisecond
		default:
			t.Fatalf("ping %s answered with %+v; want a pong or a rate_limited error with a retry hint", f.ID, f)
		}
	}
	if len(frames) != burst || len(answered) != burst {
		t.Fatalf("got %d replies for %d pings; want exactly one each", len(frames), len(answered))
	}
	if pongs < session.DefaultFrameBurst || refused == 0 {
		t.Fatalf("%d pongs and %d refusals; want at least the burst of %d answered and the rest refused",
			pongs, refused, session.DefaultFrameBurst)
	}
	time.Sleep(retryAfter) // what the last refusal asked for; then a ping must pass
	c.stillOpen("final")
	if n, _, _ := c.progress(); n != burst+1 {
		t.Fatalf("got %d frames for %d pings; want one reply each", n, burst+1)
	}
}

// A lagging reader gets the latest value of a key instead of every update, and a flood of
// distinct keys is dropped past MaxEphemeral, never cutting the socket.
func TestEphemeralFramesCoalesceForALaggingReader(t *testing.T) {
	const updates = 10000
	// blockWriter queues a frame larger than the socket buffers while the client is not
	// reading, so the writer is busy until the client reads and what follows has to wait.
	blockWriter := func(c *client) {
		if !c.sess.Push(frameOfSize("blocker", 1<<20)) {
			t.Fatal("push of the blocking frame refused")
		}
	}

	t.Run("same key", func(t *testing.T) {
		srv := startServer(t, serverOptions{smallBuffers: true})
		c := srv.dial("alice")
		blockWriter(c)
		for i := range updates {
			total := int64(i)
			data, _ := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeBadge, Total: &total})
			c.sess.PushEphemeral("badge", data)
		}
		c.read()
		eventually(t, "the last badge value", func() (bool, string) {
			frames, _, _ := c.snapshot()
			last := badges(frames)
			return len(last) > 0 && last[len(last)-1] == updates-1, fmt.Sprintf("badges %v", last)
		})
		c.stillOpen("p1")
		frames, _, _ := c.snapshot()
		if got := badges(frames); len(got) > 3 {
			t.Fatalf("a lagging reader got %d badge frames for %d updates; want the latest only", len(got), updates)
		}
		if got := c.sess.EphemeralDropped(); got < updates-3 {
			t.Fatalf("EphemeralDropped = %d; want at least %d", got, updates-3)
		}
	})

	t.Run("distinct keys", func(t *testing.T) {
		srv := startServer(t, serverOptions{smallBuffers: true})
		c := srv.dial("alice")
		blockWriter(c)
		for i := range updates {
			data, _ := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeCursor, ConversationID: fmt.Sprint("c", i)})
			c.sess.PushEphemeral(fmt.Sprint("cursor:c", i), data)
		}
		c.read()
		eventually(t, "the queued cursors", func() (bool, string) {
			frames, ended, status := c.snapshot()
			n := countType(frames, protocol.TypeCursor)
			return n >= session.DefaultMaxEphemeral, fmt.Sprintf("%d cursors, ended=%v status=%v", n, ended, status)
		})
		c.stillOpen("p1")
		frames, _, _ := c.snapshot()
		if n := countType(frames, protocol.TypeCursor); n != session.DefaultMaxEphemeral {
			t.Fatalf("got %d cursor frames; want the first %d keys", n, session.DefaultMaxEphemeral)
		}
		if got, want := c.sess.EphemeralDropped(), int64(updates-session.DefaultMaxEphemeral); got != want {
			t.Fatalf("EphemeralDropped = %d; want %d", got, want)
		}
	})
}

func badges(frames []protocol.ServerFrame) []int64 {
	var out []int64
	for _, f := range frames {
		if f.Type == protocol.TypeBadge {
			out = append(out, *f.Total)
		}
	}
	return out
}

func countType(frames []protocol.ServerFrame, typ string) int {
	n := 0
	for _, f := range frames {
		if f.Type == typ {
			n++
		}
	}
	return n
}

// A client that stops reading while frames it must receive keep coming is cut with 4008, and
// the cut is logged; a client that reads the same volume is never cut.
func TestSlowConsumerIsCutAndReaderIsNot(t *testing.T) {
	const maxQueued = 64 << 10
	const frameSize = 1 << 10
	cfg := session.Config{MaxQueuedBytes: maxQueued}

	t.Run("not reading", func(t *testing.T) {
		srv := startServer(t, serverOptions{cfg: cfg, smallBuffers: true})
		c := srv.dial("alice")
		pushed := 0
		for c.sess.Push(frameOfSize("m", frameSize)) {
			pushed += frameSize
			if pushed > 64<<20 {
				t.Fatalf("pushed %d bytes to a client that does not read without a cut", pushed)
			}
		}
		if pushed < maxQueued {
			t.Fatalf("cut after %d bytes; want at least MaxQueuedBytes (%d) queued first", pushed, maxQueued)
		}
		c.read()
		c.closedWith(session.StatusSlowConsumer)
		logs := srv.log.String()
		if !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, `"user":"alice"`) ||
			!strings.Contains(logs, `"queuedBytes"`) || !strings.Contains(logs, c.sess.ID()) {
			t.Fatalf("slow-consumer cut not logged at warn with user, session and queued bytes; logs:\n%s", logs)
		}
	})

	t.Run("behind for longer than the grace", func(t *testing.T) {
		const grace = 300 * time.Millisecond
		// A limit well above what the kernel's buffers take: the writer hands them up to 32 KiB
		// at a time, and each write may go past a small send buffer by tens of kilobytes.
		const limit = 4 * maxQueued
		srv := startServer(t, serverOptions{cfg: session.Config{MaxQueuedBytes: limit, SlowConsumerGrace: grace}, smallBuffers: true})
		c := srv.dial("alice")
		// Three times the limit, under the hard bound of four: a reader may be this far behind
		// for a moment.
		for i := range 3 * limit / frameSize {
			if !c.sess.Push(frameOfSize("m", frameSize)) {
				t.Fatalf("push %d refused within the grace", i)
			}
		}
		time.Sleep(grace + 100*time.Millisecond) // the grace is the point of the test
		if c.sess.Push(frameOfSize("m", frameSize)) {
			t.Fatal("a reader behind for longer than the grace still takes pushes")
		}
		c.read()
		c.closedWith(session.StatusSlowConsumer)
	})

	t.Run("reading", func(t *testing.T) {
		srv := startServer(t, serverOptions{cfg: cfg, smallBuffers: true})
		c := srv.dial("alice")
		c.read()
		const chunk = maxQueued / 2 / frameSize // frames per chunk
		sent := 0
		for range 16 { // eight times MaxQueuedBytes in all
			for range chunk {
				if !c.sess.Push(frameOfSize(fmt.Sprint("m", sent), frameSize)) {
					t.Fatalf("push %d to a reading client refused", sent)
				}
				sent++
			}
			eventually(t, fmt.Sprintf("%d pushed frames to arrive", sent), func() (bool, string) {
				n, ended, status := c.progress()
				return n == sent, fmt.Sprintf("%d frames, ended=%v status=%v", n, ended, status)
			})
		}
		c.stillOpen("p1")
	})
}

// A client that stops reading is cut by the grace alone: pushed past MaxQueuedBytes once in a
// conversation that then goes quiet, its session is closed with 4008 about SlowConsumerGrace
// later, not at a next push (there is none) nor when its stuck write times out.
func TestSlowConsumerIsCutWithoutAnotherPush(t *testing.T) {
	const maxQueued = 1 << 20
	const grace = 300 * time.Millisecond
	// Room for a loaded machine under the race detector, and far below WriteTimeout, so that
	// only the grace can close the session in time.
	const slack = 2 * time.Second
	srv := startServer(t, serverOptions{cfg: session.Config{MaxQueuedBytes: maxQueued,
		SlowConsumerGrace: grace, WriteTimeout: 2 * pollTimeout}, smallBuffers: true})
	c := srv.dial("alice")
	// Three times the limit, under the hard bound of four: far more than the kernel's buffers
	// take for a client that does not read, so the queue stays over the limit.
	frame := frameOfSize("m", 16<<10)
	start := time.Now()
	for i := range 3 * maxQueued / len(frame) {
		if !c.sess.Push(frame) {
			t.Fatalf("push %d refused within the grace", i)
		}
	}
	lastPush := time.Now()
	testenv.CheckFor(t, grace+slack, 2*time.Millisecond, func() error {
		select {
		case <-c.sess.Done():
			return nil
		default:
			return fmt.Errorf("a session over MaxQueuedBytes is still open %v after its last push; the grace is %v",
				time.Since(lastPush).Round(time.Millisecond), grace)
		}
	})
	if d := time.Since(start); d < grace {
		t.Fatalf("cut %v after the queue went over the limit; want no sooner than the grace (%v)", d, grace)
	}
	// The writer is still blocked in a write the client does not read (WriteTimeout is far off),
	// and what waited for the client is let go with the cut, not when that write gives up.
	if n := c.sess.QueuedBytes(); n > len(frame) {
		t.Fatalf("%d bytes still queued for a client cut for not reading; want at most the frame being written (%d)", n, len(frame))
	}
	c.read() // the client comes back and is told why it was cut
	c.closedWith(session.StatusSlowConsumer)
	receive(t, "the cut session to end", srv.handler.closed)
	lines := srv.log.Lines(t, "slow consumer: write queue full; closing")
	if len(lines) != 1 || lines[0]["level"] != "warn" || lines[0]["closeCode"] != 4008.0 {
		t.Fatalf("got cut lines %v; want one at warn with close code 4008; logs:\n%s", lines, srv.log.String())
	}
}

// Replies to a client's own requests wait for it to read instead of cutting it.
func TestRepliesWaitForAClientThatDoesNotRead(t *testing.T) {
	srv := startServer(t, serverOptions{cfg: session.Config{MaxQueuedBytes: 64 << 10}, smallBuffers: true})
	c := srv.dial("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	queued := 0
	var err error
	for err == nil {
		if err = c.sess.PushWait(ctx, frameOfSize(fmt.Sprint("r", queued), 1<<10)); err == nil {
			queued++
		}
		if queued > 64<<10 {
			t.Fatal("64 MiB of replies queued for a client that does not read")
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PushWait failed with %v; want it to wait until its context ended", err)
	}
	select {
	case <-c.sess.Done():
		t.Fatal("the session closed because its replies were not read")
	default:
	}
	c.read()
	eventually(t, "the queued replies", func() (bool, string) {
		n, ended, status := c.progress()
		return n == queued, fmt.Sprintf("%d of %d, ended=%v status=%v", n, queued, ended, status)
	})
	c.stillOpen("p1")
}

// A client that keeps sending after being refused far past a burst is closed with 4009.
func TestSustainedAbuseCloses(t *testing.T) {
	const abuseBurst = 50
	srv := startServer(t, serverOptions{cfg: session.Config{
		FrameRate: 1, FrameBurst: 1, AbuseRate: 1, AbuseBurst: abuseBurst,
	}})
	c := srv.dial("mallory")
	c.read()
	for i := range 5000 { // a hundred times the abuse burst
		if c.trySend(ping(fmt.Sprint(i))) != nil {
			break // closed
		}
		if _, ended, _ := c.progress(); ended {
			break
		}
	}
	c.closedWith(session.StatusPolicyAbuse)
	frames, _, _ := c.snapshot()
	refused := 0
	for _, f := range frames {
		if f.Code == protocol.CodeRateLimited {
			refused++
		}
	}
	if refused < abuseBurst {
		t.Fatalf("closed after %d refusals; want the abuse burst of %d tolerated first", refused, abuseBurst)
	}
	if logs := srv.log.String(); !strings.Contains(logs, "too many refused frames") || !strings.Contains(logs, `"user":"mallory"`) {
		t.Fatalf("abuse close not logged with the user; logs:\n%s", logs)
	}
}

// Per-user budgets are shared by all of a user's sessions through one Limits, are not shared
// with other users, and are freed with the user's last session.
func TestUserLimitsAreSharedAcrossSessions(t *testing.T) {
	send := func(id string) map[string]any {
		return map[string]any{"type": protocol.TypeSend, "id": id, "conversationId": "c1",
			"clientMsgId": uuid.NewString(), "body": "hi"}
	}
	for _, tc := range []struct {
		name  string
		cfg   session.Config // almost no refill: the burst is all there is
		frame func(id string) map[string]any
	}{
		{"sends", session.Config{SendRate: 0.001, SendBurst: 3}, send},
		{"frames", session.Config{UserFrameRate: 0.001, UserFrameBurst: 3}, list},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limits := session.NewLimits(tc.cfg)
			srv := startServer(t, serverOptions{cfg: tc.cfg, limits: limits})
			alice1, alice2, bob := srv.dial("alice"), srv.dial("alice"), srv.dial("bob")
			for _, c := range []*client{alice1, alice2, bob} {
				c.read()
			}
			for i := range 3 {
				id := fmt.Sprint("a1-", i)
				alice1.send(tc.frame(id))
				if f := alice1.reply(id); f.Type != protocol.TypeOK {
					t.Fatalf("%s answered with %+v; want ok", id, f)
				}
			}
			alice2.send(tc.frame("a2"))
			if f := alice2.reply("a2"); f.Code != protocol.CodeRateLimited || f.RetryAfterMs <= 0 {
				t.Fatalf("alice's second connection got %+v; want rate_limited with a retry hint, her budget is spent", f)
			}
			bob.send(tc.frame("b"))
			if f := bob.reply("b"); f.Type != protocol.TypeOK {
				t.Fatalf("bob got %+v; want ok, alice's budget is not his", f)
			}
			if n := limits.Users(); n != 2 {
				t.Fatalf("Limits holds %d users; want 2", n)
			}
			for _, c := range []*client{alice1, alice2, bob} {
				_ = c.conn.Close(websocket.StatusNormalClosure, "")
			}
			eventually(t, "the budgets to be freed", func() (bool, string) {
				n := limits.Users()
				return n == 0, fmt.Sprintf("%d users", n)
			})
		})
	}
}

// Frames queued before Close are written before the close frame.
func TestCloseFlushesQueuedFrames(t *testing.T) {
	srv := startServer(t, serverOptions{smallBuffers: true})
	c := srv.dial("alice")
	c.sess.Push(frameOfSize("blocker", 1<<20)) // keeps the writer busy until the client reads
	for i := range 3 {
		c.sess.Push(frameOfSize(fmt.Sprint("after", i), 100))
	}
	c.sess.Close(session.StatusRemoved, "removed")
	c.read()
	c.closedWith(session.StatusRemoved)
	frames, _, _ := c.snapshot()
	if len(frames) != 4 || !strings.HasPrefix(frames[3].Body, "after2") {
		t.Fatalf("got %d frames before the close; want the blocker and the three queued after it", len(frames))
	}
}

// Serve ends every handler (through its context) and waits for it before calling Closed.
func TestServeWaitsForHandlersBeforeClosed(t *testing.T) {
	started := make(chan struct{})
	var returned atomic.Bool
	srv := startServer(t, serverOptions{handle: func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
		close(started)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // cleanup that Serve must wait for
		returned.Store(true)
		return ctx.Err()
	}})
	c := srv.dial("alice")
	c.read()
	c.send(list("slow"))
	receive(t, "the handler to start", started)
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	receive(t, "Closed to be called", srv.handler.closed)
	if !returned.Load() {
		t.Fatal("Closed was called while a handler was still running")
	}
}

// A handler that panics ends its own session, not the process, and other sessions go on.
func TestHandlerPanicEndsOnlyItsSession(t *testing.T) {
	srv := startServer(t, serverOptions{handle: func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
		if s.UserID() == "crasher" {
			panic("handler bug")
		}
		return s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	}})
	crasher, other := srv.dial("crasher"), srv.dial("other")
	crasher.read()
	other.read()
	crasher.send(list("boom"))
	crasher.closedWith(websocket.StatusInternalError)
	other.send(list("fine"))
	if f := other.reply("fine"); f.Type != protocol.TypeOK {
		t.Fatalf("the other session got %+v; want ok", f)
	}
}

// The writer pings: a peer that stops answering is closed, one that reads stays open.
func TestKeepalivePingsCloseADeadPeer(t *testing.T) {
	const interval = 20 * time.Millisecond
	cfg := session.Config{PingInterval: interval, PongTimeout: 3 * interval}

	t.Run("not answering", func(t *testing.T) {
		srv := startServer(t, serverOptions{cfg: cfg})
		c := srv.dial("alice") // not reading, so its pongs are never sent
		receive(t, "the session to give up on the silent peer", c.sess.Done())
		c.read()
		c.closedWith(websocket.StatusPolicyViolation)
	})

	t.Run("answering", func(t *testing.T) {
		srv := startServer(t, serverOptions{cfg: cfg})
		c := srv.dial("alice")
		c.read()
		time.Sleep(10 * interval) // ten pings, each answered by the client while it reads
		select {
		case <-c.sess.Done():
			t.Fatal("a session whose peer answers pings was closed")
		default:
		}
		c.stillOpen("p1")
	})
}

func TestConfigValidateAndDefaults(t *testing.T) {
	for _, c := range []session.Config{
		{MaxInFlight: -1}, {MaxQueuedBytes: -1}, {MaxEphemeral: -1}, {WriteTimeout: -1}, {AbuseBurst: -1},
	} {
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil; want an error", c)
		}
	}
	if err := session.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if err := (session.Config{SendRate: -1, AbuseRate: -1}).Validate(); err != nil {
		t.Errorf("negative rates disable limits; Validate = %v", err)
	}
}

// A peer that stops reading while a write is blocked on its socket is dropped after WriteTimeout,
// though the frames queued stay under MaxQueuedBytes: a stuck write never holds a session open.
// So is one that stops after a quiet spell longer than WriteTimeout, when the watchdog had gone
// quiet too.
func TestStuckWriteEndsTheSession(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			const writeTimeout = 300 * time.Millisecond
			srv := startServer(t, serverOptions{cfg: session.Config{WriteTimeout: writeTimeout,
				MaxQueuedBytes: 64 << 20, SlowConsumerGrace: time.Hour}, smallBuffers: true})
			c := srv.dial("alice")
			if quiet {
				// One small frame, taken by the kernel's buffers, arms the watchdog; it
				// fires during the quiet spell with no write in flight.
				if !c.sess.Push(frameOfSize("first", 100)) {
					t.Fatal("the first push refused")
				}
				time.Sleep(2 * writeTimeout)
			}
			pushPastBuffers(t, c)
			if got := receive(t, "the session with a stuck write to end", srv.handler.closed); got != c.sess {
				t.Fatalf("session %s ended, want %s", got.ID(), c.sess.ID())
			}
		})
	}
}

// A reader that takes every frame keeps its session however long the writes go on: WriteTimeout
// bounds one write, not a stream of them.
func TestSteadyWritesOutliveWriteTimeout(t *testing.T) {
	// Long enough that no single small write on a loaded machine takes it; the stream below
	// lasts four times as long.
	const writeTimeout = 500 * time.Millisecond
	srv := startServer(t, serverOptions{cfg: session.Config{WriteTimeout: writeTimeout}})
	c := srv.dial("alice")
	c.read()
	const frames = 80 // one every 25 ms
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for i := range frames {
		<-tick.C
		if !c.sess.Push(frameOfSize(fmt.Sprint("m", i), 100)) {
			t.Fatalf("push %d refused", i)
		}
	}
	eventually(t, "every frame", func() (bool, string) {
		n, ended, status := c.progress()
		return n == frames, fmt.Sprintf("%d of %d frames, ended=%v status=%v", n, frames, ended, status)
	})
	c.stillOpen("p")
}

// pushPastBuffers queues far more for c than the kernel's buffers hold (on a small-buffer
// server), and far less than MaxQueuedBytes, so that a writer for a client that does not read
// stays in a write.
func pushPastBuffers(t *testing.T, c *client) {
	t.Helper()
	for i := range 64 {
		if !c.sess.Push(frameOfSize(fmt.Sprint("m", i), 64<<10)) {
			t.Fatalf("push %d refused", i)
		}
	}
}

// stuckPeer opens a session whose client does not read and whose writer stays in a write until
// the test ends.
func stuckPeer(t *testing.T, srv *server, user string) *client {
	t.Helper()
	c := srv.dial(user)
	pushPastBuffers(t, c)
	return c
}

// pooledConfig has one writer on its own goroutine and one pooled, and a WriteTimeout beyond the
// tests' waits, so that only the pool can get a frame past a stuck writer.
func pooledConfig(w *session.Writers) session.Config {
	return session.Config{WriteTimeout: 2 * pollTimeout, MaxQueuedBytes: 64 << 20,
		SlowConsumerGrace: time.Hour, Writers: w}
}

// A peer that stops reading holds its own writer, never another session's: with the one direct
// writer and the one pool worker both stuck on such peers, a frame for a reading client still
// arrives, written by a worker started beside the stuck one.
func TestStuckPeersDoNotHoldOtherSessionsWrites(t *testing.T) {
	w := session.NewWriters(session.WritersConfig{Direct: 1, Pooled: 1})
	srv := startServer(t, serverOptions{cfg: pooledConfig(w), smallBuffers: true})
	stuckPeer(t, srv, "stuck-direct") // its writer takes the one direct goroutine
	stuckPeer(t, srv, "stuck-pooled") // its writer is the pool's first turn
	c := srv.dial("reader")
	c.read()
	if !c.sess.Push(frameOfSize("hello", 100)) {
		t.Fatal("push refused")
	}
	eventually(t, "the reader's frame", func() (bool, string) {
		n, ended, status := c.progress()
		return n == 1, fmt.Sprintf("%d frames, ended=%v status=%v", n, ended, status)
	})
}

// A session waiting for the pool behind a stuck turn starts its writer on a goroutine of its own
// as soon as one is free, at its next frame.
func TestFrameBehindThePoolStartsItsOwnWriter(t *testing.T) {
	w := session.NewWriters(session.WritersConfig{Direct: 1, Pooled: 1})
	session.SetWriterStall(w, time.Hour) // the pool never grows past its stuck worker
	srv := startServer(t, serverOptions{cfg: pooledConfig(w), smallBuffers: true})
	direct := stuckPeer(t, srv, "stuck-direct")
	stuckPeer(t, srv, "stuck-pooled")
	c := srv.dial("reader")
	c.read()
	if !c.sess.Push(frameOfSize("first", 100)) { // queued behind the stuck turn
		t.Fatal("first push refused")
	}
	// The direct writer's peer goes away: its write fails and the goroutine is free.
	_ = direct.conn.CloseNow()
	receive(t, "the direct session to end", srv.handler.closed)
	if !c.sess.Push(frameOfSize("second", 100)) {
		t.Fatal("second push refused")
	}
	eventually(t, "both of the reader's frames", func() (bool, string) {
		n, ended, status := c.progress()
		return n == 2, fmt.Sprintf("%d frames, ended=%v status=%v", n, ended, status)
	})
}
