package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

// bodyPrefix starts every message the bench sends; the send time follows it in nanoseconds, so a
// receiver computes delivery latency from the message alone.
const bodyPrefix = "chatbench "

// maxMembersPerFrame bounds the members named in one create_group or add_members frame, so the
// frame stays under the server's 64 KiB read limit with ids of up to 24 bytes.
const maxMembersPerFrame = 2000

// worker is one process's share of the load: its users, their connections and their
// conversations. Its phases run in order: login, connect, setup, drive, close.
type worker struct {
	cfg    config
	dialer *dialer

	tokens []string
	conns  []*benchConn // nil where the connection failed
	convs  []benchConversation
	slots  []slot

	driveStart atomic.Int64 // unix nanos; deliveries of messages sent before it are ignored
	delivered  atomic.Int64
	lastDeliv  atomic.Int64 // unix nanos of the latest counted delivery
	delivery   histogram
}

// benchConversation is a conversation the bench created, with its members' connections.
type benchConversation struct {
	id      string
	members []*benchConn
}

// slot is one member's turn to send in one conversation.
type slot struct {
	conv   *benchConversation
	sender *benchConn
}

func newWorker(cfg config) (*worker, error) {
	sources, err := parseSources(cfg.Sources)
	if err != nil {
		return nil, err
	}
	d := newDialer(sources)
	d.n.Store(uint64(cfg.Index)) // children start on different source addresses
	return &worker{cfg: cfg, dialer: d}, nil
}

func (w *worker) userName(i int) string { return w.cfg.UserPrefix + strconv.Itoa(w.cfg.UserOffset+i) }

func (w *worker) baseURL(i int) string { return w.cfg.URLs[(w.cfg.UserOffset+i)%len(w.cfg.URLs)] }

// run executes one named phase.
func (w *worker) run(ctx context.Context, phase string) (*result, error) {
	switch phase {
	case phaseLogin:
		return w.login(ctx), nil
	case phaseConnect:
		return w.connect(ctx), nil
	case phaseSetup:
		return w.setup(ctx), nil
	case phaseWarmup:
		return w.warmup(ctx), nil
	case phaseDrive:
		return w.drive(ctx), nil
	case phaseClose:
		return w.closeAll(), nil
	}
	return nil, fmt.Errorf("unknown phase %q", phase)
}

// Phases, in the order they run.
const (
	phaseLogin   = "login"
	phaseConnect = "connect"
	phaseSetup   = "setup"
	phaseWarmup  = "warmup"
	phaseDrive   = "drive"
	phaseClose   = "close"
)

