package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
	"github.com/chatd/chatd/testenv/promtest"
)

// The tests in this file prove Web Push end to end: a node sends real RFC 8291 pushes, signed with
// VAPID, to a push service on loopback (testenv.PushService) that checks the signature and
// decrypts each payload with the device's keys, as a browser would.

// pushWindow is the coalescing window of the tests: long enough for three sends over loopback.
const pushWindow = 1500 * time.Millisecond

// pushNode starts one node with Web Push on and a single push worker, so notifications are sent
// in the order their windows closed: a later conversation's push proves an earlier one was
// worked out.
func pushNode(t *testing.T) (*testenv.Node, push.Config) {
	t.Helper()
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testenv.NewEnv(t).NodeConfig()
	cfg.Sequencer.Partitions = blockPartitions
	cfg.Push = push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subject: "mailto:ops@example.com",
		Window: pushWindow, Workers: 1, AllowHTTP: true, Backoff: 50 * time.Millisecond, WithdrawEvery: 100 * time.Millisecond}
	return testenv.StartNode(t, cfg), cfg.Push
}

// pushAPI calls a Web Push endpoint with the user's token and returns the status.
func pushAPI(t *testing.T, n *testenv.Node, token, method, path string, body []byte) int {
	t.Helper()
	code, _ := bearerCall(t, method, n.URL()+path, token, string(body))
	return code
}

// subscribeDevice signs name in without a socket and subscribes one device of theirs.
func subscribeDevice(t *testing.T, n *testenv.Node, ps *testenv.PushService, name string) (*testenv.PushSubscription, string) {
	t.Helper()
	token, _, err := client.Login(ctxT(t, 10*time.Second), http.DefaultClient, n.URL(), name)
	if err != nil {
		t.Fatal(err)
	}
	sub := ps.Subscribe(t)
	if code := pushAPI(t, n, token, http.MethodPut, "/api/push/subscriptions/phone", sub.JSON()); code != http.StatusNoContent {
		t.Fatalf("subscribe %s: status %d", name, code)
	}
	return sub, token
}

// payloads decodes what a device received.
func payloads(t *testing.T, ps *testenv.PushService, sub *testenv.PushSubscription) []push.Payload {
	t.Helper()
	var out []push.Payload
	for _, r := range ps.Received(sub) {
		var p push.Payload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatalf("payload %q: %v", r.Payload, err)
		}
		out = append(out, p)
	}
	return out
}

// waitPushes waits until sub has received want pushes.
func waitPushes(t *testing.T, ps *testenv.PushService, sub *testenv.PushSubscription, want int, what string) []push.Payload {
	t.Helper()
	poll.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if got := len(ps.Received(sub)); got < want {
			return fmt.Errorf("%s: %d pushes, want %d", what, got, want)
		}
		return nil
	})
	return payloads(t, ps, sub)
}

func mustSend(t *testing.T, c *client.Conn, conv, body string) {
	t.Helper()
	if _, err := c.Send(ctxT(t, 10*time.Second), conv, body); err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
}

