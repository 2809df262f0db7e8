package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// Client behaviour, each setting with its reason.
const (
	// attemptTimeout bounds one send attempt. A node holds a send while its partition has no
	// owner, so this is longer than a failover; past it the client gives up on the connection.
	attemptTimeout = 10 * time.Second
	// retryBackoff is the pause before resending after a retryable error or a broken connection.
	retryBackoff = 100 * time.Millisecond
)

// received is one message push as a client saw it.
type received struct {
	seq         int64
	clientMsgID string
	body        string
}

// feed reads one connection's pushes in the background and keeps what the tests check: the
// message pushes per conversation in arrival order, and the conversations the server announced.
type feed struct {
	conn      *client.Conn
	opened    time.Time // when Dial returned: connected and synced
	mu        sync.Mutex
	messages  map[string][]received
	announced map[string]bool
	done      chan struct{}
}

func newFeed(conn *client.Conn) *feed {
	f := &feed{conn: conn, opened: time.Now(), messages: make(map[string][]received), announced: make(map[string]bool), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *feed) run() {
	defer close(f.done)
	for fr := range f.conn.Pushes() {
		f.mu.Lock()
		switch fr.Type {
		case protocol.TypeMessage:
			f.messages[fr.ConversationID] = append(f.messages[fr.ConversationID], received{fr.Seq, fr.ClientMsgID, fr.Body})
		case protocol.TypeConversation:
			if fr.Conversation != nil {
				f.announced[fr.Conversation.ID] = true
			}
		}
		f.mu.Unlock()
	}
}

// messagesOf returns a copy of the message pushes of a conversation so far.
func (f *feed) messagesOf(convID string) []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.messages[convID]...)
}

func (f *feed) count(convID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.messages[convID])
}

func (f *feed) knows(convID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.announced[convID]
}

// member is a signed-in user with a WebSocket through the load balancer, replaced by a new one
// (through the load balancer again, so usually on another node) whenever it breaks, the way a
// real client reconnects.
type member struct {
	name  string
	token string
	wsURL string // the load balancer's; every reconnect goes there
	// resync makes each reconnect sync with the highest seq the member holds of each
	// conversation, so the server replays what it missed from the store, as an app does.
	resync bool

	dialMu sync.Mutex // one reconnect at a time: a sender and keepConnected may both see a break
	mu     sync.Mutex
	feeds  []*feed // one per connection, in the order they were opened; the last is current

	stopKeeping context.CancelFunc // set by keepConnected
	keeping     sync.WaitGroup
}

// newMember signs in as name through the load balancer and connects.
func (c *cluster) newMember(ctx context.Context, name string) (*member, error) {
	return c.newMemberAt(ctx, name, c.wsURL())
}

// newMemberAt signs in as name through the load balancer and opens its first connection at
// wsURL; it reconnects through the load balancer.
func (c *cluster) newMemberAt(ctx context.Context, name, wsURL string) (*member, error) {
	token, _, err := client.Login(ctx, http.DefaultClient, c.lb.URL, name)
	if err != nil {
		return nil, err
	}
	m := &member{name: name, token: token, wsURL: c.wsURL()}
	if err := m.connectTo(ctx, wsURL); err != nil {
		return nil, err
	}
	return m, nil
}

// wsURL is the load balancer's WebSocket endpoint.
func (c *cluster) wsURL() string { return "ws" + strings.TrimPrefix(c.lb.URL, "http") + "/ws" }

// membersOn signs in the named users and connects each straight to node n rather than through
// the load balancer, so a test knows whose connections a crash of n cuts. They reconnect
// through the load balancer with a sync of what they hold, and keep reconnecting whenever their
// connection breaks, sending or not (keepConnected), so a crash of n sets off a reconnect
// storm. Their connections are closed when the test ends.
func (c *cluster) membersOn(ctx context.Context, n *chatNode, names ...string) []*member {
	c.t.Helper()
	out := make([]*member, len(names))
	for i, name := range names {
		m, err := c.newMemberAt(ctx, name, "ws"+strings.TrimPrefix(n.url(), "http")+"/ws")
		if err != nil {
			c.t.Fatalf("connect %s to %s: %v", name, n.id, err)
		}
		m.resync = true
		m.keepConnected(ctx)
		c.t.Cleanup(m.close)
		out[i] = m
	}
	return out
}

// members signs in and connects the named users, failing the test on error; their connections
// are closed when the test ends.
func (c *cluster) members(ctx context.Context, names ...string) []*member {
	c.t.Helper()
	out := make([]*member, len(names))
	for i, name := range names {
		m, err := c.newMember(ctx, name)
		if err != nil {
			c.t.Fatalf("connect %s through the load balancer: %v", name, err)
		}
		c.t.Cleanup(m.close)
		out[i] = m
	}
	return out
}