// parallel runs fn(i) for i in [0, n) on at most limit goroutines.
func parallel(n, limit int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, max(limit, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// login signs every user in (dev mode), creating the accounts on first use.
func (w *worker) login(ctx context.Context) *result {
	start := time.Now()
	w.tokens = make([]string, w.cfg.Clients)
	var errs errorCounter
	var ok atomic.Int64
	parallel(w.cfg.Clients, w.cfg.DialConcurrency, func(i int) {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		defer cancel()
		token, _, err := client.Login(rctx, w.dialer.next(), w.baseURL(i), w.userName(i))
		if err != nil {
			errs.addAs("login", err)
			return
		}
		w.tokens[i] = token
		ok.Add(1)
	})
	w.dialer.closeIdle()
	res := &result{Elapsed: time.Since(start), OK: ok.Load()}
	errs.fill(res)
	return res
}

// connect opens one WebSocket per signed-in user and waits for each hello.
func (w *worker) connect(ctx context.Context) *result {
	start := time.Now()
	w.conns = make([]*benchConn, w.cfg.Clients)
	var errs errorCounter
	var ok atomic.Int64
	lat := &histogram{}
	var minSynced, maxSynced atomic.Int64
	minSynced.Store(math.MaxInt64)
	parallel(w.cfg.Clients, w.cfg.DialConcurrency, func(i int) {
		if w.tokens[i] == "" {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		defer cancel()
		t0 := time.Now()
		c, err := dialBench(rctx, w.dialer, "ws"+strings.TrimPrefix(w.baseURL(i), "http")+"/ws", w.tokens[i], i, w.userName(i), w.onPush)
		if err != nil {
			errs.add(err)
			return
		}
		lat.record(time.Since(t0))
		w.conns[i] = c
		ok.Add(1)
		storeMax(&maxSynced, int64(c.synced))
		storeMin(&minSynced, int64(c.synced))
	})
	res := &result{Elapsed: time.Since(start), OK: ok.Load(), Latency: lat}
	if res.OK > 0 {
		res.Synced = &[2]int64{minSynced.Load(), maxSynced.Load()}
	}
	errs.fill(res)
	return res
}

// setup creates the DMs and groups among the connected users and waits until the server has told
// every member, so no delivery is missed because a member's session had not joined yet.
func (w *worker) setup(ctx context.Context) *result {
	start := time.Now()
	var live []*benchConn
	for _, c := range w.conns {
		if c != nil {
			live = append(live, c)
		}
	}
	res := &result{}
	if len(live) < 2 {
		res.Errors = map[string]int64{"too_few_connections": 1}
		return res
	}
	type plan struct {
		name    string
		members []*benchConn
		dm      bool
	}
	var plans []plan
	for k := range w.cfg.DMs {
		a, b := live[(2*k)%len(live)], live[(2*k+1)%len(live)]
		plans = append(plans, plan{members: []*benchConn{a, b}, dm: true})
	}
	size := min(max(w.cfg.GroupSize, 2), len(live))
	for g := range w.cfg.Groups {
		members := make([]*benchConn, size)
		for j := range size {
			members[j] = live[(g*size+j)%len(live)]
		}
		plans = append(plans, plan{name: fmt.Sprintf("chatbench %d/%d", w.cfg.Index, g), members: members})
	}

	var errs errorCounter
	convs := make([]*benchConversation, len(plans))
	waitFor := make([][]*benchConn, len(plans)) // members that must be told of the conversation
	parallel(len(plans), w.cfg.SetupConcurrency, func(i int) {
		p := plans[i]
		rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		defer cancel()
		creator := p.members[0]
		id, fresh, err := w.create(rctx, creator, p.name, p.members, p.dm, start)
		if err != nil {
			errs.add(err)
			return
		}
		convs[i] = &benchConversation{id: id, members: p.members}
		if fresh {
			waitFor[i] = p.members[1:]
		}
	})
	deadline := time.Now().Add(w.cfg.Timeout)
	for i, conv := range convs {
		if conv == nil {
			continue
		}
		w.convs = append(w.convs, *conv)
		for _, m := range waitFor[i] {
			for !m.hasJoined(conv.id) && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			if !m.hasJoined(conv.id) {
				res.Unconfirmed++
			}
		}
	}
	w.slots = w.slots[:0]
	turns := map[*benchConn]int{}
	for i := range w.convs {
		conv := &w.convs[i]
		res.Memberships += int64(len(conv.members))
		senders := conv.members
		if k := w.cfg.Senders; k > 0 && k < len(senders) {
			senders = senders[:k]
		}
		for _, m := range senders {
			w.slots = append(w.slots, slot{conv: conv, sender: m})
			turns[m]++
		}
	}
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(w.cfg.Index)))
	rng.Shuffle(len(w.slots), func(i, j int) { w.slots[i], w.slots[j] = w.slots[j], w.slots[i] })
	if len(w.slots) > 0 {
		for _, n := range turns {
			res.MaxConnRate = max(res.MaxConnRate, w.cfg.Rate*float64(n)/float64(len(w.slots)))
		}
	}
	res.OK = int64(len(w.convs))
	errs.fill(res)
	res.Elapsed = time.Since(start)
	return res
}

// create opens a DM or creates a group, naming the members in frames small enough for the server.
// fresh reports whether the conversation is new, so its members will be told of it.
func (w *worker) create(ctx context.Context, creator *benchConn, name string, members []*benchConn, dm bool, since time.Time) (id string, fresh bool, err error) {
	if dm {
		r, err := creator.request(ctx, protocol.ClientFrame{Type: protocol.TypeOpenDM, UserID: members[1].userID})
		if err != nil {
			return "", false, err
		}
		if r.Conversation == nil {
			return "", false, fmt.Errorf("open_dm reply has no conversation")
		}
		// A DM from an earlier run was known to both sessions when they opened.
		return r.Conversation.ID, !r.Conversation.CreatedAt.Before(since.Add(-time.Second)), nil
	}
	ids := make([]string, 0, len(members)-1)
	for _, m := range members[1:] {
		ids = append(ids, m.userID)
	}
	first := ids[:min(len(ids), maxMembersPerFrame)]
	r, err := creator.request(ctx, protocol.ClientFrame{Type: protocol.TypeCreateGroup, Name: name, Members: first})
	if err != nil {
		return "", false, err
	}
	if r.Conversation == nil {
		return "", false, fmt.Errorf("create_group reply has no conversation")
	}
	for rest := ids[len(first):]; len(rest) > 0; {
		chunk := rest[:min(len(rest), maxMembersPerFrame)]
		rest = rest[len(chunk):]
		if _, err := creator.request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: r.Conversation.ID, Members: chunk}); err != nil {
			return "", false, fmt.Errorf("add members: %w", err)
		}
	}
	return r.Conversation.ID, true, nil
}