func TestWebPushReachesOfflineDevicesOncePerBurst(t *testing.T) {
	n, cfg := pushNode(t)
	ps := testenv.NewPushService(t)
	ctx := ctxT(t, time.Minute)

	// Setup while bob is online: a DM with alice, a group with carol, whom bob blocks.
	alice, carol, bob := testenv.Connect(t, n.URL(), "alice"), testenv.Connect(t, n.URL(), "carol"), testenv.Connect(t, n.URL(), "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	group, err := alice.CreateGroup(ctx, "trio", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	blockRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "carol"})
	_ = bob.Close()
	bobSub, bobToken := subscribeDevice(t, n, ps, "bob")
	aliceSub, _ := subscribeDevice(t, n, ps, "alice")

	// Three messages within the window become one notification, counted, with alice's name and
	// the newest text; alice, offline by the time it is sent, hears nothing of her own.
	for _, body := range []string{"one", "two", "three"} {
		mustSend(t, alice, dm.ID, body)
	}
	_ = alice.Close()
	got := waitPushes(t, ps, bobSub, 1, "bob after alice's burst")
	want := push.Payload{Type: push.PayloadMessage, ConversationID: dm.ID, Tag: dm.ID, Seq: 3, FirstUnreadSeq: 1, Count: 3,
		ConversationName: "alice", SenderID: "alice", SenderName: "alice", Body: "three"}
	if got[0] != want {
		t.Fatalf("bob's notification:\n got %+v\nwant %+v", got[0], want)
	}
	r := ps.Received(bobSub)[0]
	if r.VAPIDKey != cfg.VAPIDPublicKey || r.Topic == "" || r.TTL != int(push.DefaultTTL/time.Second) {
		t.Fatalf("push signed with %q (want the node's key %q), topic %q, TTL %d", r.VAPIDKey, cfg.VAPIDPublicKey, r.Topic, r.TTL)
	}

	// A blocked sender notifies nobody who blocks them: carol's group message reaches alice's
	// device (proving the window was worked out), never bob's.
	mustSend(t, carol, group.ID, "from carol")
	aliceGot := waitPushes(t, ps, aliceSub, 1, "alice after carol's group message")
	if aliceGot[0].ConversationID != group.ID || aliceGot[0].ConversationName != "trio" || aliceGot[0].SenderName != "carol" {
		t.Fatalf("alice's notification of the group: %+v", aliceGot[0])
	}

	// A conversation set to notify for nothing is silent: bob sets the DM so (set_notify, the
	// setting every device of his follows) and turns previews off with the body of earlier
	// versions, whose "muted" list is ignored; alice writes in the DM, and then carol writes to
	// alice: the single worker sends alice's notification only after the DM's was worked out.
	setNotify(t, n, "bob", dm.ID, protocol.NotifyNothing)
	oldBody := `{"preview": false, "muted": ["` + dm.ID + `"]}`
	if code := pushAPI(t, n, bobToken, http.MethodPut, "/api/push/settings", []byte(oldBody)); code != http.StatusNoContent {
		t.Fatalf("settings with the old muted list: status %d", code)
	}
	if code, body := bearerCall(t, http.MethodGet, n.URL()+"/api/push/settings", bobToken, ""); code != http.StatusOK || string(body) != `{"preview":false}`+"\n" {
		t.Fatalf("settings read back: %d %q; want only the preview, off", code, body)
	}
	alice = testenv.Connect(t, n.URL(), "alice")
	mustSend(t, alice, dm.ID, "while set to nothing")
	_ = alice.Close()
	carolDM, err := carol.OpenDM(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, carol, carolDM.ID, "marker")
	waitPushes(t, ps, aliceSub, 2, "alice after carol's DM")
	if got := payloads(t, ps, bobSub); len(got) != 1 {
		t.Fatalf("bob got %d notifications; want only the first (blocked sender, DM set to nothing): %+v", len(got), got)
	}
	for _, p := range payloads(t, ps, aliceSub) {
		if p.SenderID == "alice" {
			t.Fatalf("alice was notified of her own message: %+v", p)
		}
	}

	// Back to all, still without previews: a notification carries no text; a 410 removes the
	// subscription, and the next message does not reach the push service at all.
	setNotify(t, n, "bob", dm.ID, protocol.NotifyAll)
	alice = testenv.Connect(t, n.URL(), "alice")
	mustSend(t, alice, dm.ID, "after notifying for all again")
	got = waitPushes(t, ps, bobSub, 2, "bob after notifying for all again")
	if got[1].Body != "" || got[1].Count != 5 || got[1].Seq != 5 {
		t.Fatalf("bob's notification without preview: %+v; want no body, 5 unread (the silenced one too), seq 5", got[1])
	}
	ps.Answer(bobSub, http.StatusGone)
	mustSend(t, alice, dm.ID, "to a gone device")
	promtest.WaitFor(t, promtest.URL(n.AdminURL()+"/metrics"), 15*time.Second, 1, "chatd_push_expired_total")
	posts := ps.Posts(bobSub)
	mustSend(t, alice, dm.ID, "after the 410")
	_ = alice.Close()
	mustSend(t, carol, group.ID, "group marker")
	waitPushes(t, ps, aliceSub, 3, "alice after carol's group marker")
	if got := ps.Posts(bobSub); got != posts {
		t.Fatalf("bob's removed subscription got %d more pushes", got-posts)
	}
}

// setNotify connects name, sets their notify setting for conv (set_notify) and closes the
// socket again.
func setNotify(t *testing.T, n *testenv.Node, name, conv, level string) {
	t.Helper()
	c := testenv.Connect(t, n.URL(), name)
	if _, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeSetNotify, ConversationID: conv, Notify: level}); err != nil {
		t.Fatalf("%s: set_notify %s: %v", name, level, err)
	}
	_ = c.Close()
}