// connectTo dials wsURL until a connection is open or ctx ends.
func (m *member) connectTo(ctx context.Context, wsURL string) error {
	for {
		var opts *client.Options
		if m.resync {
			opts = &client.Options{Since: m.held()}
		}
		conn, err := client.Dial(ctx, wsURL, m.token, opts)
		if err == nil {
			m.mu.Lock()
			m.feeds = append(m.feeds, newFeed(conn))
			m.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("connect %s: %w", m.name, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryBackoff):
		}
	}
}

// reconnect replaces a broken connection with a new one through the load balancer, unless
// another goroutine already replaced it.
func (m *member) reconnect(ctx context.Context, broken *feed) error {
	m.dialMu.Lock()
	defer m.dialMu.Unlock()
	if m.current() != broken {
		return nil
	}
	_ = broken.conn.Close() // it may be broken already
	return m.connectTo(ctx, m.wsURL)
}

// keepConnected reconnects the member whenever its connection breaks, until close, as an open
// app does; without it only a send notices a broken connection.
func (m *member) keepConnected(ctx context.Context) {
	ctx, m.stopKeeping = context.WithCancel(ctx)
	m.keeping.Go(func() {
		for {
			f := m.current()
			select {
			case <-ctx.Done():
				return
			case <-f.conn.Done():
			}
			if err := m.reconnect(ctx, f); err != nil {
				return // ctx ended
			}
		}
	})
}

// held returns, per conversation, the highest seq any of the member's connections received.
func (m *member) held() map[string]int64 {
	out := make(map[string]int64)
	for _, f := range m.connections() {
		f.mu.Lock()
		for conv, msgs := range f.messages {
			for _, r := range msgs {
				out[conv] = max(out[conv], r.seq)
			}
		}
		f.mu.Unlock()
	}
	return out
}

func (m *member) current() *feed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.feeds[len(m.feeds)-1]
}

// connections returns every connection's feed, the current one last.
func (m *member) connections() []*feed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*feed(nil), m.feeds...)
}

func (m *member) close() {
	if m.stopKeeping != nil {
		m.stopKeeping()
		m.keeping.Wait()
	}
	for _, f := range m.connections() {
		_ = f.conn.Close() // it may be broken already
		<-f.done
	}
}

// send sends body with clientMsgID until it is acknowledged, as a client must: after a
// retryable error it resends on the same connection; when the connection breaks or the ack does
// not come, it reconnects and resends with the same clientMsgID, which the server stores once.
// It returns the ack and how many attempts it took.
func (m *member) send(ctx context.Context, convID, clientMsgID, body string) (protocol.ServerFrame, int, error) {
	for attempt := 1; ; attempt++ {
		f := m.current()
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		ack, err := f.conn.SendWithID(actx, convID, clientMsgID, body)
		cancel()
		if err == nil {
			return ack, attempt, nil
		}
		if ctx.Err() != nil {
			return protocol.ServerFrame{}, attempt, fmt.Errorf("send %q as %s: gave up after %d attempts: %w", body, m.name, attempt, err)
		}
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Retryable {
			return protocol.ServerFrame{}, attempt, fmt.Errorf("send %q as %s: %w", body, m.name, err)
		}
		if pe == nil {
			// The connection broke, or the ack did not come in time.
			if err := m.reconnect(ctx, f); err != nil {
				return protocol.ServerFrame{}, attempt, err
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryBackoff):
		}
	}
}

// sentMessage is one acknowledged send.
type sentMessage struct {
	sender      string
	clientMsgID string
	body        string
	seq         int64
	firstTry    time.Time
	acked       time.Time
	attempts    int
}

// traffic is members sending into one conversation, each as fast as its acks come back or at a
// steady pace, every body naming its sender and its number so loss and duplicates show without
// side state.
type traffic struct {
	convID    string
	perMember int
	pace      time.Duration // the least time from one send of a member to its next; 0: none
	stop      chan struct{}
	halting   sync.Once
	wg        sync.WaitGroup

	mu    sync.Mutex
	acked []sentMessage // in the order the acks came
	errs  []error
}

// startTraffic makes every member send perMember messages into convID, or, with perMember 0,
// keep sending until finish. ctx bounds the whole run.
func startTraffic(ctx context.Context, convID string, members []*member, perMember int) *traffic {
	tr := &traffic{convID: convID, perMember: perMember, stop: make(chan struct{})}
	tr.start(ctx, members)
	return tr
}

