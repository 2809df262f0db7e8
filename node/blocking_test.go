package node_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file prove blocking over real WebSockets: a user blocks another with
// block_user, and the pair can no longer open their DM, send in it, or put each other in a group,
// on the node of the block and on another node, until unblock_user.

// blockPartitions keeps node start quick: a node takes its partition leases one by one.
const blockPartitions = 4

// blockNodes starts count nodes on one environment, each with its own node id.
func blockNodes(t *testing.T, count int) []*testenv.Node {
	t.Helper()
	env := testenv.NewEnv(t)
	nodes := make([]*testenv.Node, count)
	for i := range nodes {
		cfg := env.NodeConfig()
		cfg.NodeID = fmt.Sprintf("block-%c", 'a'+i)
		cfg.Sequencer.Partitions = blockPartitions
		nodes[i] = testenv.StartNode(t, cfg)
	}
	return nodes
}

// blockCode returns the error code of a refused request, or "" when it succeeded.
func blockCode(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err != nil {
		return "not a protocol error: " + err.Error()
	}
	return ""
}

// wantRefused fails unless err is a refusal with code.
func wantRefused(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := blockCode(err); got != code {
		t.Fatalf("%s: %v (code %q); want %s", what, err, got, code)
	}
}

// blockRequest makes one request and fails the test on an error.
func blockRequest(t *testing.T, c *client.Conn, f protocol.ClientFrame) protocol.ServerFrame {
	t.Helper()
	r, err := c.Request(ctxT(t, 10*time.Second), f)
	if err != nil {
		t.Fatalf("%s: %v", f.Type, err)
	}
	return r
}

// blockedIDs is the caller's list_blocks reply.
func blockedIDs(t *testing.T, c *client.Conn) []string {
	t.Helper()
	r := blockRequest(t, c, protocol.ClientFrame{Type: protocol.TypeListBlocks})
	if r.Type != protocol.TypeBlocks {
		t.Fatalf("list_blocks answered %q", r.Type)
	}
	return r.UserIDs
}

// dmBodies is the DM's history as c sees it, bodies in seq order.
func dmBodies(t *testing.T, c *client.Conn, convID string) []string {
	t.Helper()
	page := blockRequest(t, c, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: convID})
	var out []string
	for _, m := range page.Messages {
		out = append(out, m.Body)
	}
	return out
}

func TestBlockingOverWebSockets(t *testing.T) {
	n := blockNodes(t, 1)[0]
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, n.URL(), "alice")
	bob := testenv.Connect(t, n.URL(), "bob")
	carol := testenv.Connect(t, n.URL(), "carol")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	shared, err := carol.CreateGroup(ctx, "shared", []string{"alice", "bob"})
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	bobsGroup, err := bob.CreateGroup(ctx, "bob's", []string{"carol"})
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	if _, err := bob.Send(ctx, dm.ID, "before"); err != nil {
		t.Fatalf("send before the block: %v", err)
	}

	block := protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "bob"}
	if r := blockRequest(t, alice, block); r.Type != protocol.TypeOK {
		t.Fatalf("block_user answered %q; want ok", r.Type)
	}
	blockRequest(t, alice, block) // blocking twice is fine
	_, err = alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "alice"})
	wantRefused(t, "block yourself", err, protocol.CodeInvalidField)
	_, err = alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "ghost"})
	wantRefused(t, "block an unknown user", err, protocol.CodeNotFound)
	if got := blockedIDs(t, alice); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("alice's blocks: %v; want [bob]", got)
	}
	if got := blockedIDs(t, bob); len(got) != 0 {
		t.Fatalf("bob's blocks: %v; want none", got)
	}

	_, err = bob.Send(ctx, dm.ID, "blocked send")
	wantRefused(t, "the blocked user sends in the DM", err, protocol.CodeForbidden)
	_, err = alice.Send(ctx, dm.ID, "blocker's send")
	wantRefused(t, "the blocker sends in the DM", err, protocol.CodeForbidden)
	_, err = bob.OpenDM(ctx, "alice")
	wantRefused(t, "the blocked user opens the DM", err, protocol.CodeNotFound)
	_, err = bob.CreateGroup(ctx, "with alice", []string{"carol", "alice"})
	wantRefused(t, "the blocked user creates a group with the blocker", err, protocol.CodeNotFound)
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: bobsGroup.ID, Members: []string{"alice"}})
	wantRefused(t, "the blocked user adds the blocker", err, protocol.CodeNotFound)
	if got := dmBodies(t, alice, dm.ID); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the DM holds %q; want only the message from before the block", got)
	}
	convs := blockRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeListConversations}).Conversations
	if len(convs) != 2 { // the DM and the shared group: no group of bob's reached her
		t.Fatalf("alice is in %d conversations; want 2: %+v", len(convs), convs)
	}
	if _, err := bob.Send(ctx, shared.ID, "groups are not affected"); err != nil {
		t.Fatalf("send in a group both were in: %v", err)
	}

	if r := blockRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeUnblockUser, UserID: "bob"}); r.Type != protocol.TypeOK {
		t.Fatalf("unblock_user answered %q; want ok", r.Type)
	}
	if got := blockedIDs(t, alice); len(got) != 0 {
		t.Fatalf("alice's blocks after unblocking: %v; want none", got)
	}
	if _, err := bob.Send(ctx, dm.ID, "after"); err != nil {
		t.Fatalf("send after unblocking: %v", err)
	}
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.ConversationID == dm.ID && f.Body == "after"
	})
	if _, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: bobsGroup.ID, Members: []string{"alice"}}); err != nil {
		t.Fatalf("add after unblocking: %v", err)
	}
}

// TestBlockingReachesSendsOnAnotherNode: bob's node cached the DM as clear; alice blocks on her
// node, and bob's sends there are refused once the blocks event has crossed the bus (and accepted
// again after the unblock).
func TestBlockingReachesSendsOnAnotherNode(t *testing.T) {
	nodes := blockNodes(t, 2)
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, nodes[0].URL(), "alice")
	bob := testenv.Connect(t, nodes[1].URL(), "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeConversation && f.Conversation != nil && f.Conversation.ID == dm.ID
	})
	if _, err := bob.Send(ctx, dm.ID, "cached as clear"); err != nil {
		t.Fatalf("send before the block: %v", err)
	}

	blockRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "bob"})
	_, err = alice.Send(ctx, dm.ID, "blocker's send")
	wantRefused(t, "the blocker's send on the blocker's node", err, protocol.CodeForbidden)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := bob.Send(ctx, dm.ID, "racing the event")
		if code := blockCode(err); code != protocol.CodeForbidden {
			return fmt.Errorf("bob's send on the other node: %v (code %q); want forbidden", err, code)
		}
		return nil
	})

	blockRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeUnblockUser, UserID: "bob"})
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, err := bob.Send(ctx, dm.ID, "after the unblock"); err != nil {
			return fmt.Errorf("bob's send on the other node after the unblock: %w", err)
		}
		return nil
	})
}
