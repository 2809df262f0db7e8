package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file pin down what the realtime core promises a user under pressure: a burst
// of frames is answered (or refused with rate_limited and a retry hint) and never cuts the socket
// that sent it, a burst of ephemeral frames (typing) never cuts anyone else, a read moves every
// device once, a reconnecting client gets each seq once and in order, receipts never move back,
// and read state is neither lost nor written on someone else's behalf. Every test runs real
// nodes, real NATS, the store over TCP and real WebSockets; payloads carry their own index so
// loss, order and duplicates show without side state.

// Settings of these tests, each with its reason.
const (
	// rtPartitions keeps node start quick: a node takes its partition leases one by one.
	rtPartitions = 4
	// rtQuiet is how long a socket is watched after the frames a test waits for have arrived,
	// before counting them: long enough for a duplicate to cross NATS from another node on a
	// loaded machine. Absence cannot be polled for; this is the one deliberate wait.
	rtQuiet = 1500 * time.Millisecond
	// rtPoll is how often the inboxes below are polled.
	rtPoll = 10 * time.Millisecond
)

// rtNodes starts count nodes on one environment (shared NATS and store), each with its own node
// id; tune, if not nil, changes every node's configuration.
func rtNodes(t *testing.T, count int, tune func(*node.Config)) (testenv.Env, []*testenv.Node) {
	t.Helper()
	env := testenv.NewEnv(t)
	nodes := make([]*testenv.Node, count)
	for i := range nodes {
		cfg := env.NodeConfig()
		cfg.NodeID = fmt.Sprintf("rt-%c", 'a'+i)
		cfg.Sequencer.Partitions = rtPartitions
		if tune != nil {
			tune(&cfg)
		}
		nodes[i] = testenv.StartNode(t, cfg)
	}
	return env, nodes
}

// rtProductionLimits puts the per-connection rate limits back to the production defaults, which
// testenv turns off.
func rtProductionLimits(cfg *node.Config) {
	cfg.Session.SendRate, cfg.Session.FrameRate = 0, 0
}

// rtSummary describes frames for a failure message: how many of each type, and the seqs of the
// message frames in arrival order.
func rtSummary(types []string, seqs []int64) string {
	counts := make(map[string]int)
	for _, typ := range types {
		counts[typ]++
	}
	parts := make([]string, 0, len(counts))
	for typ, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, typ))
	}
	sort.Strings(parts)
	s := fmt.Sprintf("%d frames (%s)", len(types), strings.Join(parts, ", "))
	if len(seqs) > 0 {
		s += "; message seqs " + rtRanges(seqs)
	}
	return s
}

// rtRanges writes seqs in arrival order, runs of consecutive seqs as from-to: "1-20,22,21".
func rtRanges(seqs []int64) string {
	var b strings.Builder
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", seqs[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", seqs[i], seqs[j])
		}
		i = j + 1
	}
	return b.String()
}

// rtInbox keeps every frame pushed to one client connection. Its own goroutine reads the
// connection continuously, as a live page does, so a test can wait for frames, count them and
// see whether and how the server closed the socket.
type rtInbox struct {
	name     string
	conn     *client.Conn
	barriers atomic.Int64

	mu     sync.Mutex
	frames []protocol.ServerFrame
	done   chan struct{}
}

// rtWatch starts reading c's pushes; the connection is closed and the reader stopped when the
// test ends.
func rtWatch(t *testing.T, name string, c *client.Conn) *rtInbox {
	in := &rtInbox{name: name, conn: c, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for f := range c.Pushes() {
			in.mu.Lock()
			in.frames = append(in.frames, f)
			in.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = c.Close() // it may be closed already
		<-in.done
	})
	return in
}

// snapshot returns the frames received so far.
func (in *rtInbox) snapshot() []protocol.ServerFrame {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.frames)
}

// len is how many frames have arrived, to mark where a phase of a test begins.
func (in *rtInbox) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.frames)
}

// closed says how the connection ended, or "" while it is open.
func (in *rtInbox) closed() string {
	select {
	case <-in.done:
		return fmt.Sprintf("closed with status %d (%v)", in.conn.CloseStatus(), in.conn.Err())
	default:
		return ""
	}
}

func (in *rtInbox) summary(frames []protocol.ServerFrame) string {
	types := make([]string, len(frames))
	var seqs []int64
	for i, f := range frames {
		types[i] = f.Type
		if f.Type == protocol.TypeMessage {
			seqs = append(seqs, f.Seq)
		}
	}
	return rtSummary(types, seqs)
}

// waitFor polls until cond holds for the frames received so far, and fails the test, saying what
// arrived, when the socket closes first or timeout passes.
func (in *rtInbox) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]protocol.ServerFrame) bool) {
	t.Helper()
	// The summary of what arrived is made once, on failure: inboxes grow to thousands of frames.
	if err := testenv.Poll(timeout, rtPoll, func() error {
		if cond(in.snapshot()) {
			return nil
		}
		if reason := in.closed(); reason != "" {
			if cond(in.snapshot()) {
				return nil
			}
			return fmt.Errorf("%w: the socket was %s while waiting for %s", testenv.ErrGiveUp, reason, what)
		}
		return fmt.Errorf("no %s", what)
	}); err != nil {
		t.Fatalf("%s: %v; it had received %s", in.name, err, in.summary(in.snapshot()))
	}
}

