package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// apiBadge asks n's GET /api/badge for token's user and returns the total.
func apiBadge(t *testing.T, n *testenv.Node, token string) (int64, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, n.URL()+"/api/badge", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var badge struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&badge); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /api/badge: %s, %v", resp.Status, err)
	}
	return badge.Total, nil
}

// connectBadge opens a connection with token and returns it with the total of its connect badge.
func connectBadge(t *testing.T, n *testenv.Node, token string) (*client.Conn, int64) {
	t.Helper()
	c := dialWith(t, n, token, nil)
	f := testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeBadge && f.ConversationID == "" && f.Total != nil
	})
	return c, *f.Total
}

// listedUnread returns what c's conversation list says is unread in convID.
func listedUnread(t *testing.T, c *client.Conn, convID string) int64 {
	t.Helper()
	list, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatalf("list conversations: %v", err)
	}
	for _, conv := range list.Conversations {
		if conv.ID == convID {
			return conv.Unread
		}
	}
	t.Fatalf("the list has no %s: %+v", convID, list.Conversations)
	return 0
}

// connectionsGone waits until n has no open WebSocket session left, each one's end handled (the
// gauge drops after the chat service has let go of the session and written its user's reads).
func connectionsGone(t *testing.T, n *testenv.Node) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if open, _ := scrapeMetrics(t, n); open["chatd_connections_open"] != 0 {
			return fmt.Errorf("node %s still has %v sessions open", n.Addr(), open["chatd_connections_open"])
		}
		return nil
	})
}

// TestUnreadLeavesOutMessagesDeletedForEveryone: alice (on node A) sends bob (on node B) 5
// messages, bob reads 2, alice deletes seq 4 and then seq 1. Bob's unread is exactly 2 (seqs 3
// and 5) each time: in the connect badge of another device (node B heard of the deletion over
// NATS only), in list_conversations, in /api/badge, and after a reconnect to node B once it had
// forgotten the conversation (loaded from the store) and to node A; deleting seq 1, before his
// read position, changes nothing. His next read moves the badge to 1 (seq 4 is gone); alice's own
// messages stay read to her.
func TestUnreadLeavesOutMessagesDeletedForEveryone(t *testing.T) {
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, 2*time.Minute)
	alice := connectReady(t, a, "alice")
	bobToken := login(t, b, "bob")
	bob := dialWith(t, b, bobToken, nil)
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := alice.Send(ctx, dm.ID, fmt.Sprintf("message %d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	testenv.Messages(t, bob, dm.ID, 5, 10*time.Second)
	if err := bob.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	latestBadge(t, bob, dm.ID, 3)

	devices := []*client.Conn{bob}
	for _, seq := range []int64{4, 1} {
		if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: seq}); err != nil {
			t.Fatalf("delete seq %d: %v", seq, err)
		}
		testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeDeleted && f.ConversationID == dm.ID && f.Seq == seq
		})
		// Node B's memory first (a list would mend it from the store), then the list.
		phone, total := connectBadge(t, b, bobToken)
		devices = append(devices, phone)
		if total != 2 {
			t.Errorf("after deleting seq %d bob's new device on node B connects with total %d; want 2 (seqs 3 and 5)", seq, total)
		}
		if got := listedUnread(t, bob, dm.ID); got != 2 {
			t.Errorf("after deleting seq %d bob's list says unread %d; want 2", seq, got)
		}
		if got, err := apiBadge(t, b, bobToken); err != nil || got != 2 {
			t.Errorf("after deleting seq %d GET /api/badge says %d, %v; want 2", seq, got, err)
		}
	}
	if got := listedUnread(t, alice, dm.ID); got != 0 {
		t.Errorf("alice's list says unread %d; her own messages are never unread", got)
	}

	// Every device of bob goes; node B, where alice is not, forgets the DM and writes his read.
	for _, c := range devices {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	connectionsGone(t, b)
	if got, err := apiBadge(t, a, bobToken); err != nil || got != 2 {
		t.Errorf("with bob offline GET /api/badge on node A says %d, %v; want 2", got, err)
	}
	again, total := connectBadge(t, b, bobToken)
	if total != 2 {
		t.Errorf("bob reconnects to node B with total %d; want 2", total)
	}
	if _, total := connectBadge(t, a, bobToken); total != 2 {
		t.Errorf("bob connects to node A with total %d; want 2", total)
	}
	if got := listedUnread(t, again, dm.ID); got != 2 {
		t.Errorf("after the reconnect bob's list says unread %d; want 2", got)
	}
	// His next read: 3 read, 4 deleted, 5 left.
	if err := again.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 3}); err != nil {
		t.Fatal(err)
	}
	f := testenv.Push(t, again, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeBadge && f.ConversationID == dm.ID && f.ReadSeq == 3
	})
	if f.Unread == nil || *f.Unread != 1 || f.Total == nil || *f.Total != 1 || f.LastSeq != 5 {
		t.Errorf("bob's badge after reading 3: %s; want unread 1, total 1, lastSeq 5", badgeString(f))
	}
}

// badgeString describes a badge frame for a failure message.
func badgeString(f protocol.ServerFrame) string {
	val := func(p *int64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("unread %s, total %s, readSeq %d, lastSeq %d", val(f.Unread), val(f.Total), f.ReadSeq, f.LastSeq)
}