// pushTrio starts a push node and a push service, connects alice and subscribes a device each
// of bob and carol, who have no socket.
func pushTrio(t *testing.T) (n *testenv.Node, ps *testenv.PushService, alice *client.Conn, bobSub, carolSub *testenv.PushSubscription) {
	t.Helper()
	n, _ = pushNode(t)
	ps = testenv.NewPushService(t)
	alice = testenv.Connect(t, n.URL(), "alice")
	bobSub, _ = subscribeDevice(t, n, ps, "bob")
	carolSub, _ = subscribeDevice(t, n, ps, "carol")
	return n, ps, alice, bobSub, carolSub
}

// TestWebPushForMentionsOnlyNotifiesOfMentions: bob hears only mentions in the group, so a
// window without one that names him sends him nothing, and a window with one shows that message
// (not the newer plain one) and counts every unread message, and a mention edited away within the
// window sends nothing. carol, notified for all, is the
// marker: members are worked out in order, so her push means bob's was decided.
func TestWebPushForMentionsOnlyNotifiesOfMentions(t *testing.T) {
	n, ps, alice, bobSub, carolSub := pushTrio(t)
	ctx := ctxT(t, time.Minute)
	group, err := alice.CreateGroup(ctx, "team", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	setNotify(t, n, "bob", group.ID, protocol.NotifyMentions)

	mustSend(t, alice, group.ID, "no mention here")
	mustSend(t, alice, group.ID, message.MentionToken("carol")+" just you")
	waitPushes(t, ps, carolSub, 1, "carol after the first window")
	if got := payloads(t, ps, bobSub); len(got) != 0 {
		t.Fatalf("bob, mentions only, got %d notifications of messages that do not mention him: %+v", len(got), got)
	}

	mention := "over to you, " + message.MentionToken("bob")
	mustSend(t, alice, group.ID, mention)
	mustSend(t, alice, group.ID, "and a plain line after it")
	got := waitPushes(t, ps, bobSub, 1, "bob after his mention")
	// The notification names him as a page does: @ and his display name, not the token.
	want := push.Payload{Type: push.PayloadMessage, ConversationID: group.ID, Tag: group.ID, Seq: 3, FirstUnreadSeq: 1, Count: 3,
		ConversationName: "team", SenderID: "alice", SenderName: "alice", Body: "over to you, @bob"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("bob's notifications:\n got %+v\nwant [%+v]", got, want)
	}

	// A mention edited away before the window ends notifies him of nothing; carol's notification
	// shows the new text.
	waitPushes(t, ps, carolSub, 2, "carol after the second window")
	ack, err := alice.Send(ctx, group.ID, message.MentionToken("bob")+" wrong person")
	if err != nil {
		t.Fatal(err)
	}
	edited := message.MentionToken("carol") + " right person"
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: group.ID, Seq: ack.Seq, Body: edited}); err != nil {
		t.Fatal(err)
	}
	if carolGot := waitPushes(t, ps, carolSub, 3, "carol after the edit"); carolGot[2].Body != "@carol right person" {
		t.Fatalf("carol's notification of the edited message: %+v; want the new text, her mention shown as @carol", carolGot[2])
	}
	if got := payloads(t, ps, bobSub); len(got) != 1 {
		t.Fatalf("bob got %d notifications; want 1 (his mention was edited away): %+v", len(got), got)
	}
}

func TestWebPushRetriesAFailingPushServiceAndWithdrawsWhatAReadCovers(t *testing.T) {
	n, _ := pushNode(t)
	ps := testenv.NewPushService(t)
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, n.URL(), "alice")
	bobSub, _ := subscribeDevice(t, n, ps, "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}

	// The push service fails twice (overloaded, then down): the third attempt delivers it, once.
	ps.Answer(bobSub, http.StatusTooManyRequests, http.StatusServiceUnavailable)
	mustSend(t, alice, dm.ID, "hello")
	mustSend(t, alice, dm.ID, "are you there?")
	got := waitPushes(t, ps, bobSub, 1, "bob after retries")
	if posts := ps.Posts(bobSub); posts != 3 || got[0].Count != 2 {
		t.Fatalf("%d posts, notification %+v; want 3 posts (two refused) and one notification of 2", posts, got[0])
	}

	// Bob reads the DM on his laptop: his phone's notification is withdrawn with the same tag.
	bob := testenv.Connect(t, n.URL(), "bob")
	if err := bob.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	got = waitPushes(t, ps, bobSub, 2, "bob's phone after reading on the laptop")
	want := push.Payload{Type: push.PayloadWithdraw, ConversationID: dm.ID, Tag: dm.ID, Seq: 2}
	if got[1] != want || ps.Received(bobSub)[1].Topic != ps.Received(bobSub)[0].Topic {
		t.Fatalf("withdrawal %+v (topic %q, notification's %q); want %+v with the notification's topic",
			got[1], ps.Received(bobSub)[1].Topic, ps.Received(bobSub)[0].Topic, want)
	}
	// While bob is online nothing more is pushed, and his read is not withdrawn twice.
	mustSend(t, alice, dm.ID, "seen live")
	carol := testenv.Connect(t, n.URL(), "carol")
	daveSub, _ := subscribeDevice(t, n, ps, "dave")
	group, err := carol.CreateGroup(ctx, "marker", []string{"dave"})
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, carol, group.ID, "marker")
	waitPushes(t, ps, daveSub, 1, "dave after the marker")
	if got := len(ps.Received(bobSub)); got != 2 {
		t.Fatalf("bob's phone got %d pushes; want 2 (nothing while he is online)", got)
	}
}

