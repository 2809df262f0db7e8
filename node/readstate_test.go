package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// seedMessages stores n messages from sender in conversation conv directly, as a long history.
func seedMessages(t *testing.T, store *storage.Store, conv, sender string, n int) {
	t.Helper()
	// 100,000 messages take the store half a minute alone, and several times that while the rest
	// of the suite shares its two cores.
	ctx := ctxT(t, 4*time.Minute)
	// Batches of four whole buckets, which the insert seals: each stays well inside the store's
	// operation timeout on a loaded machine.
	const batchSize = 4 * storage.BucketSize
	for start := 1; start <= n; start += batchSize {
		var batch []storage.Message
		for seq := start; seq < start+batchSize && seq <= n; seq++ {
			batch = append(batch, storage.Message{ConversationID: conv, Seq: int64(seq), SenderID: sender,
				Kind: protocol.KindText, Body: fmt.Sprintf("m%d", seq), CreatedAt: time.Now().UTC(), ClientMsgID: uuid.NewString()})
		}
		if err := store.InsertMessages(ctx, batch); err != nil {
			t.Fatalf("seed messages: %v", err)
		}
	}
	if err := store.AdvanceCounters(ctx, map[string]storage.Counters{conv: {LastSeq: int64(n)}}); err != nil {
		t.Fatalf("seed lastSeq: %v", err)
	}

}

func latestBadge(t *testing.T, c *client.Conn, convID string, unread int64) {
	t.Helper()
	testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeBadge && f.ConversationID == convID && f.Unread != nil && *f.Unread == unread
	})
}

// unreadIs waits until c's conversation list shows unread for convID. Message pushes carry no
// badge: the server's count is what the list says (clients derive theirs from the pushes).
func unreadIs(t *testing.T, c *client.Conn, convID string, unread int64) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		list, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeListConversations})
		if err != nil {
			return fmt.Errorf("%w: list conversations: %v", testenv.ErrGiveUp, err)
		}
		for _, conv := range list.Conversations {
			if conv.ID == convID && conv.Unread == unread {
				return nil
			}
		}
		return fmt.Errorf("want unread %d in %s; the list says %+v", unread, convID, list.Conversations)
	})
}

func TestCursorOnlyMovesForwardAcrossDevices(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx := ctxT(t, time.Minute)
	bob := testenv.Connect(t, n.URL(), "bob")
	phone := testenv.Connect(t, n.URL(), "alice")
	laptop := testenv.Connect(t, n.URL(), "alice")
	tablet := testenv.Connect(t, n.URL(), "alice")
	dm, err := bob.OpenDM(ctx, "alice")
	if err != nil {
		t.Fatalf("open dm: %v", err)
	}
	for i := 0; i < 150; i++ {
		if _, err := bob.Send(ctx, dm.ID, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	for _, d := range []*client.Conn{phone, laptop, tablet} {
		unreadIs(t, d, dm.ID, 150)
	}
	if err := laptop.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 120}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*client.Conn{phone, laptop, tablet} {
		latestBadge(t, d, dm.ID, 30)
	}
	// The phone reports an older position afterwards: nothing moves back.
	if err := phone.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 90}); err != nil {
		t.Fatal(err)
	}
	// A read past the end is clamped to the last message.
	if err := tablet.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: 100000}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*client.Conn{phone, laptop, tablet} {
		latestBadge(t, d, dm.ID, 0)
	}
	list, err := phone.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil || len(list.Conversations) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if c := list.Conversations[0]; c.ReadSeq != 150 || c.Unread != 0 {
		t.Fatalf("after reads 120, 90, 100000: readSeq %d unread %d; want 150, 0", c.ReadSeq, c.Unread)
	}
	// Own messages never count as unread.
	if _, err := phone.Send(ctx, dm.ID, "reply"); err != nil {
		t.Fatal(err)
	}
	unreadIs(t, laptop, dm.ID, 0)
	unreadIs(t, bob, dm.ID, 1)
}

func TestReadFramesAreCoalescedIntoFewWrites(t *testing.T) {
	env, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, n.URL(), "alice")
	if err := testenv.Connect(t, n.URL(), "bob").Close(); err != nil {
		t.Fatal(err)
	}
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	seedMessages(t, store, dm.ID, "alice", 1000)
	bob := testenv.Connect(t, n.URL(), "bob") // bob's first session here loads the seeded lastSeq
	rec.Reset()
	start := time.Now()
	for seq := int64(1); seq <= 1000; seq++ {
		if err := bob.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: seq}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Millisecond) // 1,000 frames over about five seconds, like a fast scroll
	}
	latestBadge(t, bob, dm.ID, 0)
	elapsed := time.Since(start)
	if err := bob.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		cursors, err := store.CursorsOf(ctx, "bob")
		if err != nil {
			return fmt.Errorf("bob's stored cursors: %w", err)
		}
		if len(cursors) != 1 || cursors[0].ReadSeq != 1000 {
			return fmt.Errorf("bob's stored cursors are %+v; want one at 1000", cursors)
		}
		return nil
	})
	writes := len(rec.Commands("update", "readCursors"))
	windows := int(elapsed/time.Second) + 2 // the windows the frames spanned, plus the flush on disconnect
	t.Logf("1000 read frames in %s: %d cursor writes", elapsed.Round(time.Millisecond), writes)
	if writes > windows {
		t.Fatalf("1000 read frames made %d cursor writes; want at most %d (one per window)", writes, windows)
	}
}

