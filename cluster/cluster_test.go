package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// failoverBound is how soon after a crash sends must succeed again. A dead node's partition
// leases and heartbeat expire after the lease TTL (sequencer.DefaultLeaseTTL, 5 s) and a survivor
// takes the partition at its next renewal (1 s); the rest is margin for reconnects, retry backoff
// and a busy two-core machine.
const failoverBound = 3 * sequencer.DefaultLeaseTTL

// TestSendsAcrossNodesAreGaplessAndDeliveredOnce is issue 5's first promise: 20,000 sends into
// four groups, from twenty clients that nginx spreads over three nodes, get seqs 1..N per group
// with nothing lost or doubled, in the store and as delivered to every member.
func TestSendsAcrossNodesAreGaplessAndDeliveredOnce(t *testing.T) {
	const groups, perGroup, perMember = 4, 5, 1000
	c := startCluster(t)
	ctx := testContext(t, 150*time.Second)

	var names []string
	for g := range groups {
		for u := range perGroup {
			names = append(names, fmt.Sprintf("g%du%d", g, u))
		}
	}
	members := c.members(ctx, names...)
	convs := make([]string, groups)
	for g := range groups {
		convs[g] = c.createGroup(ctx, fmt.Sprintf("group %d", g), members[g*perGroup:(g+1)*perGroup])
	}
	owner := c.owners(10 * time.Second)
	for g, conv := range convs {
		p := sequencer.PartitionOf(conv, testPartitions)
		t.Logf("group %d is on partition %d, owned by %s", g, p, owner[p].id)
	}

	began := time.Now()
	traffics := make([]*traffic, groups)
	for g := range groups {
		traffics[g] = startTraffic(ctx, convs[g], members[g*perGroup:(g+1)*perGroup], perMember)
	}
	sends := make([][]sentMessage, groups)
	total, retried := 0, 0
	for g, tr := range traffics {
		sends[g] = tr.finish(t)
		total += len(sends[g])
		retried += retries(sends[g])
	}
	elapsed := time.Since(began)
	t.Logf("%d sends acknowledged in %s (%.0f/s), %d of them retried", total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), retried)

	store := c.openStore()
	want := make([]map[int64]sentMessage, groups)
	for g, conv := range convs {
		want[g] = checkAcks(t, conv, sends[g], perGroup*perMember)
		checkStored(t, ctx, store, conv, want[g])
	}

	testenv.CheckFor(t, time.Minute, pollInterval, func() error {
		for i, m := range members {
			conv := convs[i/perGroup]
			if got := m.current().count(conv); got < perGroup*perMember {
				return fmt.Errorf("%s has %d of the %d messages of its group", m.name, got, perGroup*perMember)
			}
		}
		return nil
	})
	t.Logf("every member had every message %s after the first send", time.Since(began).Round(time.Millisecond))
	for i, m := range members {
		feeds := m.connections()
		if len(feeds) != 1 {
			t.Errorf("%s needed %d connections; none should have broken", m.name, len(feeds))
		}
		g := i / perGroup
		checkDeliveredExactly(t, m.name, feeds[len(feeds)-1].messagesOf(convs[g]), want[g])
	}

	// Spread: nginx logs each WebSocket session with the node that served it when it ends.
	for _, m := range members {
		m.close()
	}
	var sessions map[string]int
	testenv.CheckFor(t, 10*time.Second, pollInterval, func() error {
		var err error
		if sessions, err = c.wsSessions(); err != nil {
			return err
		}
		n := 0
		for _, k := range sessions {
			n += k
		}
		if n < len(members) {
			return fmt.Errorf("nginx logged %d of %d WebSocket sessions", n, len(members))
		}
		return nil
	})
	t.Logf("WebSocket sessions by node: %v", sessions)
	for _, n := range c.nodes {
		if sessions[n.id] == 0 {
			t.Errorf("nginx sent no WebSocket to %s: %v", n.id, sessions)
		}
	}
}

// TestOwnerCrashLosesNoAcknowledgedSend SIGKILLs the node that owns a busy group's partition in
// the middle of the stream. Within failoverBound another node owns it and sends succeed again;
// clients of the dead node reconnect through nginx and resend with the same clientMsgId. Every
// acknowledged message is stored once, with gapless seqs.
func TestOwnerCrashLosesNoAcknowledgedSend(t *testing.T) {
	c := startCluster(t)
	runCrash(t, c, func(owner *chatNode) string {
		owner.Kill()
		return "SIGKILLed " + owner.id + ", the owner"
	})
}