// startSteadyTraffic makes every member send into convID once per pace, or as soon as its last
// send is acknowledged when that took longer, until finish: a steady load that leaves the
// machine room, so the waits it measures are the fault's rather than a queue's.
func startSteadyTraffic(ctx context.Context, convID string, members []*member, pace time.Duration) *traffic {
	tr := &traffic{convID: convID, pace: pace, stop: make(chan struct{})}
	tr.start(ctx, members)
	return tr
}

func (tr *traffic) start(ctx context.Context, members []*member) {
	for _, m := range members {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for k := 0; tr.perMember == 0 || k < tr.perMember; k++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				s := sentMessage{sender: m.name, clientMsgID: uuid.NewString(), body: fmt.Sprintf("%s#%d", m.name, k), firstTry: time.Now()}
				ack, attempts, err := m.send(ctx, tr.convID, s.clientMsgID, s.body)
				tr.mu.Lock()
				if err != nil {
					tr.errs = append(tr.errs, err)
					tr.mu.Unlock()
					return
				}
				s.seq, s.acked, s.attempts = ack.Seq, time.Now(), attempts
				tr.acked = append(tr.acked, s)
				tr.mu.Unlock()
				if tr.pace > 0 {
					select {
					case <-tr.stop:
						return
					case <-time.After(time.Until(s.firstTry.Add(tr.pace))):
					}
				}
			}
		}()
	}
}

// progress returns how many sends are acknowledged and the first error, if any sender stopped.
func (tr *traffic) progress() (int, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.errs) > 0 {
		return len(tr.acked), tr.errs[0]
	}
	return len(tr.acked), nil
}

// waitAcked waits until at least n sends are acknowledged.
func (tr *traffic) waitAcked(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	testenv.CheckFor(t, timeout, pollInterval, func() error {
		got, err := tr.progress()
		if err != nil {
			return fmt.Errorf("%w: a sender stopped: %v", testenv.ErrGiveUp, err)
		}
		if got < n {
			return fmt.Errorf("%d of %d sends acknowledged", got, n)
		}
		return nil
	})
}

// firstAckStartedAfter returns when the first send begun after since was acknowledged.
func (tr *traffic) firstAckStartedAfter(since time.Time) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, s := range tr.acked {
		if s.firstTry.After(since) {
			return s.acked, true
		}
	}
	return time.Time{}, false
}

// longestStall returns the longest time after since during which no send was acknowledged.
func (tr *traffic) longestStall(since time.Time) time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var longest time.Duration
	last := since
	for _, s := range tr.acked { // in ack order
		if s.acked.After(since) {
			longest = max(longest, s.acked.Sub(last))
			last = s.acked
		}
	}
	return longest
}

// longestWait returns the longest a send acknowledged after since waited for its ack, from its
// first attempt: what its sender noticed.
func (tr *traffic) longestWait(since time.Time) time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var longest time.Duration
	for _, s := range tr.acked {
		if s.acked.After(since) {
			longest = max(longest, s.acked.Sub(s.firstTry))
		}
	}
	return longest
}

// halt tells endless senders to stop once their current message is acknowledged.
func (tr *traffic) halt() { tr.halting.Do(func() { close(tr.stop) }) }

// finish waits for the senders, after telling endless ones to stop once their current message
// is acknowledged, and returns every acknowledged send; a sender that failed fails the test.
func (tr *traffic) finish(t testing.TB) []sentMessage {
	t.Helper()
	if tr.perMember == 0 {
		tr.halt()
	}
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, err := range tr.errs {
		t.Error(err)
	}
	if len(tr.errs) > 0 {
		t.FailNow()
	}
	return append([]sentMessage(nil), tr.acked...)
}

// retries sums the attempts beyond the first over sends.
func retries(sends []sentMessage) int {
	n := 0
	for _, s := range sends {
		n += s.attempts - 1
	}
	return n
}

// steadyPace is how often each sender of a workload sends: ten a second, so a dozen senders
// keep every partition busy while the machine has room to spare.
const steadyPace = 100 * time.Millisecond

// workload is steady sends into several groups at once, so a fault is seen by the partitions of
// every node rather than one.
type workload struct {
	groups []*workGroup
}

// workGroup is one group of a workload and the members sending into it.
type workGroup struct {
	name      string
	conv      string
	partition int
	members   []*member
	senders   []*member
	tr        *traffic
}

