package node_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file prove the controls listed in docs/SECURITY.md: each starts a node,
// attempts what the control forbids over the real HTTP and WebSocket surface, and checks the
// refusal a client would see and that nothing leaked or was stored.

// securityPartitions keeps the nodes of these tests quick to start: a node takes its partition
// leases one by one, and these tests need no spread.
const securityPartitions = 4

// startSecurityNode starts a node on a fresh environment, with tune applied to its configuration.
func startSecurityNode(t *testing.T, tune func(*node.Config)) (*testenv.Node, testenv.Env) {
	t.Helper()
	env := testenv.NewEnv(t)
	cfg := env.NodeConfig()
	cfg.Sequencer.Partitions = securityPartitions
	if tune != nil {
		tune(&cfg)
	}
	return testenv.StartNode(t, cfg), env
}

// login signs in by name in dev mode and returns the token.
func login(t *testing.T, n *testenv.Node, name string) string {
	t.Helper()
	token, _, err := client.Login(ctxT(t, 10*time.Second), http.DefaultClient, n.URL(), name)
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	return token
}

// dialWith opens a connection with token and waits for its hello, so the session is registered.
func dialWith(t *testing.T, n *testenv.Node, token string, opts *client.Options) *client.Conn {
	t.Helper()
	c, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeHello })
	return c
}

// connectReady is testenv.Connect that also waits for the hello.
func connectReady(t *testing.T, n *testenv.Node, name string) *client.Conn {
	t.Helper()
	return dialWith(t, n, login(t, n, name), nil)
}

// wantCode fails unless err is a protocol error with code.
func wantCode(t *testing.T, what string, err error, code string) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("%s: %v; want error code %s", what, err, code)
	}
	return pe
}

// dialStatus returns the HTTP status a refused dial got, or fails if the dial was not refused.
func dialStatus(t *testing.T, n *testenv.Node, token string, opts *client.Options) int {
	t.Helper()
	c, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, opts)
	if err == nil {
		_ = c.Close()
		t.Fatal("dial succeeded; want it refused")
	}
	var de *client.DialError
	if !errors.As(err, &de) {
		t.Fatalf("dial failed without an HTTP status: %v", err)
	}
	return de.Status
}

// apiStatus calls an authenticated HTTP endpoint with token (none if empty) and a JSON body (none
// if empty), and returns the status.
func apiStatus(t *testing.T, method, u, token, body string) int {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// drainPushes returns the pushes c has received so far. Call it after a request round trip: the
// client reads frames in order, so every push the server queued before the reply is in by then.
func drainPushes(c *client.Conn) []protocol.ServerFrame {
	var out []protocol.ServerFrame
	for {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				return out
			}
			out = append(out, f)
		default:
			return out
		}
	}
}

// roundTrip makes one request, so that pushes queued before it have arrived.
func roundTrip(t *testing.T, c *client.Conn) {
	t.Helper()
	if _, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeListConversations}); err != nil {
		t.Fatalf("round trip: %v", err)
	}
}

// dmOn connects alice and bob to n, each with their hello received, and opens their DM.
func dmOn(t *testing.T, n *testenv.Node) (alice, bob *client.Conn, dm protocol.Conversation) {
	t.Helper()
	alice, bob = connectReady(t, n, "alice"), connectReady(t, n, "bob")
	dm, err := alice.OpenDM(ctxT(t, 10*time.Second), "bob")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	return alice, bob, dm
}

// openGroup has creator create a group with the named members and waits until each member's
// connection has heard of it, so that what follows reaches them live.
func openGroup(t *testing.T, creator *client.Conn, members map[string]*client.Conn) protocol.Conversation {
	t.Helper()
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	group, err := creator.CreateGroup(ctxT(t, 10*time.Second), "group", names)
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	for _, c := range members {
		testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeConversation && f.Conversation.ID == group.ID
		})
	}
	return group
}

// checkOutsiderHearsNothing has sender write to convID and waits until witness has the message;
// by then outsider, whose earlier pushes the caller has drained, would have something of the
// conversation too if it still heard it.
func checkOutsiderHearsNothing(t *testing.T, convID string, sender, witness, outsider *client.Conn) {
	t.Helper()
	ack, err := sender.Send(ctxT(t, 10*time.Second), convID, "not for outsiders")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	testenv.Push(t, witness, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.ConversationID == convID && f.Seq == ack.Seq
	})
	roundTrip(t, outsider)
	for _, f := range drainPushes(outsider) {
		if f.ConversationID == convID || (f.Conversation != nil && f.Conversation.ID == convID) {
			t.Fatalf("an outsider got %s (seq %d %q) of conversation %s", f.Type, f.Seq, f.Body, convID)
		}
	}
}

// storedBodies returns the bodies of a conversation's stored messages as c sees them in history.
func storedBodies(t *testing.T, c *client.Conn, convID string) []string {
	t.Helper()
	page := history(t, c, protocol.ClientFrame{ConversationID: convID, Limit: protocol.MaxPageSize})
	out := make([]string, len(page.Messages))
	for i, m := range page.Messages {
		out[i] = m.Body
	}
	return out
}