// warmup sends one message to every conversation, a few at a time, so the partition owners have
// loaded each conversation before the measured sends; a cold load costs store reads that a busy
// conversation pays only once.
func (w *worker) warmup(ctx context.Context) *result {
	start := time.Now()
	var errs errorCounter
	var ok atomic.Int64
	parallel(len(w.convs), w.cfg.SetupConcurrency, func(i int) {
		conv := &w.convs[i]
		rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		defer cancel()
		if _, err := conv.members[0].request(rctx, protocol.ClientFrame{Type: protocol.TypeSend,
			ConversationID: conv.id, ClientMsgID: uuid.NewString(), Body: bodyPrefix + "warm-up"}); err != nil {
			errs.add(err)
			return
		}
		ok.Add(1)
	})
	res := &result{Elapsed: time.Since(start), OK: ok.Load()}
	errs.fill(res)
	return res
}

// drive sends at the target rate for the duration, open loop: a send is issued on schedule whether
// or not earlier ones were acked, so a slow server shows up as latency rather than as a lower rate
// that hides it. It then waits up to the drain time for the deliveries still in flight.
func (w *worker) drive(ctx context.Context) *result {
	res := &result{}
	if len(w.slots) == 0 || w.cfg.Rate <= 0 {
		res.Errors = map[string]int64{"nothing_to_send": 1}
		return res
	}
	var errs errorCounter
	var acked, expected, inflight, skipped, lastAck atomic.Int64
	ackLat := &histogram{}
	var wg sync.WaitGroup
	total := int64(w.cfg.Rate * w.cfg.Duration.Seconds())
	start := time.Now()
	w.driveStart.Store(start.UnixNano())
	var issued int64
	for issued < total && ctx.Err() == nil {
		due := min(total, int64(time.Since(start).Seconds()*w.cfg.Rate)+1)
		for ; issued < due; issued++ {
			s := w.slots[issued%int64(len(w.slots))]
			if inflight.Load() >= int64(w.cfg.MaxInflight) {
				skipped.Add(1)
				continue
			}
			inflight.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer inflight.Add(-1)
				t0 := time.Now()
				rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
				defer cancel()
				_, err := s.sender.request(rctx, protocol.ClientFrame{Type: protocol.TypeSend,
					ConversationID: s.conv.id, ClientMsgID: uuid.NewString(), Body: w.body(t0)})
				if err != nil {
					errs.add(err)
					return
				}
				ackLat.record(time.Since(t0))
				acked.Add(1)
				storeMax(&lastAck, time.Now().UnixNano())
				expected.Add(int64(len(s.conv.members) - 1))
			}()
		}
		next := start.Add(time.Duration(float64(issued) / w.cfg.Rate * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	sendWindow := time.Since(start)
	wg.Wait()
	drainUntil := time.Now().Add(w.cfg.Drain)
	for w.delivered.Load() < expected.Load() && time.Now().Before(drainUntil) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	res.Attempted = issued - skipped.Load()
	res.Skipped = skipped.Load()
	res.OK = acked.Load()
	errs.fill(res)
	res.Latency = ackLat
	res.Expected = expected.Load()
	res.Delivered = w.delivered.Load()
	res.Delivery = &w.delivery
	res.SendWindow = sendWindow
	if last := lastAck.Load(); last > 0 {
		res.AckWindow = time.Duration(last - start.UnixNano())
	}
	if last := w.lastDeliv.Load(); last > 0 {
		res.DeliveryWindow = time.Duration(last - start.UnixNano())
	}
	res.Elapsed = time.Since(start)
	return res
}

// body is a message that carries its own send time, padded to the configured size.
func (w *worker) body(at time.Time) string {
	b := bodyPrefix + strconv.FormatInt(at.UnixNano(), 10)
	if pad := w.cfg.BodyBytes - len(b) - 1; pad > 0 {
		b += " " + strings.Repeat("x", pad)
	}
	return b
}

// onPush counts a message delivered to a member other than its sender, with its latency.
func (w *worker) onPush(c *benchConn, f *frame, at time.Time) {
	if f.Type != protocol.TypeMessage || f.SenderID == c.userID {
		return
	}
	rest, ok := strings.CutPrefix(f.Body, bodyPrefix)
	if !ok {
		return
	}
	stamp, _, _ := strings.Cut(rest, " ")
	sent, err := strconv.ParseInt(stamp, 10, 64)
	start := w.driveStart.Load()
	if err != nil || start == 0 || sent < start {
		return
	}
	w.delivery.record(at.Sub(time.Unix(0, sent)))
	w.delivered.Add(1)
	storeMax(&w.lastDeliv, at.UnixNano())
}

// storeMax raises v to at least x.
func storeMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// storeMin lowers v to at most x.
func storeMin(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x >= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// closeAll closes every connection, a few at a time so the server is not asked to do it at once.
func (w *worker) closeAll() *result {
	start := time.Now()
	parallel(len(w.conns), w.cfg.DialConcurrency, func(i int) {
		if c := w.conns[i]; c != nil {
			c.close()
		}
	})
	return &result{Elapsed: time.Since(start), OK: int64(len(w.conns))}
}