// barrier makes one round trip through the inbox: every frame the server queued for this socket
// before answering is in the inbox when it returns.
func (in *rtInbox) barrier(t *testing.T) {
	t.Helper()
	id := fmt.Sprintf("rt-barrier-%d", in.barriers.Add(1))
	if err := in.conn.Post(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypePing, ID: id}); err != nil {
		t.Fatalf("%s: ping: %v", in.name, err)
	}
	in.waitFor(t, 10*time.Second, "the pong "+id, func(fs []protocol.ServerFrame) bool {
		return slices.ContainsFunc(fs, func(f protocol.ServerFrame) bool { return f.ID == id })
	})
}

// rtOf returns the frames that match.
func rtOf[F any](frames []F, match func(F) bool) []F {
	var out []F
	for _, f := range frames {
		if match(f) {
			out = append(out, f)
		}
	}
	return out
}

// rtMessages returns the message frames of one conversation.
func rtMessages(frames []protocol.ServerFrame, convID string) []protocol.ServerFrame {
	return rtOf(frames, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.ConversationID == convID
	})
}

// rtHasConversation matches an inbox that has heard of conversation id.
func rtHasConversation(id string) func([]protocol.ServerFrame) bool {
	return func(fs []protocol.ServerFrame) bool {
		return slices.ContainsFunc(fs, func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeConversation && f.Conversation != nil && f.Conversation.ID == id
		})
	}
}

// rtFrame is one text frame from a raw socket: the decoded frame, and the retry hint of an error
// frame, decoded on its own so the test does not depend on the field being in protocol.ServerFrame.
type rtFrame struct {
	protocol.ServerFrame
	RetryAfterMs int64
}

// rtSocket is a WebSocket written by hand (rawConn, from security_test.go) with a goroutine that
// reads it continuously and answers pings. The test decides every byte it sends: the first
// frame, and bursts written in one go.
type rtSocket struct {
	name string
	raw  *rawConn
	wmu  sync.Mutex // one writer at a time: the test and the reader's pongs

	mu        sync.Mutex
	frames    []rtFrame
	closeCode int   // the server's close code once it closed, 0 while open
	readErr   error // why reading stopped, if not a close frame
	done      chan struct{}
}

// WebSocket control opcodes the reader handles (RFC 6455 section 5.2).
const (
	rtOpPing = 0x9
	rtOpPong = 0xa
)

// rtDialRaw opens a raw socket as the token's user; first, if not nil, is written as the very
// first frame, before anything is read.
func rtDialRaw(t *testing.T, n *testenv.Node, name, token string, first []byte) *rtSocket {
	t.Helper()
	s := &rtSocket{name: name, raw: dialRaw(t, n, token, 0), done: make(chan struct{})}
	if first != nil {
		s.write(t, first)
	}
	go s.readLoop()
	t.Cleanup(func() {
		_ = s.raw.conn.Close()
		<-s.done
	})
	return s
}

func (s *rtSocket) readLoop() {
	defer close(s.done)
	defer s.raw.conn.Close()
	for {
		f, err := s.raw.read(time.Now().Add(3 * time.Minute))
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		switch f.op {
		case opText:
			var sf rtFrame
			if err := json.Unmarshal(f.payload, &sf.ServerFrame); err != nil {
				sf.Type = "undecodable: " + string(f.payload)
			}
			var hint struct {
				RetryAfterMs int64 `json:"retryAfterMs"`
			}
			_ = json.Unmarshal(f.payload, &hint) // a frame that does not decode is reported above
			sf.RetryAfterMs = hint.RetryAfterMs
			s.mu.Lock()
			s.frames = append(s.frames, sf)
			s.mu.Unlock()
		case rtOpPing:
			s.wmu.Lock()
			_ = s.raw.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, _ = s.raw.conn.Write(maskedFrame(rtOpPong, f.payload)) // a broken socket shows in the next read
			s.wmu.Unlock()
		case opClose:
			code := 1005 // no status received
			if len(f.payload) >= 2 {
				code = int(binary.BigEndian.Uint16(f.payload[:2]))
			}
			s.mu.Lock()
			s.closeCode = code
			s.mu.Unlock()
			s.wmu.Lock()
			_ = s.raw.conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = s.raw.conn.Write(maskedFrame(opClose, f.payload[:min(2, len(f.payload))])) // echo, best effort
			s.wmu.Unlock()
			return
		}
	}
}

// write sends text frames in one write: a burst arrives as fast as the kernel moves it.
func (s *rtSocket) write(t *testing.T, payloads ...[]byte) {
	t.Helper()
	var buf bytes.Buffer
	for _, p := range payloads {
		buf.Write(maskedFrame(opText, p))
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.raw.conn.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := s.raw.conn.Write(buf.Bytes()); err != nil {
		t.Fatalf("%s: write %d frames: %v (%s)", s.name, len(payloads), err, s.closed())
	}
}

// close closes the socket normally and waits until the server has answered or a few seconds
// have passed.
func (s *rtSocket) close() {
	s.wmu.Lock()
	_ = s.raw.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = s.raw.conn.Write(maskedFrame(opClose, binary.BigEndian.AppendUint16(nil, 1000))) // it may be gone already
	s.wmu.Unlock()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.raw.conn.Close()
		<-s.done
	}
}

