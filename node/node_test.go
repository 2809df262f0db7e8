package node_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dmSetup starts a node on a fresh environment with alice and bob connected and their DM open.
func dmSetup(t *testing.T) (testenv.Env, *testenv.Node, *client.Conn, *client.Conn, protocol.Conversation) {
	t.Helper()
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice := testenv.Connect(t, n.URL(), "alice")
	bob := testenv.Connect(t, n.URL(), "bob")
	dm, err := alice.OpenDM(ctxT(t, 30*time.Second), "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	return env, n, alice, bob, dm
}

// monitoredNode starts a node on a fresh environment whose store commands are recorded; adjust,
// if not nil, changes the configuration first.
func monitoredNode(t *testing.T, adjust func(*node.Config)) (testenv.Env, *testenv.Node, *testenv.CommandRecorder) {
	t.Helper()
	env := testenv.NewEnv(t)
	rec := &testenv.CommandRecorder{}
	cfg := env.NodeConfig()
	cfg.StoreMonitor = rec.Monitor()
	if adjust != nil {
		adjust(&cfg)
	}
	return env, testenv.StartNode(t, cfg), rec
}

// deleteAccount deletes the account of token's user over HTTP.
func deleteAccount(t *testing.T, ctx context.Context, n *testenv.Node, token string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, n.URL()+"/api/account", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("delete account: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete account: %s", resp.Status)
	}
}

func TestDMDeliversInSeqOrder(t *testing.T) {
	_, _, alice, bob, dm := dmSetup(t)
	ctx := ctxT(t, 30*time.Second)
	again, err := bob.OpenDM(ctx, "alice")
	if err != nil || again.ID != dm.ID {
		t.Fatalf("bob's DM with alice = %q, %v; want the same conversation %q", again.ID, err, dm.ID)
	}
	for i := 1; i <= 3; i++ {
		ack, err := alice.Send(ctx, dm.ID, fmt.Sprintf("hello %d", i))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if ack.Seq != int64(i) {
			t.Fatalf("ack %d has seq %d", i, ack.Seq)
		}
	}
	got := testenv.Messages(t, bob, dm.ID, 3, 10*time.Second)
	for i, m := range got {
		if m.Seq != int64(i+1) || m.Body != fmt.Sprintf("hello %d", i+1) || m.SenderID != "alice" {
			t.Fatalf("message %d = seq %d %q from %s", i, m.Seq, m.Body, m.SenderID)
		}
	}
}

func TestRetriedSendIsStoredOnce(t *testing.T) {
	_, _, alice, _, dm := dmSetup(t)
	ctx := ctxT(t, 30*time.Second)
	id := uuid.NewString()
	first, err := alice.SendWithID(ctx, dm.ID, id, "once")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	retry, err := alice.SendWithID(ctx, dm.ID, id, "once")
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if retry.Seq != first.Seq {
		t.Fatalf("retry acked seq %d, first %d", retry.Seq, first.Seq)
	}
	next, err := alice.Send(ctx, dm.ID, "next")
	if err != nil || next.Seq != first.Seq+1 {
		t.Fatalf("next send seq = %d, %v; want %d", next.Seq, err, first.Seq+1)
	}
	page, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: dm.ID})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(page.Messages) != 2 {
		t.Fatalf("history has %d messages, want 2 (the retry stored once)", len(page.Messages))
	}
}

// TestConcurrentSendersGetGaplessSeqs is the core promise: 50 senders x 100 messages into one
// group give exactly seqs 1..5000, in the store and as delivered, in order, to every member.
func TestConcurrentSendersGetGaplessSeqs(t *testing.T) {
	const senders, perSender = 50, 100
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx := ctxT(t, 3*time.Minute)

	conns := make([]*client.Conn, senders)
	names := make([]string, senders)
	for i := range conns {
		names[i] = fmt.Sprintf("user%02d", i)
		conns[i] = testenv.Connect(t, n.URL(), names[i])
	}
	group, err := conns[0].CreateGroup(ctx, "load", names[1:])
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	// Every member learns of the group before anyone sends.
	for _, c := range conns[1:] {
		testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeConversation && f.Conversation.ID == group.ID
		})
	}

	var wg sync.WaitGroup
	acked := make(chan int64, senders*perSender)
	errs := make(chan error, senders)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perSender {
				ack, err := c.Send(ctx, group.ID, fmt.Sprintf("%d/%d", i, j))
				if err != nil {
					errs <- fmt.Errorf("sender %d message %d: %w", i, j, err)
					return
				}
				acked <- ack.Seq
			}
		}()
	}
	// Each member's pushes are read on a goroutine of its own, which reports to this one: only
	// the test's goroutine may fail the test.
	delivered := make([][]protocol.ServerFrame, senders)
	readErrs := make(chan error, senders)
	var readers sync.WaitGroup
	for i, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			msgs, err := testenv.ReadMessages(c, group.ID, senders*perSender, 2*time.Minute)
			if err != nil {
				readErrs <- fmt.Errorf("member %d: %w", i, err)
			}
			delivered[i] = msgs
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(acked)
	assertGapless(t, "acked", collect(acked), senders*perSender)
	readers.Wait()
	close(readErrs)
	for err := range readErrs {
		t.Fatal(err)
	}
	for i, msgs := range delivered {
		for k, m := range msgs {
			if m.Seq != int64(k+1) {
				t.Fatalf("member %d got seq %d at position %d", i, m.Seq, k)
			}
		}
	}
	var stored []int64
	for after := int64(0); ; {
		page, err := conns[0].Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: group.ID, After: &after, Limit: protocol.MaxPageSize})
		if err != nil {
			t.Fatalf("history after %d: %v", after, err)
		}
		for _, m := range page.Messages {
			stored = append(stored, m.Seq)
		}
		if !page.HasAfter {
			break
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
	assertGapless(t, "stored", stored, senders*perSender)
}

func collect(ch <-chan int64) []int64 {
	var out []int64
	for v := range ch {
		out = append(out, v)
	}
	return out
}

func assertGapless(t *testing.T, what string, seqs []int64, n int) {
	t.Helper()
	if len(seqs) != n {
		t.Fatalf("%s: %d seqs, want %d", what, len(seqs), n)
	}
	seen := make(map[int64]bool, n)
	for _, s := range seqs {
		if s < 1 || s > int64(n) || seen[s] {
			t.Fatalf("%s: seq %d out of range or duplicated", what, s)
		}
		seen[s] = true
	}
}
