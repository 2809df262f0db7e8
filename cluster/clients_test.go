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
	mu        sync.Mutex
	messages  map[string][]received
	announced map[string]bool
	done      chan struct{}
}

func newFeed(conn *client.Conn) *feed {
	f := &feed{conn: conn, messages: make(map[string][]received), announced: make(map[string]bool), done: make(chan struct{})}
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
	wsURL string

	mu    sync.Mutex
	feeds []*feed // one per connection, in the order they were opened; the last is current
}

// newMember signs in as name through the load balancer and connects.
func (c *cluster) newMember(ctx context.Context, name string) (*member, error) {
	token, _, err := client.Login(ctx, http.DefaultClient, c.lbURL, name)
	if err != nil {
		return nil, err
	}
	m := &member{name: name, token: token, wsURL: "ws" + strings.TrimPrefix(c.lbURL, "http") + "/ws"}
	if err := m.connect(ctx); err != nil {
		return nil, err
	}
	return m, nil
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

// connect dials until a connection is open or ctx ends.
func (m *member) connect(ctx context.Context) error {
	for {
		conn, err := client.Dial(ctx, m.wsURL, m.token, nil)
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
			_ = f.conn.Close() // it may be broken already
			if err := m.connect(ctx); err != nil {
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

// traffic is members sending into one conversation, each as fast as its acks come back, every
// body naming its sender and its number so loss and duplicates show without side state.
type traffic struct {
	convID    string
	perMember int
	stop      chan struct{}
	wg        sync.WaitGroup

	mu    sync.Mutex
	acked []sentMessage // in the order the acks came
	errs  []error
}

// startTraffic makes every member send perMember messages into convID, or, with perMember 0,
// keep sending until finish. ctx bounds the whole run.
func startTraffic(ctx context.Context, convID string, members []*member, perMember int) *traffic {
	tr := &traffic{convID: convID, perMember: perMember, stop: make(chan struct{})}
	for _, m := range members {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for k := 0; perMember == 0 || k < perMember; k++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				s := sentMessage{sender: m.name, clientMsgID: uuid.NewString(), body: fmt.Sprintf("%s#%d", m.name, k), firstTry: time.Now()}
				ack, attempts, err := m.send(ctx, convID, s.clientMsgID, s.body)
				tr.mu.Lock()
				if err != nil {
					tr.errs = append(tr.errs, err)
					tr.mu.Unlock()
					return
				}
				s.seq, s.acked, s.attempts = ack.Seq, time.Now(), attempts
				tr.acked = append(tr.acked, s)
				tr.mu.Unlock()
			}
		}()
	}
	return tr
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

// finish waits for the senders, after telling endless ones to stop once their current message
// is acknowledged, and returns every acknowledged send; a sender that failed fails the test.
func (tr *traffic) finish(t testing.TB) []sentMessage {
	t.Helper()
	if tr.perMember == 0 {
		close(tr.stop)
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