func (s *rtSocket) snapshot() []rtFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}

// closed says how the connection ended, or "" while it is open.
func (s *rtSocket) closed() string {
	select {
	case <-s.done:
	default:
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeCode != 0 {
		return fmt.Sprintf("closed by the server with code %d", s.closeCode)
	}
	return fmt.Sprintf("broken (%v)", s.readErr)
}

func (s *rtSocket) summary(frames []rtFrame) string {
	types := make([]string, len(frames))
	var seqs []int64
	for i, f := range frames {
		types[i] = f.Type
		if f.Type == protocol.TypeError {
			types[i] += " " + f.Code
		}
		if f.Type == protocol.TypeMessage {
			seqs = append(seqs, f.Seq)
		}
	}
	return rtSummary(types, seqs)
}

// waitFor polls until cond holds for the frames received so far, and fails the test, saying what
// arrived, when the socket closes first or timeout passes.
func (s *rtSocket) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]rtFrame) bool) {
	t.Helper()
	// The summary of what arrived is made once, on failure: sockets get to thousands of frames.
	if err := testenv.Poll(timeout, rtPoll, func() error {
		if cond(s.snapshot()) {
			return nil
		}
		if reason := s.closed(); reason != "" {
			if cond(s.snapshot()) {
				return nil
			}
			return fmt.Errorf("%w: the socket was %s while waiting for %s", testenv.ErrGiveUp, reason, what)
		}
		return fmt.Errorf("no %s", what)
	}); err != nil {
		t.Fatalf("%s: %v; it had received %s", s.name, err, s.summary(s.snapshot()))
	}
}

// rtReplyTo matches a raw socket that has the reply to request id.
func rtReplyTo(id string) func([]rtFrame) bool {
	return func(fs []rtFrame) bool {
		return slices.ContainsFunc(fs, func(f rtFrame) bool { return f.ID == id })
	}
}

// rtReplyOf returns the reply to request id; waitFor(rtReplyTo(id)) must have passed.
func rtReplyOf(frames []rtFrame, id string) rtFrame {
	i := slices.IndexFunc(frames, func(f rtFrame) bool { return f.ID == id })
	return frames[i]
}

// rtCheckRefusal returns why f is not a proper refusal of a burst frame, or "".
func rtCheckRefusal(f rtFrame) string {
	switch {
	case f.Code != protocol.CodeRateLimited:
		return fmt.Sprintf("error code %q (%s); want %s", f.Code, f.Message, protocol.CodeRateLimited)
	case !f.Retryable:
		return "rate_limited without retryable"
	case f.RetryAfterMs <= 0:
		return fmt.Sprintf("rate_limited with retryAfterMs %d; want a positive retry hint", f.RetryAfterMs)
	}
	return ""
}

// rtBurstReplies waits until every one of n frames with ids prefix0..prefix<n-1> is answered
// (frames refused without an id count as answers too, to be reported), and returns the replies
// by request index and the error frames that carry no id.
func rtBurstReplies(t *testing.T, s *rtSocket, prefix string, n int, timeout time.Duration) (map[int][]rtFrame, []rtFrame) {
	t.Helper()
	isReply := func(f rtFrame) bool {
		return strings.HasPrefix(f.ID, prefix) || (f.Type == protocol.TypeError && f.ID == "")
	}
	s.waitFor(t, timeout, fmt.Sprintf("replies to all %d frames", n), func(fs []rtFrame) bool {
		return len(rtOf(fs, isReply)) >= n
	})
	byIndex := make(map[int][]rtFrame, n)
	var anonymous []rtFrame
	for _, f := range rtOf(s.snapshot(), isReply) {
		if f.ID == "" {
			anonymous = append(anonymous, f)
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(f.ID, prefix))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("%s: a reply to request %q, which was never sent", s.name, f.ID)
		}
		byIndex[i] = append(byIndex[i], f)
	}
	return byIndex, anonymous
}