// startWorkload creates groups groups of perGroup members each, connected through the load
// balancer, each group on a partition of its own owned by the nodes in turn (as owner says), and
// starts every member sending steadily into its group.
func (c *cluster) startWorkload(ctx context.Context, owner map[int]*chatNode, groups, perGroup int) *workload {
	c.t.Helper()
	w := &workload{}
	used := make(map[int]bool)
	for g := range groups {
		var names []string
		for u := range perGroup {
			names = append(names, fmt.Sprintf("g%du%d", g, u))
		}
		members := c.members(ctx, names...)
		name, on := fmt.Sprintf("group %d", g), c.nodes[g%len(c.nodes)]
		free := false // whether the node owns a partition no group is on yet
		for p, n := range owner {
			free = free || n == on && !used[p]
		}
		conv := c.createGroupWhere(ctx, name, members, func(p int) bool { return owner[p] == on && (!used[p] || !free) })
		used[sequencer.PartitionOf(conv, testPartitions)] = true
		w.add(name, conv, members, members)
	}
	w.start(ctx)
	return w
}

// add puts a group in the workload; senders are the members that will send.
func (w *workload) add(name, conv string, members, senders []*member) {
	w.groups = append(w.groups, &workGroup{name: name, conv: conv, partition: sequencer.PartitionOf(conv, testPartitions), members: members, senders: senders})
}

// start starts the senders of every group sending steadily.
func (w *workload) start(ctx context.Context) {
	for _, g := range w.groups {
		g.tr = startSteadyTraffic(ctx, g.conv, g.senders, steadyPace)
	}
}

// describe logs each group's partition and its owner.
func (w *workload) describe(t testing.TB, owner map[int]*chatNode) {
	t.Helper()
	for _, g := range w.groups {
		t.Logf("%s: %d members, %d sending, partition %d owned by %s", g.name, len(g.members), len(g.senders), g.partition, owner[g.partition].id)
	}
}

// waitEachAcked waits until every group has at least n sends acknowledged.
func (w *workload) waitEachAcked(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	for _, g := range w.groups {
		g.tr.waitAcked(t, n, timeout)
	}
}

// waitRecovered waits until every group has an acknowledged send begun after since, and returns
// how long after since the last of those first acks came.
func (w *workload) waitRecovered(t testing.TB, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var last time.Time
	testenv.CheckFor(t, timeout, pollInterval, func() error {
		for _, g := range w.groups {
			if _, err := g.tr.progress(); err != nil {
				return fmt.Errorf("%w: a sender of %s stopped: %v", testenv.ErrGiveUp, g.name, err)
			}
			acked, ok := g.tr.firstAckStartedAfter(since)
			if !ok {
				return fmt.Errorf("%s: no send begun after %s acknowledged", g.name, since.Format(time.TimeOnly))
			}
			if acked.After(last) {
				last = acked
			}
		}
		return nil
	})
	return last.Sub(since)
}

// waitFigures are the longest waits a workload measured after a fault, over all its groups.
type waitFigures struct {
	wait  time.Duration // the longest a send waited for its ack
	stall time.Duration // the longest time a group had no ack
}

// finish stops the senders and checks every group as runCrash checks one: every acknowledged
// send stored once with gapless seqs, and delivered to each connection at most once and in
// order. It logs each group's longest wait for an ack and longest time without one after since,
// and returns the longest over all groups.
func (w *workload) finish(t *testing.T, ctx context.Context, store *storage.Store, since time.Time) waitFigures {
	t.Helper()
	for _, g := range w.groups {
		g.tr.halt() // all at once: finish below waits for one group at a time
	}
	var worst waitFigures
	total := 0
	for _, g := range w.groups {
		sends := g.tr.finish(t)
		f := waitFigures{wait: g.tr.longestWait(since), stall: g.tr.longestStall(since)}
		worst.wait, worst.stall = max(worst.wait, f.wait), max(worst.stall, f.stall)
		total += len(sends)
		want := checkAcks(t, g.conv, sends, len(sends))
		checkStored(t, ctx, store, g.conv, want)
		missed, connections := 0, 0
		for _, m := range g.members {
			for i, feed := range m.connections() {
				connections++
				missed += checkDeliveredOnceInOrder(t, fmt.Sprintf("%s (connection %d)", m.name, i+1), feed.messagesOf(g.conv), want)
			}
		}
		t.Logf("%s (partition %d): %d sends acknowledged, %d retried; after the fault the longest wait for an ack was %s, the longest time without one %s; %d connections, %d pushes not received (gaps to fill from history)",
			g.name, g.partition, len(sends), retries(sends), f.wait.Round(time.Millisecond), f.stall.Round(time.Millisecond), connections, missed)
	}
	t.Logf("all groups: %d sends acknowledged, stored once with gapless seqs; the longest wait for an ack after the fault was %s, the longest time a group had no ack %s",
		total, worst.wait.Round(time.Millisecond), worst.stall.Round(time.Millisecond))
	return worst
}