// TestOwnerStopHandsOver stops the owner of a busy group's partition gracefully (SIGTERM), as a
// rolling restart does: it closes its sessions with going-away, answers what it queued and
// deletes its leases, so another node owns the partition and sends succeed again well before
// the lease TTL would have run out, with nothing lost or doubled.
func TestOwnerStopHandsOver(t *testing.T) {
	c := startCluster(t)
	stall := runCrash(t, c, func(owner *chatNode) string {
		_ = owner.Stop() // the handover is the point, not how the process exits
		return "stopped " + owner.id + " (SIGTERM), the owner"
	})
	if stall >= sequencer.DefaultLeaseTTL {
		t.Errorf("no send was acknowledged for %s after a graceful stop; a handover should not wait for the lease TTL (%s)", stall, sequencer.DefaultLeaseTTL)
	}
}

// TestNATSServerLossIsSurvived SIGKILLs one NATS server of three while a group is busy: the one
// the owner of the group's partition is connected to, so the owner moves to another server; or
// the leader of the partition lease bucket, so the bucket elects a new leader while every node
// is renewing. Either way the nodes carry on over the other two servers, sends succeed again
// within failoverBound, and nothing acknowledged is lost or doubled.
func TestNATSServerLossIsSurvived(t *testing.T) {
	for _, victim := range []struct {
		name string
		find func(c *cluster, owner *chatNode) (*natsServer, error)
	}{
		{"server of the owner", (*cluster).natsServerOf},
		{"leader of the lease bucket", func(c *cluster, _ *chatNode) (*natsServer, error) { return c.streamLeader(leaseStream) }},
	} {
		t.Run(victim.name, func(t *testing.T) {
			c := startCluster(t)
			runCrash(t, c, func(owner *chatNode) string {
				s, err := victim.find(c, owner)
				if err != nil {
					t.Fatalf("find the %s: %v", victim.name, err)
				}
				s.Kill()
				return fmt.Sprintf("SIGKILLed %s, the %s (owner %s)", s.Name, victim.name, owner.id)
			})
			for _, n := range c.nodes {
				testenv.CheckFor(t, failoverBound, pollInterval, n.ready) // on a live NATS server
			}
		})
	}
}