func TestSecurityRefusesBadTokens(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	good := login(t, n, "alice")
	other := []byte("not-the-server-secret-not-the-server-secret")
	forged, _ := auth.Sign(other, "alice", time.Now().Add(time.Hour))
	expired, _ := auth.Sign(testenv.TestSecret, "alice", time.Now().Add(-time.Minute))
	for _, tc := range []struct{ name, token string }{
		{"forged with another secret", forged},
		{"expired", expired},
		{"malformed", "not.a.token"},
		{"truncated signature", good[:len(good)-4]},
		{"missing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dialStatus(t, n, tc.token, nil); got != http.StatusUnauthorized {
				t.Errorf("dial /ws: HTTP %d; want 401", got)
			}
			if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge", tc.token, ""); got != http.StatusUnauthorized {
				t.Errorf("GET /api/badge: HTTP %d; want 401", got)
			}
			if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge?token="+url.QueryEscape(tc.token), "", ""); got != http.StatusUnauthorized {
				t.Errorf("GET /api/badge?token=: HTTP %d; want 401", got)
			}
			if got := apiStatus(t, http.MethodDelete, n.URL()+"/api/account", tc.token, ""); got != http.StatusUnauthorized {
				t.Errorf("DELETE /api/account: HTTP %d; want 401", got)
			}
			if got := apiStatus(t, http.MethodPost, n.URL()+"/api/read", tc.token, `{"conversationId":"c1","seq":1}`); got != http.StatusUnauthorized {
				t.Errorf("POST /api/read: HTTP %d; want 401", got)
			}
		})
	}
	// The refused deletions deleted nothing: alice's real token still opens a socket.
	alice := dialWith(t, n, good, nil)
	roundTrip(t, alice)
	if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge", good, ""); got != http.StatusOK {
		t.Fatalf("badge with the real token: HTTP %d", got)
	}
}