func TestLargeGroupReceiptsAndOfflineBadge(t *testing.T) {
	const members, messages = 5000, 200
	env, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, 2*time.Minute)
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	if err := testenv.Connect(t, n.URL(), "alice").Close(); err != nil { // signs alice up
		t.Fatal(err)
	}
	names := []string{"alice"}
	for i := 1; i < members; i++ {
		names = append(names, fmt.Sprintf("m%04d", i))
	}
	group := uuid.NewString()
	if _, err := store.EnsureConversation(ctx, storage.Conversation{ID: group, Kind: storage.KindGroup, Name: "all hands",
		Members: names, CreatedBy: "alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	alice := testenv.Connect(t, n.URL(), "alice") // her first session here loads the group
	rec.Reset()
	for i := 0; i < messages; i++ {
		if _, err := alice.Send(ctx, group, fmt.Sprintf("announcement %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Sending touches the messages and the counter; no member's read state is written.
	for _, c := range rec.Commands("", "readCursors") {
		if c.Name == "update" || c.Name == "insert" {
			var body struct {
				Updates []any `bson:"updates"`
			}
			if err := bson.Unmarshal(c.Body, &body); err == nil && len(body.Updates) > 1 {
				t.Fatalf("a send wrote %d cursors in one command; only the sender's may move", len(body.Updates))
			}
		}
	}
	// 200 members have read up to seq 150, 80 of them up to 200. (A few hundred: every cursor
	// update scans the whole collection in the embedded store.)
	var cursors []storage.Cursor
	for i := 1; i <= 200; i++ {
		seq := int64(150)
		if i <= 80 {
			seq = 200
		}
		cursors = append(cursors, storage.Cursor{UserID: names[i], ConversationID: group, ReadSeq: seq, UpdatedAt: time.Now()})
	}
	if err := store.AdvanceCursors(ctx, cursors); err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[int64]int64{150: 200, 151: 80, 200: 80} {
		r, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: group, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		if r.ReadBy == nil || *r.ReadBy != want {
			t.Fatalf("receipts for seq %d: read by %v, want %d", seq, r.ReadBy, want)
		}
		if len(r.Readers) != 0 {
			t.Fatalf("a %d-member group listed %d readers; large groups get counts only", members, len(r.Readers))
		}
	}
	// An offline member's badge, as a push service would ask for it.
	token, _, err := client.Login(ctx, http.DefaultClient, n.URL(), "m0150")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/api/badge", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var badge struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&badge); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("badge: %s, %v", resp.Status, err)
	}
	if badge.Total != 50 {
		t.Fatalf("m0150 read 150 of 200: badge %d, want 50", badge.Total)
	}
}

func TestReceiptsInDMAndPrivacy(t *testing.T) {
	_, n, alice, bob, dm := dmSetup(t)
	ctx := ctxT(t, time.Minute)
	carol := testenv.Connect(t, n.URL(), "carol")
	ack, err := alice.Send(ctx, dm.ID, "are you there?")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Messages(t, bob, dm.ID, 1, 10*time.Second)
	if err := bob.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: ack.Seq}); err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReceipt && f.UserID == "bob" && f.ReadSeq == ack.Seq
	})

	// Carol hides her receipts: her reads clear her own badge but are not shown to others.
	group, err := alice.CreateGroup(ctx, "trio", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetPrivacy, HideReceipts: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, carol, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeConversation && f.Conversation.ID == group.ID
	})
	g, err := alice.Send(ctx, group.ID, "lunch?")
	if err != nil {
		t.Fatal(err)
	}
	unreadIs(t, carol, group.ID, 1)
	for _, reader := range []*client.Conn{carol, bob} {
		if err := reader.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: group.ID, Seq: g.Seq}); err != nil {
			t.Fatal(err)
		}
	}
	latestBadge(t, carol, group.ID, 0)
	receipt := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReceipt && f.ConversationID == group.ID
	})
	if receipt.UserID != "bob" {
		t.Fatalf("receipt pushed for %s; carol hides hers", receipt.UserID)
	}
	r, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: group.ID, Seq: g.Seq})
	if err != nil {
		t.Fatal(err)
	}
	if *r.ReadBy != 1 || len(r.Readers) != 1 || r.Readers[0].UserID != "bob" {
		t.Fatalf("receipts: read by %d %+v; want only bob", *r.ReadBy, r.Readers)
	}
}

func ptr[T any](v T) *T { return &v }

// TestReadByBeaconAfterTheSocketClosed is a closing page's last read: sent over HTTP when its
// socket may already be gone, it still moves the cursor and reaches the other side.
func TestReadByBeaconAfterTheSocketClosed(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx := ctxT(t, time.Minute)
	token, _, err := client.Login(ctx, http.DefaultClient, n.URL(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	alice := testenv.Connect(t, n.URL(), "alice")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Send(ctx, dm.ID, "read me"); err != nil {
		t.Fatal(err)
	}
	post := func(body string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.URL()+"/api/read?token="+token, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"conversationId":"` + dm.ID + `","seq":1}`); code != http.StatusNoContent {
		t.Fatalf("beacon read: HTTP %d", code)
	}
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReceipt && f.UserID == "bob" && f.ReadSeq == 1
	})
	if code := post(`{"conversationId":"not-mine","seq":1}`); code != http.StatusForbidden {
		t.Fatalf("beacon read of a conversation bob is not in: HTTP %d, want 403", code)
	}
	if code := post(`{"seq":"x"}`); code != http.StatusBadRequest {
		t.Fatalf("malformed beacon: HTTP %d, want 400", code)
	}
}