// TestRealtimeTypingBurstDoesNotCutAReader has one user type from 8 sockets as fast as they can
// while someone writes to the group: the reader in the same group keeps its socket, gets every
// message once in seq order, and sees only a few typing frames (typing fans out at most once per
// sender and conversation every 3 s). The burst runs three times: one run may be lucky.
func TestRealtimeTypingBurstDoesNotCutAReader(t *testing.T) {
	const (
		attackerSockets  = 8
		typingPerSocket  = 190 // under a connection's frame burst (200): every frame is accepted
		messagesPerRound = 50
		rounds           = 3
		maxTypingSeen    = 16 // per round; the throttle allows about one
	)
	_, nodes := rtNodes(t, 1, nil)
	n := nodes[0]
	ctx := ctxT(t, 90*time.Second)
	sender := rtWatch(t, "sender", connectReady(t, n, "sender"))
	victim := rtWatch(t, "victim", connectReady(t, n, "victim"))
	attackers := make([]*rtInbox, attackerSockets)
	for i := range attackers {
		attackers[i] = rtWatch(t, fmt.Sprintf("mallory %d", i+1), connectReady(t, n, "mallory"))
	}
	group, err := sender.conn.CreateGroup(ctx, "burst", []string{"victim", "mallory"})
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	for _, in := range append([]*rtInbox{victim}, attackers...) {
		in.waitFor(t, 10*time.Second, "the new group", rtHasConversation(group.ID))
	}
	typing := fmt.Appendf(nil, `{"type":"typing","conversationId":%q}`, group.ID)

	var mu sync.Mutex
	acked := make(map[int64]string) // seq -> body
	typingTotal := 0
	for r := range rounds {
		mark := victim.len()
		start := make(chan struct{})
		errs := make(chan error, attackerSockets+1)
		var wg sync.WaitGroup
		for _, a := range attackers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range typingPerSocket {
					if err := a.conn.WriteRaw(ctx, typing); err != nil {
						errs <- fmt.Errorf("%s: typing: %w", a.name, err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range messagesPerRound {
				body := fmt.Sprintf("round %d message %d", r, k)
				ack, err := sender.conn.Send(ctx, group.ID, body)
				if err != nil {
					errs <- fmt.Errorf("the sender, a reader of the group too: %q: %w", body, err)
					return
				}
				mu.Lock()
				acked[ack.Seq] = body
				mu.Unlock()
			}
		}()
		close(start)
		wg.Wait()
		close(errs)
		if reason := victim.closed(); reason != "" {
			t.Fatalf("round %d: the reader's socket was %s by a typing burst; it had received %s",
				r+1, reason, victim.summary(victim.snapshot()[mark:]))
		}
		for err := range errs {
			t.Fatalf("round %d: %v", r+1, err)
		}
		want := (r + 1) * messagesPerRound
		victim.waitFor(t, 30*time.Second, fmt.Sprintf("round %d: all %d messages", r+1, want), func(fs []protocol.ServerFrame) bool {
			return len(rtMessages(fs, group.ID)) >= want
		})
		victim.barrier(t)
		typed := rtOf(victim.snapshot()[mark:], func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeTyping && f.ConversationID == group.ID
		})
		t.Logf("round %d: the reader got %d typing frames for %d sent", r+1, len(typed), attackerSockets*typingPerSocket)
		typingTotal += len(typed)
		if len(typed) > maxTypingSeen {
			t.Errorf("round %d: the reader got %d typing frames from one user's burst of %d; want at most %d",
				r+1, len(typed), attackerSockets*typingPerSocket, maxTypingSeen)
		}
	}

	// Every persisted message once, in seq order, each with the body acked at its seq.
	got := rtMessages(victim.snapshot(), group.ID)
	seqs := make([]int64, len(got))
	for i, m := range got {
		seqs[i] = m.Seq
	}
	if len(got) != len(acked) {
		t.Fatalf("the reader got %d messages, %d were acked: seqs %s", len(got), len(acked), rtRanges(seqs))
	}
	for i, m := range got {
		if m.Seq != int64(i+1) || m.Body != acked[m.Seq] {
			t.Fatalf("the reader's message %d is seq %d %q; want seq %d %q (seqs %s)", i, m.Seq, m.Body, i+1, acked[int64(i+1)], rtRanges(seqs))
		}
	}
	if reason := victim.closed(); reason != "" {
		t.Fatalf("the reader's socket was %s", reason)
	}
	if typingTotal == 0 {
		t.Fatalf("the reader never saw mallory typing; throttled typing must still show")
	}
}

// TestRealtimePingBurstIsAnsweredNotCut writes 10,000 pings in one burst: each is answered, with
// a pong or a rate_limited refusal that says when to retry, and the socket stays open.
func TestRealtimePingBurstIsAnsweredNotCut(t *testing.T) {
	const pings = 10000
	_, nodes := rtNodes(t, 1, rtProductionLimits)
	n := nodes[0]
	s := rtDialRaw(t, n, "alice", login(t, n, "alice"), nil)
	s.waitFor(t, 10*time.Second, "hello", func(fs []rtFrame) bool {
		return slices.ContainsFunc(fs, func(f rtFrame) bool { return f.Type == protocol.TypeHello })
	})
	frames := make([][]byte, pings)
	for i := range frames {
		frames[i] = fmt.Appendf(nil, `{"type":"ping","id":"p%d"}`, i)
	}
	start := time.Now()
	s.write(t, frames...)
	replies, anonymous := rtBurstReplies(t, s, "p", pings, time.Minute)
	t.Logf("%d pings answered in %s", pings, time.Since(start).Round(time.Millisecond))

	if len(anonymous) > 0 {
		t.Errorf("%d error frames without an id (first: %s %q): a refused ping must be answered with its id",
			len(anonymous), anonymous[0].Code, anonymous[0].Message)
	}
	pongs, refused := 0, 0
	for i := range pings {
		rs := replies[i]
		if len(rs) != 1 {
			if len(anonymous) == 0 {
				t.Fatalf("ping p%d got %d replies; want exactly one", i, len(rs))
			}
			continue
		}
		switch r := rs[0]; r.Type {
		case protocol.TypePong:
			pongs++
		case protocol.TypeError:
			if why := rtCheckRefusal(r); why != "" {
				t.Fatalf("ping p%d: %s", i, why)
			}
			refused++
		default:
			t.Fatalf("ping p%d answered with %s", i, r.Type)
		}
	}
	t.Logf("%d pongs, %d refused", pongs, refused)
	if pongs == 0 && len(anonymous) == 0 {
		t.Fatalf("no ping of the burst was answered with a pong; the frame burst allowance lets some through")
	}

	// The socket is still open and served.
	s.write(t, []byte(`{"type":"list_conversations","id":"after"}`))
	s.waitFor(t, 10*time.Second, "the reply to a request after the burst", rtReplyTo("after"))
	if r := rtReplyOf(s.snapshot(), "after"); r.Type != protocol.TypeConversations {
		t.Fatalf("the request after the burst was answered with %s %s", r.Type, r.Code)
	}
	if reason := s.closed(); reason != "" {
		t.Fatalf("the socket was %s after the burst", reason)
	}
}

// TestRealtimeSendBurstIsAnsweredNotCut writes 10,000 sends in one burst: each is acked or
// refused with rate_limited and a retry hint, the socket stays open, and what was stored is
// exactly what was acked.
func TestRealtimeSendBurstIsAnsweredNotCut(t *testing.T) {
	const sends = 10000
	env, nodes := rtNodes(t, 1, rtProductionLimits)
	n := nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	login(t, n, "bob")
	s := rtDialRaw(t, n, "alice", login(t, n, "alice"), nil)
	s.write(t, []byte(`{"type":"open_dm","id":"dm","userId":"bob"}`))
	s.waitFor(t, 10*time.Second, "the DM", rtReplyTo("dm"))
	dm := rtReplyOf(s.snapshot(), "dm")
	if dm.Type != protocol.TypeConversation || dm.Conversation == nil {
		t.Fatalf("open_dm answered with %s %s", dm.Type, dm.Code)
	}
	convID := dm.Conversation.ID

	ids := make([]string, sends)
	frames := make([][]byte, sends)
	for i := range frames {
		ids[i] = uuid.NewString()
		frames[i] = fmt.Appendf(nil, `{"type":"send","id":"s%d","conversationId":%q,"clientMsgId":%q,"body":"burst %d"}`,
			i, convID, ids[i], i)
	}
	start := time.Now()
	s.write(t, frames...)
	replies, anonymous := rtBurstReplies(t, s, "s", sends, 90*time.Second)
	t.Logf("%d sends answered in %s", sends, time.Since(start).Round(time.Millisecond))

	if len(anonymous) > 0 {
		t.Errorf("%d error frames without an id (first: %s %q): a refused send must be answered with its id, or the client cannot tell which to retry",
			len(anonymous), anonymous[0].Code, anonymous[0].Message)
	}
	acked := make(map[string]int64) // clientMsgId -> seq
	refused := 0
	for i := range sends {
		rs := replies[i]
		if len(rs) != 1 {
			if len(anonymous) == 0 {
				t.Fatalf("send s%d got %d replies; want exactly one", i, len(rs))
			}
			continue
		}
		switch r := rs[0]; r.Type {
		case protocol.TypeAck:
			if r.ClientMsgID != ids[i] || r.Seq < 1 {
				t.Fatalf("send s%d acked with clientMsgId %s seq %d; want %s", i, r.ClientMsgID, r.Seq, ids[i])
			}
			acked[r.ClientMsgID] = r.Seq
		case protocol.TypeError:
			if why := rtCheckRefusal(r); why != "" {
				t.Fatalf("send s%d: %s", i, why)
			}
			refused++
		default:
			t.Fatalf("send s%d answered with %s", i, r.Type)
		}
	}
	t.Logf("%d acked, %d refused", len(acked), refused)
	if len(acked) == 0 && len(anonymous) == 0 {
		t.Fatalf("no send of the burst was acked; the send burst allowance lets some through")
	}

	s.write(t, []byte(`{"type":"list_conversations","id":"after"}`))
	s.waitFor(t, 10*time.Second, "the reply to a request after the burst", rtReplyTo("after"))
	if reason := s.closed(); reason != "" {
		t.Fatalf("the socket was %s after the burst", reason)
	}

	// Every message stored was acked, at the seq it was acked with; every ack was stored.
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	stored, err := store.MessageRange(ctx, convID, 1, 2*sends)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range stored {
		if seq, ok := acked[m.ClientMsgID]; !ok || seq != m.Seq {
			t.Fatalf("stored %q at seq %d, but its ack (seq %d, received %v) never reached the sender", m.Body, m.Seq, seq, ok)
		}
	}
	if len(stored) != len(acked) {
		t.Fatalf("%d messages stored, %d acked", len(stored), len(acked))
	}
}

// TestRealtimeReadGivesEachDeviceOneCursorAndOneBadge has bob on three sockets over two nodes
// read a DM on one of them: each socket gets exactly one cursor and one badge for it, and none
// of the message pushes came with a badge.
func TestRealtimeReadGivesEachDeviceOneCursorAndOneBadge(t *testing.T) {
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, a, "alice")
	bobToken := login(t, a, "bob")
	bobs := []*rtInbox{
		rtWatch(t, "bob's 1st socket (node A)", dialWith(t, a, bobToken, nil)),
		rtWatch(t, "bob's 2nd socket (node A)", dialWith(t, a, bobToken, nil)),
		rtWatch(t, "bob's 3rd socket (node B)", dialWith(t, b, bobToken, nil)),
	}
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	marks := make([]int, len(bobs))
	for i, in := range bobs {
		in.waitFor(t, 10*time.Second, "the new DM", rtHasConversation(dm.ID))
		in.barrier(t)
		marks[i] = in.len()
	}
	for i := 1; i <= 3; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("message %d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	withMessages := make([]int, len(bobs))
	for i, in := range bobs {
		in.waitFor(t, 10*time.Second, "the 3 messages", func(fs []protocol.ServerFrame) bool { return len(rtMessages(fs, dm.ID)) >= 3 })
		in.barrier(t)
		withMessages[i] = in.len()
	}
	if err := bobs[0].conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 3}); err != nil {
		t.Fatal(err)
	}
	isCursor := func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeCursor && f.ConversationID == dm.ID }
	isBadge := func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeBadge && f.ConversationID == dm.ID }
	for _, in := range bobs {
		in.waitFor(t, 10*time.Second, "a cursor at 3 and a badge for the DM", func(fs []protocol.ServerFrame) bool {
			return slices.ContainsFunc(fs, func(f protocol.ServerFrame) bool { return isCursor(f) && f.ReadSeq == 3 }) &&
				slices.ContainsFunc(fs, isBadge)
		})
	}
	time.Sleep(rtQuiet) // for any second cursor or badge to arrive
	for i, in := range bobs {
		in.barrier(t)
		frames := in.snapshot()
		messageBadges := rtOf(frames[marks[i]:withMessages[i]], isBadge)
		cursors := rtOf(frames[marks[i]:], isCursor)
		badges := rtOf(frames[marks[i]:], isBadge)
		readSeqs := make([]int64, len(cursors))
		for k, c := range cursors {
			readSeqs[k] = c.ReadSeq
		}
		if len(cursors) != 1 || len(badges) != 1 {
			t.Errorf("%s: %d cursor frames (readSeq %v) and %d badge frames for the DM (%d of them with the 3 messages, %d after the read); want exactly one of each, after the read",
				in.name, len(cursors), readSeqs, len(badges), len(messageBadges), len(badges)-len(messageBadges))
			continue
		}
		if cursors[0].ReadSeq != 3 {
			t.Errorf("%s: cursor at %d; want 3", in.name, cursors[0].ReadSeq)
		}
		if bd := badges[0]; bd.Unread == nil || *bd.Unread != 0 {
			t.Errorf("%s: the badge after reading everything says unread %v; want 0", in.name, bd.Unread)
		}
	}
}