func TestSecurityProductionModeTrustsOnlyTheIdentityProvider(t *testing.T) {
	secret := []byte("production-secret-production-secret-0123")
	n, _ := startSecurityNode(t, func(c *node.Config) {
		c.DevMode = false
		c.JWTSecret = secret
	})
	resp, err := http.Post(n.URL()+"/api/login", "application/json", strings.NewReader(`{"name":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /api/login in production: HTTP %d; want 404", resp.StatusCode)
	}
	devToken, _ := auth.Sign(testenv.TestSecret, "alice", time.Now().Add(time.Hour))
	if got := dialStatus(t, n, devToken, nil); got != http.StatusUnauthorized {
		t.Fatalf("token signed with another secret: HTTP %d; want 401", got)
	}
	token, err := auth.Sign(secret, "alice", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, nil)
	if err != nil {
		t.Fatalf("dial with the identity provider's token: %v", err)
	}
	defer c.Close()
	hello := testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeHello })
	if hello.UserID != "alice" {
		t.Fatalf("hello for %q; want alice", hello.UserID)
	}
	if got := apiStatus(t, http.MethodGet, n.URL()+"/api/badge", token, ""); got != http.StatusOK {
		t.Fatalf("badge: HTTP %d", got)
	}
}

// TestSecurityNonMemberIsRefused has mallory try every conversation frame on a DM and a group she
// is not in: each is refused with not_member, and nothing of hers reaches the members or theirs her.
func TestSecurityNonMemberIsRefused(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, n, "alice")
	bob := connectReady(t, n, "bob")
	malloryToken := login(t, n, "mallory")
	mallory := dialWith(t, n, malloryToken, nil)
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	group, err := alice.CreateGroup(ctx, "private", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	for _, conv := range []string{dm.ID, group.ID} {
		if _, err := alice.Send(ctx, conv, "secret"); err != nil {
			t.Fatal(err)
		}
	}
	drainPushes(bob)

	for _, conv := range []string{dm.ID, group.ID} {
		for _, f := range []protocol.ClientFrame{
			{Type: protocol.TypeSend, ConversationID: conv, ClientMsgID: uuid.NewString(), Body: "let me in"},
			{Type: protocol.TypeHistory, ConversationID: conv},
			{Type: protocol.TypeRead, ConversationID: conv, Seq: 1},
			{Type: protocol.TypeDelivered, ConversationID: conv, Seq: 1},
			{Type: protocol.TypeReceipts, ConversationID: conv, Seq: 1},
			{Type: protocol.TypeReactions, ConversationID: conv, Seq: 1},
			{Type: protocol.TypeTyping, ConversationID: conv},
			{Type: protocol.TypeFocus, ConversationID: conv},
			{Type: protocol.TypeDeleteMessage, ConversationID: conv, Seq: 1},
			{Type: protocol.TypeEditMessage, ConversationID: conv, Seq: 1, Body: "mine now"},
			{Type: protocol.TypeReact, ConversationID: conv, Seq: 1, Emoji: "😈"},
			{Type: protocol.TypeHideConversation, ConversationID: conv},
			{Type: protocol.TypeAddMembers, ConversationID: conv, Members: []string{"mallory"}},
			{Type: protocol.TypeRemoveMember, ConversationID: conv, UserID: "bob"},
			{Type: protocol.TypeLeave, ConversationID: conv},
		} {
			_, err := mallory.Request(ctx, f)
			wantCode(t, fmt.Sprintf("mallory's %s in %s", f.Type, conv), err, protocol.CodeNotMember)
		}
		read := fmt.Sprintf(`{"conversationId":%q,"seq":1}`, conv)
		if got := apiStatus(t, http.MethodPost, n.URL()+"/api/read", malloryToken, read); got != http.StatusForbidden {
			t.Fatalf("mallory's POST /api/read in %s: HTTP %d; want 403", conv, got)
		}
	}
	synced, err := mallory.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync, Since: map[string]int64{dm.ID: 0, group.ID: 0},
		Versions: map[string]int64{dm.ID: 0, group.ID: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(synced.Conversations) != 0 {
		t.Fatalf("mallory's sync lists %d conversations", len(synced.Conversations))
	}

	// Live traffic after the attempts: alice types and writes. Bob sees alice's typing first
	// (one connection publishes both, in order), so nothing of mallory's reached him before it.
	if err := alice.Post(ctx, protocol.ClientFrame{Type: protocol.TypeTyping, ConversationID: group.ID}); err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
		if f.UserID == "mallory" {
			t.Fatalf("bob got mallory's %s", f.Type)
		}
		return f.Type == protocol.TypeTyping && f.UserID == "alice"
	})
	for _, conv := range []string{dm.ID, group.ID} {
		checkOutsiderHearsNothing(t, conv, alice, bob, mallory)
	}
	for _, conv := range []string{dm.ID, group.ID} {
		if got := storedBodies(t, bob, conv); strings.Join(got, ",") != "secret,not for outsiders" {
			t.Fatalf("stored in %s: %q", conv, got)
		}
	}
	list, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Conversations {
		if strings.Contains(strings.Join(c.Members, ","), "mallory") {
			t.Fatalf("mallory became a member of %s", c.ID)
		}
	}
}

// TestSecurityIdentityComesFromTheSession sends frames that name another user: the server ignores
// the names and acts as the session's user.
func TestSecurityIdentityComesFromTheSession(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, n, "alice")
	bob := connectReady(t, n, "bob")
	// Carol owns the group: its admins may delete any member's message, and bob is not one.
	carol := connectReady(t, n, "carol")
	group := openGroup(t, carol, map[string]*client.Conn{"alice": alice, "bob": bob})
	forged := fmt.Sprintf(`{"type":"send","id":"forge1","conversationId":%q,"clientMsgId":%q,"body":"from bob, honest",`+
		`"senderId":"bob","userId":"bob","SenderID":"bob"}`, group.ID, uuid.NewString())
	if err := alice.WriteRaw(ctx, []byte(forged)); err != nil {
		t.Fatal(err)
	}
	ack := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool { return f.ID == "forge1" })
	if ack.Type != protocol.TypeAck {
		t.Fatalf("forged send answered with %+v", ack)
	}
	got := testenv.Messages(t, bob, group.ID, 1, 10*time.Second)[0]
	if got.SenderID != "alice" {
		t.Fatalf("message delivered as sent by %q; want alice", got.SenderID)
	}
	if page := history(t, bob, protocol.ClientFrame{ConversationID: group.ID}); page.Messages[0].SenderID != "alice" {
		t.Fatalf("message stored as sent by %q", page.Messages[0].SenderID)
	}
	// Bob cannot delete alice's message by claiming to be her.
	del := fmt.Sprintf(`{"type":"delete_message","id":"forge2","conversationId":%q,"seq":%d,"senderId":"alice","userId":"alice"}`, group.ID, ack.Seq)
	if err := bob.WriteRaw(ctx, []byte(del)); err != nil {
		t.Fatal(err)
	}
	if f := testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool { return f.ID == "forge2" }); f.Code != protocol.CodeForbidden {
		t.Fatalf("bob deleting alice's message as alice: %+v; want forbidden", f)
	}
	// A leave naming bob makes alice leave, not bob.
	leave := fmt.Sprintf(`{"type":"leave","id":"forge3","conversationId":%q,"userId":"bob"}`, group.ID)
	if err := alice.WriteRaw(ctx, []byte(leave)); err != nil {
		t.Fatal(err)
	}
	if f := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool { return f.ID == "forge3" }); f.Type != protocol.TypeOK {
		t.Fatalf("leave: %+v", f)
	}
	if _, err := bob.Send(ctx, group.ID, "bob is still here"); err != nil {
		t.Fatalf("bob after alice's leave naming him: %v", err)
	}
	_, err := alice.Send(ctx, group.ID, "alice left")
	wantCode(t, "alice after leaving", err, protocol.CodeNotMember)
}

// TestSecurityMembershipChangesApplyAtOnce checks that removal, leaving and adding bind live
// sessions without a reconnect, and that only the creator removes others.
func TestSecurityMembershipChangesApplyAtOnce(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	carol := connectReady(t, n, "carol")
	alice := connectReady(t, n, "alice")
	bob := connectReady(t, n, "bob")
	dave := connectReady(t, n, "dave")
	group := openGroup(t, carol, map[string]*client.Conn{"alice": alice, "bob": bob})
	first, err := alice.Send(ctx, group.ID, "before")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Messages(t, bob, group.ID, 1, 10*time.Second)

	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: group.ID, UserID: "alice"})
	wantCode(t, "bob removing alice", err, protocol.CodeForbidden)
	if _, err := alice.Send(ctx, group.ID, "still in"); err != nil {
		t.Fatalf("alice after bob's refused removal: %v", err)
	}

	// Removal: bob's very next frames are refused and his socket hears nothing more.
	if _, err := carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: group.ID, UserID: "bob"}); err != nil {
		t.Fatalf("carol removing bob: %v", err)
	}
	_, err = bob.Send(ctx, group.ID, "am I still here?")
	wantCode(t, "bob's send after removal", err, protocol.CodeNotMember)
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: group.ID})
	wantCode(t, "bob's history after removal", err, protocol.CodeNotMember)
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: group.ID, Seq: first.Seq})
	wantCode(t, "bob's read after removal", err, protocol.CodeNotMember)
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: group.ID, Members: []string{"bob"}})
	wantCode(t, "bob adding himself back", err, protocol.CodeNotMember)
	testenv.Push(t, bob, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeRemoved && f.ConversationID == group.ID
	})
	drainPushes(bob)
	checkOutsiderHearsNothing(t, group.ID, carol, alice, bob)

	// Leaving: the same, for the user's own choice.
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: group.ID}); err != nil {
		t.Fatalf("alice leaving: %v", err)
	}
	_, err = alice.Send(ctx, group.ID, "one more")
	wantCode(t, "alice's send after leaving", err, protocol.CodeNotMember)
	_, err = alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: group.ID, UserID: "carol"})
	wantCode(t, "alice removing carol after leaving", err, protocol.CodeNotMember)
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeRemoved && f.ConversationID == group.ID
	})
	drainPushes(alice)

	// Adding: dave's live socket learns of the group and gets what follows.
	if _, err := carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: group.ID, Members: []string{"dave"}}); err != nil {
		t.Fatalf("carol adding dave: %v", err)
	}
	testenv.Push(t, dave, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeConversation && f.Conversation.ID == group.ID
	})
	welcome, err := carol.Send(ctx, group.ID, "welcome dave")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, dave, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.ConversationID == group.ID && f.Seq == welcome.Seq && f.Body == "welcome dave"
	})
	if _, err := dave.Send(ctx, group.ID, "thanks"); err != nil {
		t.Fatalf("dave's send after being added: %v", err)
	}
	checkOutsiderHearsNothing(t, group.ID, carol, dave, alice)
}

// TestSecurityRemovalReachesAnotherNodeAfterANATSBlip removes bob while his node cannot hear
// NATS for a moment, so the bus event of the removal never reaches that node: once it hears again,
// it must find the removal in the store (the membership reconcile after a reconnect), tell bob's
// socket there and stop delivering the group to it. Dave, a member on bob's node, is the witness
// that the node delivers the group's messages again.
func TestSecurityRemovalReachesAnotherNodeAfterANATSBlip(t *testing.T) {
	storeCfg := testenv.StoreConfig(t)
	natsURL := testenv.NATS(t)
	cut := testenv.StartFaultProxy(t, strings.TrimPrefix(natsURL, "nats://"))
	cfg1 := faultConfig(testenv.Env{NATSURL: natsURL, MongoURI: storeCfg.URI, Database: storeCfg.Database})
	cfg1.NodeID = "n1"
	cfg2 := faultConfig(testenv.Env{NATSURL: "nats://" + cut.Addr(), MongoURI: storeCfg.URI, Database: storeCfg.Database})
	cfg2.NodeID = "n2"
	n1, n2 := testenv.StartNode(t, cfg1), testenv.StartNode(t, cfg2)
	ctx := ctxT(t, time.Minute)
	carol := connectReady(t, n1, "carol")
	bob := connectReady(t, n2, "bob")
	dave := connectReady(t, n2, "dave")
	group := openGroup(t, carol, map[string]*client.Conn{"bob": bob, "dave": dave})
	before, err := carol.Send(ctx, group.ID, "before the blip")
	if err != nil {
		t.Fatal(err)
	}
	isGroupMessage := func(seq int64) func(protocol.ServerFrame) bool {
		return func(f protocol.ServerFrame) bool {
			return f.Type == protocol.TypeMessage && f.ConversationID == group.ID && f.Seq == seq
		}
	}
	for _, c := range []*client.Conn{bob, dave} {
		testenv.Push(t, c, 10*time.Second, isGroupMessage(before.Seq))
	}
	roundTrip(t, bob)
	drainPushes(bob)

	cut.SetDown(true)
	// The announcement may time out if n2 owns the partition; the removal is stored either way.
	_, _ = carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: group.ID, UserID: "bob"})
	cut.SetDown(false)

	// Only n2 can tell bob's socket, and only from the store: the event was published while n2
	// could not hear it. A removed push that never comes means n2 still routes the group to him.
	if _, err := testenv.ReadPush(bob, 20*time.Second, func(f protocol.ServerFrame) bool {
		if f.Type == protocol.TypeMessage && f.ConversationID == group.ID {
			t.Errorf("bob's socket on n2 got message seq %d %q of the group before being told of his removal", f.Seq, f.Body)
		}
		return f.Type == protocol.TypeRemoved && f.ConversationID == group.ID
	}); err != nil {
		t.Fatalf("bob's socket on the node that missed the removal: %v", err)
	}
	_, err = bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: group.ID})
	wantCode(t, "bob's history after his removal", err, protocol.CodeNotMember)
	drainPushes(bob)
	checkOutsiderHearsNothing(t, group.ID, carol, dave, bob)
}

func TestSecurityOriginCheck(t *testing.T) {
	n, _ := startSecurityNode(t, func(c *node.Config) { c.AllowedOrigins = []string{"app.example.com"} })
	token := login(t, n, "alice")
	for _, origin := range []string{"http://evil.example", "null", "https://app.example.com.evil.example", "http://127.0.0.2"} {
		if got := dialStatus(t, n, token, &client.Options{Origin: origin}); got != http.StatusForbidden {
			t.Errorf("Origin %s: HTTP %d; want 403", origin, got)
		}
	}
	for _, origin := range []string{"", "http://" + n.Addr(), "https://app.example.com"} {
		c := dialWith(t, n, token, &client.Options{Origin: origin})
		roundTrip(t, c)
		_ = c.Close()
	}
}

// TestSecurityOversizeFrameClosesTheConnection writes a frame past the read limit: the socket is
// closed with 1009 and nothing is stored.
func TestSecurityOversizeFrameClosesTheConnection(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice, bob, dm := dmOn(t, n)
	frame := fmt.Sprintf(`{"type":"send","id":"big","conversationId":%q,"clientMsgId":%q,"body":%q}`,
		dm.ID, uuid.NewString(), strings.Repeat("x", session.DefaultReadLimit))
	_ = alice.WriteRaw(ctx, []byte(frame)) // the server may cut the connection mid-write
	select {
	case <-alice.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection still open after an oversize frame")
	}
	if got := alice.CloseStatus(); got != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %v; want %v", got, websocket.StatusMessageTooBig)
	}
	if got := storedBodies(t, bob, dm.ID); len(got) != 0 {
		t.Fatalf("%d messages stored from an oversize frame", len(got))
	}
}

// TestSecurityLargestBodyFitsTheReadLimit sends the largest body the protocol allows, made of the
// characters JSON escaping expands most: it must be stored, not cut off by the frame read limit.
func TestSecurityLargestBodyFitsTheReadLimit(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice, bob, dm := dmOn(t, n)
	body := strings.Repeat("<\x01", protocol.MaxBodyBytes/2) // encoding/json writes each as \u003c, \u0001
	if _, err := alice.Send(ctx, dm.ID, body); err != nil {
		t.Fatalf("send of a %d-byte body: %v (close status %v)", len(body), err, alice.CloseStatus())
	}
	if got := testenv.Messages(t, bob, dm.ID, 1, 10*time.Second)[0]; got.Body != body {
		t.Fatalf("delivered body of %d bytes; want %d", len(got.Body), len(body))
	}
}

func TestSecurityBodyTooLargeKeepsTheConnection(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice, bob, dm := dmOn(t, n)
	_, err := alice.Send(ctx, dm.ID, strings.Repeat("x", protocol.MaxBodyBytes+1))
	if pe := wantCode(t, "send over MaxBodyBytes", err, protocol.CodeTooLarge); pe.Retryable {
		t.Fatal("too_large is marked retryable; the same body can never succeed")
	}
	ack, err := alice.Send(ctx, dm.ID, strings.Repeat("x", protocol.MaxBodyBytes))
	if err != nil || ack.Seq != 1 {
		t.Fatalf("send of exactly MaxBodyBytes on the same connection: seq %d, %v; want seq 1", ack.Seq, err)
	}
	if got := storedBodies(t, bob, dm.ID); len(got) != 1 {
		t.Fatalf("%d messages stored; want only the one that fits", len(got))
	}
}

func TestSecuritySendRateLimit(t *testing.T) {
	const rate, burst, flood = 5, 5, 40
	n, _ := startSecurityNode(t, func(c *node.Config) {
		c.Session.SendRate = rate
		c.Session.SendBurst = burst
	})
	ctx := ctxT(t, time.Minute)
	alice, bob, dm := dmOn(t, n)
	var (
		mu           sync.Mutex
		acked        int
		limited      int
		wg           sync.WaitGroup
		unexplained  []error
		startOfFlood = time.Now()
	)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := alice.Send(ctx, dm.ID, fmt.Sprintf("flood %d", i))
			var pe *protocol.Error
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				acked++
			case errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited && pe.Retryable:
				limited++
			default:
				unexplained = append(unexplained, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(startOfFlood)
	if len(unexplained) > 0 {
		t.Fatalf("sends failed otherwise than rate_limited/retryable: %v", unexplained)
	}
	if allowed := burst + int(rate*elapsed.Seconds()) + 1; acked < burst || acked > allowed || limited == 0 {
		t.Fatalf("flood of %d in %s: %d acked, %d rate limited; want %d..%d acked and the rest limited",
			flood, elapsed, acked, limited, burst, allowed)
	}
	// The connection stays open: once the bucket refills, sends pass again.
	testenv.CheckFor(t, 5*time.Second, 100*time.Millisecond, func() error {
		_, err := alice.Send(ctx, dm.ID, "after the flood")
		var pe *protocol.Error
		switch {
		case err == nil:
			acked++
			return nil
		case errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited:
			return fmt.Errorf("a send after the flood: %w", err)
		default:
			return fmt.Errorf("%w: a send after the flood failed otherwise than rate_limited: %v", testenv.ErrGiveUp, err)
		}
	})
	// Other users are not limited by alice's flood.
	if _, err := bob.Send(ctx, dm.ID, "bob is fine"); err != nil {
		t.Fatalf("bob during alice's limit: %v", err)
	}
	if got := storedBodies(t, bob, dm.ID); len(got) != acked+1 {
		t.Fatalf("%d messages stored; %d acked to alice and 1 to bob", len(got), acked)
	}
}

// TestSecuritySlowConsumerIsCut has a member stop reading while a group gets many large messages:
// its session is closed with 4008 and the other members keep receiving.
func TestSecuritySlowConsumerIsCut(t *testing.T) {
	const messages = 400
	n, _ := startSecurityNode(t, func(c *node.Config) {
		c.Session.MaxQueuedBytes = 16 * protocol.MaxBodyBytes
		// Longer than the test: if the hub waited on the stalled socket, carol would starve.
		c.Session.WriteTimeout = time.Minute
	})
	ctx := ctxT(t, 2*time.Minute)
	bob := connectReady(t, n, "bob")
	carol := connectReady(t, n, "carol")
	sloth, group := slothInBusyGroup(t, ctx, n, bob, login(t, n, "sloth"))
	// From here on sloth reads nothing: the kernel buffers fill, then its queue.
	start := time.Now()
	sent := floodGroup(t, ctx, bob, group.ID, messages)
	testenv.Messages(t, carol, group.ID, messages, time.Minute)
	sent()
	t.Logf("carol got %d messages of %d KiB in %s", messages, protocol.MaxBodyBytes>>10, time.Since(start))
	got, code := sloth.readToClose(t, 30*time.Second)
	if code != int(session.StatusSlowConsumer) {
		t.Fatalf("slow consumer closed with %d after %d frames; want %d", code, got, session.StatusSlowConsumer)
	}
	t.Logf("the slow consumer got %d text frames before the close", got)
	if got >= 2*messages {
		t.Fatalf("slow consumer got all %d frames; it was never behind", got)
	}
}

// slothInBusyGroup has bob create a group "busy" with carol and sloth, sloth on a raw connection
// with a small receive buffer (dialRaw) that has read up to the group's frame and reads nothing
// more unless the test reads it.
func slothInBusyGroup(t *testing.T, ctx context.Context, n *testenv.Node, bob *client.Conn, slothToken string) (*rawConn, protocol.Conversation) {
	t.Helper()
	sloth := dialRaw(t, n, slothToken, 4096)
	sloth.readUntil(t, func(f rawFrame) bool { return f.text(protocol.TypeHello) })
	group, err := bob.CreateGroup(ctx, "busy", []string{"carol", "sloth"})
	if err != nil {
		t.Fatal(err)
	}
	sloth.readUntil(t, func(f rawFrame) bool { return f.text(protocol.TypeConversation) })
	return sloth, group
}

// floodGroup has c send messages messages of the largest body to conversation convID, from four
// senders at once. It returns at once; the function it returns waits for the sends and fails the
// test if one failed.
func floodGroup(t *testing.T, ctx context.Context, c *client.Conn, convID string, messages int) (wait func()) {
	body := strings.Repeat("z", protocol.MaxBodyBytes)
	var wg sync.WaitGroup
	errs := make(chan error, messages)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < messages; i += 4 {
				if _, err := c.Send(ctx, convID, body); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	return func() {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("send during the flood: %v", err)
		}
	}
}

// TestSecurityDeadPeerIsClosedByPing has a peer that reads but never answers pings: it is closed
// after one ping interval and the pong timeout, while a client that answers stays connected.
func TestSecurityDeadPeerIsClosedByPing(t *testing.T) {
	const interval, timeout = 300 * time.Millisecond, time.Second
	n, _ := startSecurityNode(t, func(c *node.Config) {
		c.Session.PingInterval = interval
		c.Session.PongTimeout = timeout
	})
	alive := connectReady(t, n, "alice")
	start := time.Now()
	dead := dialRaw(t, n, login(t, n, "bob"), 0)
	_, code := dead.readToClose(t, 10*time.Second)
	took := time.Since(start)
	if code != int(websocket.StatusPolicyViolation) {
		t.Fatalf("dead peer closed with %d; want %d (ping timeout)", code, websocket.StatusPolicyViolation)
	}
	if took < interval || took > interval+timeout+2*time.Second {
		t.Fatalf("dead peer closed after %s; want about %s", took, interval+timeout)
	}
	// By now alice has answered several pings; she is still served.
	if time.Since(start) < 3*interval {
		time.Sleep(3*interval - time.Since(start))
	}
	roundTrip(t, alive)
	select {
	case <-alive.Done():
		t.Fatalf("a client that answers pings was closed: %v", alive.Err())
	default:
	}
}

func TestSecurityConnectionCapPerUser(t *testing.T) {
	n, _ := startSecurityNode(t, func(c *node.Config) { c.Chat.MaxConnectionsPerUser = 2 })
	token := login(t, n, "alice")
	first := dialWith(t, n, token, nil)
	second := dialWith(t, n, token, nil)
	// No sync on connect: the refusal arrives as a close frame after the upgrade.
	third, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, &client.Options{SkipSync: true})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	select {
	case <-third.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("third connection still open")
	}
	if got := third.CloseStatus(); got != session.StatusTooManyConnections {
		t.Fatalf("third connection closed with %v; want %v", got, session.StatusTooManyConnections)
	}
	roundTrip(t, first)
	roundTrip(t, second)
	connectReady(t, n, "bob") // the cap is per user
	// A freed slot is usable again, once the server has seen the close (the client's Close
	// returns when the close frames crossed, before the session's end released the slot).
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		c, err := client.Dial(ctxT(t, 10*time.Second), n.WSURL(), token, nil)
		if websocket.CloseStatus(err) == session.StatusTooManyConnections {
			return fmt.Errorf("the closed connection's slot is not free yet: %w", err)
		}
		if err != nil {
			return fmt.Errorf("%w: dial: %v", testenv.ErrGiveUp, err)
		}
		defer c.Close()
		if _, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeListConversations}); err != nil {
			return fmt.Errorf("a connection after one of two closed is not admitted: %w (close status %v)", err, c.CloseStatus())
		}
		return nil
	})
}

// TestSecurityMalformedFramesKeepTheConnection writes each kind of malformed frame over one real
// connection: each is answered with an error frame and a stable code, and the next send is acked.
func TestSecurityMalformedFramesKeepTheConnection(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	ctx := ctxT(t, time.Minute)
	token := login(t, n, "alice")
	alice := dialWith(t, n, token, nil)
	bob := connectReady(t, n, "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	conv := dm.ID
	msgID := uuid.NewString()
	acked := 0
	for _, tc := range []struct {
		name, frame, code, id string
	}{
		{"bad JSON", `{"type":"send","id":"m1",`, protocol.CodeBadFrame, ""},
		{"not an object", `["send"]`, protocol.CodeBadFrame, ""},
		{"empty frame", ``, protocol.CodeBadFrame, ""},
		{"unknown type", `{"type":"shutdown","id":"m2"}`, protocol.CodeUnknownType, "m2"},
		{"missing type", `{"id":"m3"}`, protocol.CodeInvalidField, "m3"},
		{"wrong field type", `{"type":"send","id":"m4","conversationId":7,"clientMsgId":"` + msgID + `","body":"x"}`, protocol.CodeInvalidField, "m4"},
		{"body not a string", `{"type":"send","id":"m5","conversationId":"` + conv + `","clientMsgId":"` + msgID + `","body":["x"]}`, protocol.CodeInvalidField, "m5"},
		{"seq 1e400", `{"type":"read","id":"m6","conversationId":"` + conv + `","seq":1e400}`, protocol.CodeInvalidField, "m6"},
		{"seq beyond int64", `{"type":"read","id":"m7","conversationId":"` + conv + `","seq":99999999999999999999}`, protocol.CodeInvalidField, "m7"},
		{"limit beyond int64", `{"type":"history","id":"m8","conversationId":"` + conv + `","limit":99999999999999999999}`, protocol.CodeInvalidField, "m8"},
		{"invalid UTF-8", "{\"type\":\"send\",\"id\":\"m9\",\"conversationId\":\"" + conv + "\",\"clientMsgId\":\"" + msgID + "\",\"body\":\"\xff\xfe\"}", protocol.CodeBadFrame, ""},
		{"missing conversationId", `{"type":"send","id":"m10","clientMsgId":"` + msgID + `","body":"x"}`, protocol.CodeInvalidField, "m10"},
		{"missing clientMsgId", `{"type":"send","id":"m11","conversationId":"` + conv + `","body":"x"}`, protocol.CodeInvalidField, "m11"},
		{"missing seq", `{"type":"read","id":"m12","conversationId":"` + conv + `"}`, protocol.CodeInvalidField, "m12"},
		{"subject wildcard as conversation", `{"type":"typing","id":"m13","conversationId":">"}`, protocol.CodeInvalidField, "m13"},
		{"NATS subject as conversation", `{"type":"send","id":"m14","conversationId":"` + conv + `.msg","clientMsgId":"` + msgID + `","body":"x"}`, protocol.CodeInvalidField, "m14"},
		{"id too long", `{"type":"list_conversations","id":"` + strings.Repeat("i", 500) + `"}`, protocol.CodeInvalidField, ""},
	} {
		if err := alice.WriteRaw(ctx, []byte(tc.frame)); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		f := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeError })
		if f.Code != tc.code || f.ID != tc.id || f.Retryable {
			t.Errorf("%s: error frame code %q id %q retryable %v (%s); want code %q id %q", tc.name, f.Code, f.ID, f.Retryable, f.Message, tc.code, tc.id)
		}
		if _, err := alice.Send(ctx, conv, "after "+tc.name); err != nil {
			t.Fatalf("send after %s: %v", tc.name, err)
		}
		acked++
	}

	// A binary frame, which the real client never sends, over a hand-made connection.
	raw := dialRaw(t, n, token, 0)
	raw.readUntil(t, func(f rawFrame) bool { return f.text(protocol.TypeHello) })
	raw.write(t, opBinary, []byte(`{"type":"list_conversations","id":"b1"}`))
	errFrame := raw.readUntil(t, func(f rawFrame) bool { return f.text(protocol.TypeError) })
	if !strings.Contains(string(errFrame.payload), `"code":"bad_frame"`) {
		t.Fatalf("binary frame answered with %s", errFrame.payload)
	}
	send := fmt.Sprintf(`{"type":"send","id":"b2","conversationId":%q,"clientMsgId":%q,"body":"after binary"}`, conv, uuid.NewString())
	raw.write(t, opText, []byte(send))
	if ack := raw.readUntil(t, func(f rawFrame) bool { return f.text(protocol.TypeAck) || f.text(protocol.TypeError) }); !ack.text(protocol.TypeAck) {
		t.Fatalf("send after a binary frame: %s", ack.payload)
	}
	acked++

	// Nothing of the malformed frames was stored; every valid send after one was.
	if got := storedBodies(t, bob, conv); len(got) != acked {
		t.Fatalf("%d messages stored; want the %d acked", len(got), acked)
	}
}

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	opText   = 0x1
	opBinary = 0x2
	opClose  = 0x8
)

// rawConn is a WebSocket client written by hand on a TCP socket, for peers the real client cannot
// imitate: one that stops reading, one that never answers pings (coder/websocket answers them
// inside Read), one that sends binary frames.
type rawConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// rawFrame is one frame read from the server.
type rawFrame struct {
	op      byte
	payload []byte
}

// text reports whether f is a text frame of a server frame type.
func (f rawFrame) text(typ string) bool {
	return f.op == opText && strings.HasPrefix(string(f.payload), `{"type":"`+typ+`"`)
}

// dialRaw upgrades a TCP connection by hand. rcvBuf, if positive, shrinks the socket's receive
// buffer before connecting, so a peer that stops reading backs up quickly.
func dialRaw(t *testing.T, n *testenv.Node, token string, rcvBuf int) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvBuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var sockErr error
			if err := c.Control(func(fd uintptr) {
				sockErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvBuf)
			}); err != nil {
				return err
			}
			return sockErr
		}
	}
	conn, err := d.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatalf("dial raw: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = fmt.Fprintf(conn, "GET /ws?token=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", url.QueryEscape(token), n.Addr(), base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatalf("write upgrade: %v", err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("read upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade refused: %s", resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	return &rawConn{conn: conn, r: r}
}

// write sends one masked frame, as clients must.
func (c *rawConn) write(t *testing.T, op byte, payload []byte) {
	t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(maskedFrame(op, payload)); err != nil {
		t.Fatalf("raw write: %v", err)
	}
}

// maskedFrame encodes one masked client frame.
func maskedFrame(op byte, payload []byte) []byte {
	out := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		out = append(out, 0x80|byte(n))
	case n <= 0xffff:
		out = append(out, 0x80|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, 0x80|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	out = append(out, mask[:]...)
	for i, b := range payload {
		out = append(out, b^mask[i%4])
	}
	return out
}

// read reads one frame; it never answers pings.
func (c *rawConn) read(deadline time.Time) (rawFrame, error) {
	_ = c.conn.SetReadDeadline(deadline)
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return rawFrame{}, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(c.r, ext[:]); err != nil {
			return rawFrame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(c.r, ext[:]); err != nil {
			return rawFrame{}, err
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if h[1]&0x80 != 0 || n > 1<<24 {
		return rawFrame{}, fmt.Errorf("server frame masked or of %d bytes", n)
	}
	f := rawFrame{op: h[0] & 0x0f, payload: make([]byte, n)}
	_, err := io.ReadFull(c.r, f.payload)
	return f, err
}

// readUntil reads frames until one matches, and fails the test after 10 seconds.
func (c *rawConn) readUntil(t *testing.T, match func(rawFrame) bool) rawFrame {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := c.read(deadline)
		if err != nil {
			t.Fatalf("raw read: %v", err)
		}
		if match(f) {
			return f
		}
	}
}

// readToClose reads until the server's close frame and returns the text frames before it and the
// close code.
func (c *rawConn) readToClose(t *testing.T, timeout time.Duration) (texts, code int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		f, err := c.read(deadline)
		if err != nil {
			t.Fatalf("raw read after %d text frames, before a close frame: %v", texts, err)
		}
		switch f.op {
		case opText:
			texts++
		case opClose:
			if len(f.payload) < 2 {
				return texts, int(websocket.StatusNoStatusRcvd)
			}
			return texts, int(binary.BigEndian.Uint16(f.payload[:2]))
		}
	}
}