// runCrash streams sends from six members into one group, calls crash with the owner of the
// group's partition once 1,000 are acknowledged, and checks that sends succeed again within
// failoverBound (and returns the longest time without an ack after the crash), that every partition gets an owner among the live nodes, and, after another
// 1,000 acks, that everything acknowledged is stored once with gapless seqs and was delivered
// to each connection at most once and in order.
func runCrash(t *testing.T, c *cluster, crash func(owner *chatNode) string) (stall time.Duration) {
	t.Helper()
	const before, after = 1000, 1000
	ctx := testContext(t, 150*time.Second)
	members := c.members(ctx, "alice", "bob", "carol", "dave", "erin", "frank")
	conv := c.createGroup(ctx, "busy", members)
	p := sequencer.PartitionOf(conv, testPartitions)
	owner := c.owners(10 * time.Second)[p]

	tr := startTraffic(ctx, conv, members, 0)
	tr.waitAcked(t, before, time.Minute)
	acked, _ := tr.progress()
	crashed := time.Now()
	what := crash(owner)
	t.Logf("%s of partition %d, after %d acks", what, p, acked)

	testenv.CheckFor(t, failoverBound, pollInterval, func() error {
		if _, ok := tr.firstAckStartedAfter(crashed); !ok {
			return errors.New("no send begun after the crash acknowledged")
		}
		return nil
	})
	t.Logf("partition %d now owned by %s", p, c.owners(failoverBound)[p].id)

	tr.waitAcked(t, acked+after, time.Minute)
	stall = tr.longestStall(crashed)
	sends := tr.finish(t)
	t.Logf("%d sends acknowledged, %d of them retried; the longest time without an ack after the crash was %s",
		len(sends), retries(sends), stall.Round(time.Millisecond))
	if stall > failoverBound {
		t.Errorf("no send was acknowledged for %s after the crash; the bound is %s", stall, failoverBound)
	}

	want := checkAcks(t, conv, sends, len(sends))
	checkStored(t, ctx, c.openStore(), conv, want)
	missed := 0
	for _, m := range members {
		for i, f := range m.connections() {
			missed += checkDeliveredOnceInOrder(t, fmt.Sprintf("%s (connection %d)", m.name, i+1), f.messagesOf(conv), want)
		}
	}
	// A message stored by the dead owner but not yet published is acked to its sender's retry
	// from the store and never pushed: connections see a gap there and fill it from history.
	t.Logf("pushes not received on connections (gaps to fill from history): %d", missed)
	return stall
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createGroup creates a group of members (the first creates it) and waits until every member's
// connection has been told of it, so nobody sends before their node knows they may.
func (c *cluster) createGroup(ctx context.Context, name string, members []*member) string {
	c.t.Helper()
	var others []string
	for _, m := range members[1:] {
		others = append(others, m.name)
	}
	conv, err := members[0].current().conn.CreateGroup(ctx, name, others)
	if err != nil {
		c.t.Fatalf("create group %s: %v", name, err)
	}
	testenv.CheckFor(c.t, 10*time.Second, pollInterval, func() error {
		for _, m := range members[1:] {
			if !m.current().knows(conv.ID) {
				return fmt.Errorf("%s not told of group %s", m.name, name)
			}
		}
		return nil
	})
	return conv.ID
}

// createGroupWhere creates groups of members until one lands on a partition that want accepts,
// and returns that one; the others stay, empty.
func (c *cluster) createGroupWhere(ctx context.Context, name string, members []*member, want func(partition int) bool) string {
	c.t.Helper()
	const attempts = 60 // each lands where wanted with a chance of 1/8 or better
	for i := 1; i <= attempts; i++ {
		conv := c.createGroup(ctx, fmt.Sprintf("%s try %d", name, i), members)
		if want(sequencer.PartitionOf(conv, testPartitions)) {
			return conv
		}
	}
	c.t.Fatalf("%s: no group of %d landed on a wanted partition", name, attempts)
	return ""
}

// checkAcks checks that the acks of one conversation carry seqs 1..n, each once, and returns the
// sends by seq.
func checkAcks(t *testing.T, conv string, sends []sentMessage, n int) map[int64]sentMessage {
	t.Helper()
	if len(sends) != n {
		t.Fatalf("conversation %s: %d sends acknowledged, want %d", conv, len(sends), n)
	}
	bySeq := make(map[int64]sentMessage, n)
	for _, s := range sends {
		if s.seq < 1 || s.seq > int64(n) {
			t.Fatalf("conversation %s: %q acknowledged with seq %d, outside 1..%d", conv, s.body, s.seq, n)
		}
		if other, dup := bySeq[s.seq]; dup {
			t.Fatalf("conversation %s: seq %d acknowledged to both %q and %q", conv, s.seq, other.body, s.body)
		}
		bySeq[s.seq] = s
	}
	return bySeq
}

// checkStored checks that the store holds exactly the acknowledged messages of a conversation,
// each under the seq its sender was told.
func checkStored(t *testing.T, ctx context.Context, store *storage.Store, conv string, want map[int64]sentMessage) {
	t.Helper()
	n := int64(len(want))
	msgs, err := store.MessageRange(ctx, conv, 1, n+100) // the 100 beyond n must not exist
	if err != nil {
		t.Fatalf("read stored messages: %v", err)
	}
	if int64(len(msgs)) != n {
		t.Fatalf("conversation %s: %d messages stored, want %d", conv, len(msgs), n)
	}
	for i, m := range msgs {
		w := want[int64(i+1)]
		if m.Seq != int64(i+1) || m.ClientMsgID != w.clientMsgID || m.Body != w.body {
			t.Fatalf("conversation %s: stored #%d is seq %d %q (%s), want seq %d %q (%s)", conv, i+1, m.Seq, m.Body, m.ClientMsgID, i+1, w.body, w.clientMsgID)
		}
	}
}

// checkDeliveredExactly checks that a connection received every message of a conversation
// once, in seq order, each as acknowledged to its sender.
func checkDeliveredExactly(t *testing.T, who string, got []received, want map[int64]sentMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s received %d messages, want %d", who, len(got), len(want))
	}
	for i, r := range got[:min(len(got), len(want))] {
		if w := want[int64(i+1)]; r.seq != int64(i+1) || r.body != w.body || r.clientMsgID != w.clientMsgID {
			t.Errorf("%s: message #%d is seq %d %q, want seq %d %q", who, i+1, r.seq, r.body, i+1, w.body)
			return
		}
	}
}

// checkDeliveredOnceInOrder checks that a connection received no message twice, in increasing
// seq order, each as acknowledged to its sender, and returns how many seqs it skipped between
// the first and the last it received.
func checkDeliveredOnceInOrder(t *testing.T, who string, got []received, want map[int64]sentMessage) int {
	t.Helper()
	for i, r := range got {
		if w, ok := want[r.seq]; !ok || r.body != w.body || r.clientMsgID != w.clientMsgID {
			t.Errorf("%s received seq %d %q, which was acknowledged as %q", who, r.seq, r.body, w.body)
			return 0
		}
		if i > 0 && r.seq <= got[i-1].seq {
			t.Errorf("%s received seq %d after seq %d", who, r.seq, got[i-1].seq)
			return 0
		}
	}
	if len(got) == 0 {
		return 0
	}
	return int(got[len(got)-1].seq-got[0].seq) + 1 - len(got)
}