// TestRealtimeReconnectGetsEverySeqOnceInOrder has bob's client drop and reconnect while alice
// writes 200 messages: every 25 seqs it closes and reconnects, first to the same node, then to the
// other one, and so on, each time sending sync with the highest seq it holds as its very first
// frame. Over all connections bob gets every seq once, and on each connection in increasing
// order: the server holds live pushes until the sync's replay is out.
func TestRealtimeReconnectGetsEverySeqOnceInOrder(t *testing.T) {
	const (
		messages    = 200
		every       = 25                   // seqs per connection before it drops
		pause       = 2 * time.Millisecond // between sends: messages are in flight at every reconnect
		waitForSeqs = 30 * time.Second
	)
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, 90*time.Second)
	alice := connectReady(t, a, "alice")
	bobToken := login(t, b, "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	type connection struct {
		what string
		sock *rtSocket
	}
	var conns []connection
	seqsOf := func(s *rtSocket) []int64 {
		var out []int64
		for _, f := range s.snapshot() {
			if f.Type == protocol.TypeMessage && f.ConversationID == dm.ID {
				out = append(out, f.Seq)
			}
		}
		return out
	}
	held := func() int64 { // the highest seq bob holds over every connection so far
		var top int64
		for _, c := range conns {
			for _, s := range seqsOf(c.sock) {
				top = max(top, s)
			}
		}
		return top
	}
	report := func() string {
		var b strings.Builder
		for _, c := range conns {
			fmt.Fprintf(&b, "\n  %s: %s", c.what, c.sock.summary(c.sock.snapshot()))
		}
		return b.String()
	}
	connect := func(n *testenv.Node, what string) *rtSocket {
		t.Helper()
		since := held()
		sync := fmt.Appendf(nil, `{"type":"sync","id":"sync","since":{%q:%d}}`, dm.ID, since)
		s := rtDialRaw(t, n, "bob ("+what+")", bobToken, sync)
		conns = append(conns, connection{fmt.Sprintf("%s, sync since %d", what, since), s})
		s.waitFor(t, 10*time.Second, "the synced reply", rtReplyTo("sync"))
		if r := rtReplyOf(s.snapshot(), "sync"); r.Type != protocol.TypeSynced {
			t.Fatalf("%s: sync answered with %s %s", what, r.Type, r.Code)
		}
		return s
	}

	sock := connect(b, "connection 1, node B")
	sendErr := make(chan error, 1)
	go func() {
		for i := 1; i <= messages; i++ {
			ack, err := alice.Send(ctx, dm.ID, fmt.Sprintf("message %d", i))
			if err == nil && ack.Seq != int64(i) {
				err = fmt.Errorf("acked at seq %d", ack.Seq)
			}
			if err != nil {
				sendErr <- fmt.Errorf("send %d: %w", i, err)
				return
			}
			time.Sleep(pause)
		}
		sendErr <- nil
	}()
	for k := 1; ; k++ {
		until := int64(min(k*every, messages))
		sock.waitFor(t, waitForSeqs, fmt.Sprintf("seq %d", until), func([]rtFrame) bool { return slices.Contains(seqsOf(sock), until) })
		if until == messages {
			break
		}
		sock.close()
		// Reconnect to the same node, then to the other, and so on.
		n, name := b, "B"
		if k%2 == 0 {
			n, name = a, "A"
		}
		sock = connect(n, fmt.Sprintf("connection %d, node %s", k+1, name))
	}
	select {
	case err := <-sendErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("alice's sends did not finish")
	}
	sock.barrier(t)
	sock.close()

	var problems []string
	seen := make(map[int64]int)
	for _, c := range conns {
		seqs := seqsOf(c.sock)
		for i, s := range seqs {
			seen[s]++
			if i > 0 && s <= seqs[i-1] {
				problems = append(problems, fmt.Sprintf("%s: seq %d after seq %d", c.what, s, seqs[i-1]))
			}
		}
	}
	for seq := int64(1); seq <= messages; seq++ {
		if seen[seq] != 1 {
			problems = append(problems, fmt.Sprintf("seq %d arrived %d times", seq, seen[seq]))
		}
	}
	if len(seen) != messages {
		problems = append(problems, fmt.Sprintf("%d distinct seqs; want %d", len(seen), messages))
	}
	if len(problems) > 0 {
		t.Fatalf("bob's %d connections did not get seqs 1..%d once each, in order: %s; what each got:%s",
			len(conns), messages, strings.Join(problems, "; "), report())
	}
}