// TestWebPushWaitsWhileOnlineOnAnotherNode: bob's only socket is on the other node of the
// cluster, so alice's group message, whichever node owns the group, notifies carol (offline) and
// not bob; once he is gone, her next message notifies him of both unread messages.
func TestWebPushWaitsWhileOnlineOnAnotherNode(t *testing.T) {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.NewEnv(t)
	nodes := make([]*testenv.Node, 2)
	for i := range nodes {
		cfg := env.NodeConfig()
		cfg.NodeID = fmt.Sprintf("push-%c", 'a'+i)
		cfg.Sequencer.Partitions = blockPartitions
		cfg.Push = push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Window: pushWindow, Workers: 1, AllowHTTP: true}
		nodes[i] = testenv.StartNode(t, cfg)
	}
	ps := testenv.NewPushService(t)
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, nodes[0].URL(), "alice")
	bob := testenv.Connect(t, nodes[1].URL(), "bob")
	bobSub, _ := subscribeDevice(t, nodes[0], ps, "bob")
	carolSub, _ := subscribeDevice(t, nodes[0], ps, "carol")
	group, err := alice.CreateGroup(ctx, "three", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	// One window, worked out for bob before carol (members in order): carol's push means bob's
	// was decided.
	mustSend(t, alice, group.ID, "while bob is on the other node")
	first := waitPushes(t, ps, carolSub, 1, "carol, offline")
	if posts := ps.Posts(bobSub); posts != 0 {
		t.Fatalf("bob, online on the other node, got %d pushes", posts)
	}
	_ = bob.Close()
	mustSend(t, alice, group.ID, "now that bob is gone")
	got := waitPushes(t, ps, bobSub, 1, "bob after leaving")
	// bob has read as much as carol: his notification counts one more unread than hers did.
	if len(got) != 1 || got[0].Seq != first[0].Seq+1 || got[0].Count != first[0].Count+1 || got[0].FirstUnreadSeq != first[0].FirstUnreadSeq {
		t.Fatalf("bob's notifications %+v (carol's %+v); want one, of the second message, counting both unread", got, first[0])
	}
}

// TestWebPushLeavesOutAMessageDeletedBeforeItLeaves: alice deletes her second message within
// the window; bob's notification shows the first, and one deleted alone notifies nothing.
func TestWebPushLeavesOutAMessageDeletedBeforeItLeaves(t *testing.T) {
	_, ps, alice, bobSub, carolSub := pushTrio(t)
	ctx := ctxT(t, time.Minute)
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	del := func(seq int64) {
		t.Helper()
		if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: dm.ID, Seq: seq}); err != nil {
			t.Fatalf("delete %d: %v", seq, err)
		}
	}
	mustSend(t, alice, dm.ID, "keep this")
	mustSend(t, alice, dm.ID, "oops")
	del(2)
	got := waitPushes(t, ps, bobSub, 1, "bob")
	if got[0].Seq != 1 || got[0].Body != "keep this" || got[0].Count != 1 {
		t.Fatalf("bob's notification %+v; want the first message only", got[0])
	}

	// A window of nothing but a deleted message: carol's DM, worked out after it by the single
	// worker, is the marker.
	mustSend(t, alice, dm.ID, "oops again")
	del(3)
	carolDM, err := alice.OpenDM(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, alice, carolDM.ID, "marker")
	waitPushes(t, ps, carolSub, 1, "carol")
	if got := payloads(t, ps, bobSub); len(got) != 1 {
		t.Fatalf("bob got %d notifications; want 1 (the deleted message notifies nothing): %+v", len(got), got)
	}
}
