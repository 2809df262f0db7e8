package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/embedded"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file break a dependency while clients send and check what a user would
// notice: sends fail fast with a retryable error, nothing acknowledged is lost, the seqs stay
// gapless, and service comes back without a restart.

// Short timeouts so an outage shows within a second or two.
const (
	faultSendTimeout    = 2 * time.Second
	faultAttemptTimeout = 500 * time.Millisecond
	faultFlushTimeout   = time.Second
)

func faultConfig(env testenv.Env) node.Config {
	cfg := env.NodeConfig()
	cfg.Sequencer.Partitions = securityPartitions
	cfg.Chat.SendTimeout = faultSendTimeout
	cfg.Sequencer.AttemptTimeout = faultAttemptTimeout
	cfg.Sequencer.FlushTimeout = faultFlushTimeout
	return cfg
}

// sender sends numbered messages one after another, as a client with an outbox does: each is
// retried with its clientMsgId until it is acked, after the wait a rate_limited refusal asks for,
// and only retryable errors are tolerated.
type sender struct {
	name string
	conn *client.Conn
	conv string

	mu       sync.Mutex
	acked    map[string]int64 // clientMsgId -> seq
	refused  []time.Duration  // how long each failed attempt took to fail
	fatalErr error
}

func newSender(name string, conn *client.Conn, conv string) *sender {
	return &sender{name: name, conn: conn, conv: conv, acked: make(map[string]int64)}
}

// run sends until stop is closed, then finishes the message in hand.
func (s *sender) run(ctx context.Context, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		id, body := uuid.NewString(), fmt.Sprintf("%s %d", s.name, i)
		for {
			start := time.Now()
			ack, err := s.conn.SendWithID(ctx, s.conv, id, body)
			var pe *protocol.Error
			switch {
			case err == nil:
				s.mu.Lock()
				s.acked[id] = ack.Seq
				s.mu.Unlock()
			case errors.As(err, &pe) && pe.Code == protocol.CodeUnavailable && pe.Retryable:
				s.mu.Lock()
				s.refused = append(s.refused, time.Since(start))
				s.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
				continue
			case errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited && pe.Retryable:
				// Faster than the node lets one socket send: not a refusal of the outage.
				select {
				case <-ctx.Done():
					return
				case <-time.After(pe.RetryAfter):
				}
				continue
			default:
				s.mu.Lock()
				s.fatalErr = fmt.Errorf("%s: send %q: %w", s.name, body, err)
				s.mu.Unlock()
				return
			}
			break
		}
	}
}

func (s *sender) counts() (acked, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked), len(s.refused)
}

// stopped returns the error that made the sender stop, if one did.
func (s *sender) stopped() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatalErr
}

// checkOutage fails unless every refused attempt failed within the send timeout, plus slack for
// a loaded machine.
func (s *sender) checkOutage(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatalErr != nil {
		t.Fatal(s.fatalErr)
	}
	for _, d := range s.refused {
		if d > faultSendTimeout+time.Second {
			t.Fatalf("%s: a refused send took %s to fail; the send timeout is %s", s.name, d, faultSendTimeout)
		}
	}
}

// storedMessages pages through a conversation's whole history.
func storedMessages(t *testing.T, c *client.Conn, convID string) []protocol.Message {
	t.Helper()
	var out []protocol.Message
	for after := int64(0); ; {
		page := history(t, c, protocol.ClientFrame{ConversationID: convID, After: &after, Limit: protocol.MaxPageSize})
		out = append(out, page.Messages...)
		if !page.HasAfter || len(page.Messages) == 0 {
			return out
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
}

// checkAckedEqualsStored fails unless the stored messages are exactly the acked ones, at the seqs
// they were acked with, numbered 1..n without a gap.
func checkAckedEqualsStored(t *testing.T, c *client.Conn, convID string, senders ...*sender) {
	t.Helper()
	acked := make(map[string]int64)
	for _, s := range senders {
		s.mu.Lock()
		for id, seq := range s.acked {
			acked[id] = seq
		}
		s.mu.Unlock()
	}
	stored := storedMessages(t, c, convID)
	if len(stored) != len(acked) {
		t.Fatalf("%d messages stored, %d acked", len(stored), len(acked))
	}
	for i, m := range stored {
		if m.Seq != int64(i+1) {
			t.Fatalf("stored seq %d at position %d: not gapless", m.Seq, i)
		}
		if seq, ok := acked[m.ClientMsgID]; !ok || seq != m.Seq {
			t.Fatalf("stored %q at seq %d; acked at seq %d (acked: %v)", m.Body, m.Seq, seq, ok)
		}
	}
}

// waitForAcks waits until every sender has more than the given number of acks.
func waitForAcks(t *testing.T, what string, more int, senders ...*sender) {
	t.Helper()
	base := make([]int, len(senders))
	for i, s := range senders {
		base[i], _ = s.counts()
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for i, s := range senders {
			if err := s.stopped(); err != nil {
				return fmt.Errorf("%w: %s: %v", testenv.ErrGiveUp, what, err)
			}
			if a, _ := s.counts(); a < base[i]+more {
				return fmt.Errorf("%s: %s has %d acks, want %d", what, s.name, a, base[i]+more)
			}
		}
		return nil
	})
}

// waitForRefusals waits until every sender has had n sends refused.
func waitForRefusals(t *testing.T, what string, n int, senders ...*sender) {
	t.Helper()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, s := range senders {
			if err := s.stopped(); err != nil {
				return fmt.Errorf("%w: %s: %v", testenv.ErrGiveUp, what, err)
			}
			if _, r := s.counts(); r < n {
				return fmt.Errorf("%s: %s has had %d sends refused, want %d", what, s.name, r, n)
			}
		}
		return nil
	})
}