// barrier makes one round trip through a raw socket, as rtInbox.barrier does.
func (s *rtSocket) barrier(t *testing.T) {
	t.Helper()
	s.write(t, []byte(`{"type":"ping","id":"rt-barrier"}`))
	s.waitFor(t, 10*time.Second, "the pong to the barrier", rtReplyTo("rt-barrier"))
}

// TestRealtimeReceiptsNeverMoveBack has bob report two read positions at the same moment from
// sockets on two nodes, round after round: alice, on both nodes, sees bob's receipts only move
// forward, and sees the higher one each round.
func TestRealtimeReceiptsNeverMoveBack(t *testing.T) {
	const rounds, perRound = 8, 10
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, 90*time.Second)
	aliceToken, bobToken := login(t, a, "alice"), login(t, a, "bob")
	alices := []*rtInbox{
		rtWatch(t, "alice on node A", dialWith(t, a, aliceToken, nil)),
		rtWatch(t, "alice on node B", dialWith(t, b, aliceToken, nil)),
	}
	bobA := rtWatch(t, "bob on node A", dialWith(t, a, bobToken, nil))
	bobB := rtWatch(t, "bob on node B", dialWith(t, b, bobToken, nil))
	dm, err := alices[0].conn.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for _, in := range []*rtInbox{alices[1], bobA, bobB} {
		in.waitFor(t, 10*time.Second, "the new DM", rtHasConversation(dm.ID))
	}
	isBobsReceipt := func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReceipt && f.ConversationID == dm.ID && f.UserID == "bob"
	}
	for r := range rounds {
		base := int64(r * perRound)
		for i := 1; i <= perRound; i++ {
			if _, err := alices[0].conn.Send(ctx, dm.ID, fmt.Sprintf("message %d", base+int64(i))); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		// Both of bob's nodes have seen the round's messages, so neither read is clamped.
		for _, in := range []*rtInbox{bobA, bobB} {
			in.waitFor(t, 10*time.Second, fmt.Sprintf("seq %d", base+perRound), func(fs []protocol.ServerFrame) bool {
				return len(rtMessages(fs, dm.ID)) >= int(base)+perRound
			})
		}
		high, low := base+8, base+5
		start := make(chan struct{})
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for _, read := range []struct {
			in  *rtInbox
			seq int64
		}{{bobA, high}, {bobB, low}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- read.in.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: read.seq})
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("read: %v", err)
			}
		}
		for _, in := range alices {
			in.waitFor(t, 10*time.Second, fmt.Sprintf("bob's receipt at %d", high), func(fs []protocol.ServerFrame) bool {
				return slices.ContainsFunc(fs, func(f protocol.ServerFrame) bool { return isBobsReceipt(f) && f.ReadSeq == high })
			})
		}
	}
	time.Sleep(rtQuiet) // for a late, lower receipt to arrive
	for _, in := range alices {
		in.barrier(t)
		var seqs []int64
		for _, f := range rtOf(in.snapshot(), isBobsReceipt) {
			seqs = append(seqs, f.ReadSeq)
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Errorf("%s: bob's receipt moved back from %d to %d; receipts in order: %v", in.name, seqs[i-1], seqs[i], seqs)
				break
			}
		}
	}
}