// runSenders starts alice and bob sending into their DM and returns a function that stops them
// and waits.
func runSenders(ctx context.Context, senders ...*sender) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, done)
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// checkDelivered fails unless c received seqs 1..n of convID live, in order, each once.
func checkDelivered(t *testing.T, c *client.Conn, convID string, n int) {
	t.Helper()
	for i, m := range testenv.Messages(t, c, convID, n, 30*time.Second) {
		if m.Seq != int64(i+1) {
			t.Fatalf("delivered seq %d at position %d of %d", m.Seq, i, n)
		}
	}
}

// TestFaultStoreOutage stops the store while two clients send and starts it again on the same
// data and address.
func TestFaultStoreOutage(t *testing.T) {
	store := testenv.StartRestartableStore(t, t.TempDir())
	env := testenv.Env{NATSURL: testenv.NATS(t), MongoURI: store.URI, Database: "faults"}
	n := testenv.StartNode(t, faultConfig(env))
	ctx := ctxT(t, 2*time.Minute)
	alice := connectReady(t, n, "alice")
	bob := connectReady(t, n, "bob")
	carol := connectReady(t, n, "carol")
	group := openGroup(t, alice, map[string]*client.Conn{"bob": bob, "carol": carol})
	a, b := newSender("alice", alice, group.ID), newSender("bob", bob, group.ID)
	stop := runSenders(ctx, a, b)
	waitForAcks(t, "sends before the outage", 10, a, b)

	store.Stop()
	waitForRefusals(t, "sends to be refused while the store is down", 2, a, b)
	acksDuringOutage, _ := a.counts()
	store.Restart(t)
	waitForAcks(t, "sends after the store is back", 10, a, b)
	stop()

	a.checkOutage(t)
	b.checkOutage(t)
	_, refused := a.counts()
	t.Logf("alice: %d acked when the store came back, %d attempts refused", acksDuringOutage, refused)
	checkAckedEqualsStored(t, carol, group.ID, a, b)
	total, _ := a.counts()
	totalB, _ := b.counts()
	checkDelivered(t, carol, group.ID, total+totalB)
}

// TestFaultNATSConnectionLost cuts the node's NATS connection while a client sends, as a network
// partition does, and restores it: the node reconnects, resubscribes and delivers again.
func TestFaultNATSConnectionLost(t *testing.T) {
	storeCfg := testenv.StoreConfig(t)
	cut := testenv.StartFaultProxy(t, strings.TrimPrefix(testenv.NATS(t), "nats://"))
	env := testenv.Env{NATSURL: "nats://" + cut.Addr(), MongoURI: storeCfg.URI, Database: storeCfg.Database}
	checkNATSOutage(t, env, func() { cut.SetDown(true) }, func() { cut.SetDown(false) })
}

// TestFaultNATSServerRestart stops the NATS server itself and starts it again on the same port
// and store directory.
func TestFaultNATSServerRestart(t *testing.T) {
	natsCfg := embedded.NATSConfig{StoreDir: t.TempDir()}
	var ns *embedded.NATS
	testenv.StartOnPorts(t, 1, func(ports []int) (err error) {
		natsCfg.Port = ports[0] // not port 0: the restart must come back where the node reconnects
		ns, err = embedded.StartNATS(natsCfg)
		return err
	})
	t.Cleanup(func() { ns.Shutdown() })
	storeCfg := testenv.StoreConfig(t)
	env := testenv.Env{NATSURL: ns.ClientURL(), MongoURI: storeCfg.URI, Database: storeCfg.Database}
	checkNATSOutage(t, env, ns.Shutdown, func() {
		restarted, err := embedded.StartNATS(natsCfg)
		if err != nil {
			t.Fatalf("restart nats: %v", err)
		}
		ns = restarted
	})
}