// rtBadge asks GET /api/badge with token and returns the total.
func rtBadge(t *testing.T, n *testenv.Node, token string) int64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, n.URL()+"/api/badge", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/badge: %v", err)
	}
	defer resp.Body.Close()
	var badge struct {
		Total *int64 `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&badge); err != nil || resp.StatusCode != http.StatusOK || badge.Total == nil {
		t.Fatalf("GET /api/badge: %s, %v, total %v", resp.Status, err, badge.Total)
	}
	return *badge.Total
}

// TestRealtimeBadgeCountsNoOwnSends asks for badges over HTTP right after alice's three acked
// sends, well inside the read window: her own messages are not unread to her, and are to bob.
func TestRealtimeBadgeCountsNoOwnSends(t *testing.T) {
	_, nodes := rtNodes(t, 1, func(c *node.Config) { c.ReadWindow = time.Minute })
	n := nodes[0]
	ctx := ctxT(t, time.Minute)
	aliceToken, bobToken := login(t, n, "alice"), login(t, n, "bob")
	alice := dialWith(t, n, aliceToken, nil)
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("message %d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if got := rtBadge(t, n, aliceToken); got != 0 {
		t.Errorf("alice's badge right after her 3 acked sends: total %d; want 0 (her own messages are never unread)", got)
	}
	if got := rtBadge(t, n, bobToken); got != 3 {
		t.Errorf("bob's badge after alice's 3 messages: total %d; want 3", got)
	}
}

// rtCursorWritesOf returns the recorded writes on the read cursors that name user.
func rtCursorWritesOf(rec *testenv.CommandRecorder, user string) []testenv.Command {
	var out []testenv.Command
	for _, c := range rec.Writes("readCursors") {
		if bytes.Contains(c.Body, []byte(user)) {
			out = append(out, c)
		}
	}
	return out
}

// TestRealtimeConnectCyclesWriteNoOtherCursor has an unrelated user connect and disconnect 1,000
// times while alice's read is pending in a ten-minute read window: none of those cycles writes
// alice's cursor, and alice's unread on a fresh connection still reflects her read.
func TestRealtimeConnectCyclesWriteNoOtherCursor(t *testing.T) {
	const cycles, workers = 1000, 4
	rec := &testenv.CommandRecorder{}
	_, nodes := rtNodes(t, 1, func(c *node.Config) {
		c.ReadWindow = 10 * time.Minute // no window ends during the cycles, however slow the machine
		c.StoreMonitor = rec.Monitor()
	})
	n := nodes[0]
	ctx := ctxT(t, 90*time.Second)
	aliceToken := login(t, n, "alice")
	alice := rtWatch(t, "alice", dialWith(t, n, aliceToken, nil))
	bob := connectReady(t, n, "bob")
	dm, err := bob.OpenDM(ctx, "alice")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	alice.waitFor(t, 10*time.Second, "the new DM", rtHasConversation(dm.ID))
	for i := 1; i <= 3; i++ {
		if _, err := bob.Send(ctx, dm.ID, fmt.Sprintf("message %d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	alice.waitFor(t, 10*time.Second, "the 3 messages", func(fs []protocol.ServerFrame) bool { return len(rtMessages(fs, dm.ID)) >= 3 })
	rec.Reset()
	if err := alice.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	alice.waitFor(t, 10*time.Second, "her cursor at 2", func(fs []protocol.ServerFrame) bool {
		return slices.ContainsFunc(fs, func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeCursor && f.ConversationID == dm.ID && f.ReadSeq == 2
		})
	})
	if w := rtCursorWritesOf(rec, "alice"); len(w) > 0 {
		t.Fatalf("alice's read was written at once (%s %s); with a ten-minute read window it must still be pending, or this test proves nothing",
			w[0].Name, w[0].Body)
	}

	carolToken := login(t, n, "carol")
	start := time.Now()
	var done atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles / workers {
				if err := rtConnectCycle(ctx, n, carolToken); err != nil {
					errs <- fmt.Errorf("cycle %d: %w", done.Load()+1, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d connect/disconnect cycles of carol in %s", cycles, time.Since(start).Round(time.Millisecond))
	if w := rtCursorWritesOf(rec, "alice"); len(w) > 0 {
		t.Errorf("carol's connects and disconnects wrote alice's pending cursor %d times; first: %s %s", len(w), w[0].Name, w[0].Body)
	}

	// Alice's read holds on a fresh connection, after her first one has gone.
	if err := alice.conn.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := connectReady(t, n, "alice")
	list, err := fresh.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatalf("list conversations: %v", err)
	}
	i := slices.IndexFunc(list.Conversations, func(c protocol.Conversation) bool { return c.ID == dm.ID })
	if i < 0 {
		t.Fatalf("alice's fresh connection does not list the DM: %+v", list.Conversations)
	}
	if c := list.Conversations[i]; c.ReadSeq != 2 || c.Unread != 1 {
		t.Fatalf("alice's fresh connection: readSeq %d, unread %d; she read 2 of 3", c.ReadSeq, c.Unread)
	}
}

// rtConnectCycle opens a connection with token, waits for its hello and closes it.
func rtConnectCycle(ctx context.Context, n *testenv.Node, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.WSURL(), token, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				return fmt.Errorf("closed before hello: %w", c.Err())
			}
			if f.Type == protocol.TypeHello {
				return c.Close()
			}
		case <-ctx.Done():
			return fmt.Errorf("no hello: %w", ctx.Err())
		}
	}
}