// checkNATSOutage runs a node on env with alice sending to bob, calls down, waits until sends are
// refused, calls up, and checks that sends pass again and every acked message was stored and
// delivered once.
func checkNATSOutage(t *testing.T, env testenv.Env, down, up func()) {
	t.Helper()
	n := testenv.StartNode(t, faultConfig(env))
	ctx := ctxT(t, 2*time.Minute)
	alice, bob, dm := dmOn(t, n)
	a := newSender("alice", alice, dm.ID)
	stop := runSenders(ctx, a)
	waitForAcks(t, "sends before the outage", 10, a)
	down()
	waitForRefusals(t, "sends to be refused while NATS is unreachable", 2, a)
	up()
	waitForAcks(t, "sends after NATS is back", 10, a)
	stop()

	a.checkOutage(t)
	checkAckedEqualsStored(t, bob, dm.ID, a)
	total, _ := a.counts()
	checkDelivered(t, bob, dm.ID, total)
}

// TestFaultGapFilledFromStore simulates an owner that stored a message and died before publishing
// it: a reconnecting client gets it from sync, and a live client that sees the next seq fetches it
// from history.
func TestFaultGapFilledFromStore(t *testing.T) {
	n, env := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice, bob, dm := dmOn(t, n)
	a := newSender("alice", alice, dm.ID)
	stop := runSenders(ctx, a)
	waitForAcks(t, "first sends", 3, a)
	stop()
	before, _ := a.counts()
	testenv.Messages(t, bob, dm.ID, before, 10*time.Second)

	// The message the dead owner stored: in the store, never published.
	lost := storage.Message{ConversationID: dm.ID, Seq: int64(before + 1), SenderID: "alice", Kind: protocol.KindText,
		Body: "stored, never published", CreatedAt: time.Now().UTC().Truncate(time.Millisecond), ClientMsgID: uuid.NewString()}
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	if err := store.InsertMessages(ctx, []storage.Message{lost}); err != nil {
		t.Fatal(err)
	}
	if err := store.AdvanceCounters(ctx, map[string]storage.Counters{dm.ID: {LastSeq: lost.Seq}}); err != nil {
		t.Fatal(err)
	}

	// Alice's next message takes the seq after it (after a retry if the owner had cached the
	// old lastSeq); bob sees seq N+2 right after N and fills N+1 from history.
	a.mu.Lock()
	a.acked[lost.ClientMsgID] = lost.Seq // stored, so it counts as acked below
	a.mu.Unlock()
	stop = runSenders(ctx, a)
	waitForAcks(t, "the send after the lost message", 1, a)
	stop()
	next := testenv.Messages(t, bob, dm.ID, 1, 10*time.Second)[0]
	if next.Seq != lost.Seq+1 {
		t.Fatalf("bob's next live message has seq %d; want %d, after the gap", next.Seq, lost.Seq+1)
	}
	gap := history(t, bob, protocol.ClientFrame{ConversationID: dm.ID, After: ptr(next.Seq - 2), Limit: 1})
	if len(gap.Messages) != 1 || gap.Messages[0].Seq != lost.Seq || gap.Messages[0].Body != lost.Body {
		t.Fatalf("history for the gap: %+v", gap.Messages)
	}

	// A client that reconnects with what it had before the crash gets both from sync.
	again := connectReady(t, n, "bob")
	synced, err := again.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync, Since: map[string]int64{dm.ID: int64(before)}})
	if err != nil {
		t.Fatal(err)
	}
	var replayed []int64
	for _, f := range drainPushes(again) {
		if f.Type == protocol.TypeMessage && f.ConversationID == dm.ID {
			replayed = append(replayed, f.Seq)
		}
	}
	if len(replayed) < 2 || replayed[0] != lost.Seq || replayed[1] != lost.Seq+1 {
		t.Fatalf("sync since %d replayed seqs %v; want %d and %d", before, replayed, lost.Seq, lost.Seq+1)
	}
	if len(synced.Conversations) != 1 || synced.Conversations[0].LastSeq < lost.Seq+1 {
		t.Fatalf("synced conversations: %+v", synced.Conversations)
	}
	checkAckedEqualsStored(t, bob, dm.ID, a)
}
