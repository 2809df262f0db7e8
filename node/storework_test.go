package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestSendsCostTwoStoreWritesPerBatch: twenty members sending at once into one group cost the
// store, per batch of sends, one insert of the messages' claims (which hold them) and at most one
// update of the conversation's counters (fewer while its owner runs ahead of them), one insert
// per bucket they fill, and no read-cursor write at all (the senders' read positions ride in the
// counters' update), nor any write of the conversation's own document with its member list; yet
// each sender has read up to their own newest message, as their badge, computed from the store,
// shows.
func TestSendsCostTwoStoreWritesPerBatch(t *testing.T) {
	const senders, each = 20, 5
	env, n, rec := monitoredNode(t, func(cfg *node.Config) { cfg.Sequencer.Partitions = rtPartitions })
	store := testenv.OpenStore(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	ctx := ctxT(t, 2*time.Minute)

	ids := make([]string, senders)
	tokens := make(map[string]string)
	for i := range ids {
		ids[i] = fmt.Sprintf("sender-%02d", i)
		tokens[ids[i]] = login(t, n, ids[i])
	}
	group := storage.Conversation{ID: "busy-group", Kind: storage.KindGroup, Name: "busy", Members: ids,
		CreatedBy: ids[0], CreatedAt: time.Now().UTC()}
	if _, err := store.EnsureConversation(ctx, group); err != nil {
		t.Fatalf("store the group: %v", err)
	}
	conns := make(map[string]*client.Conn)
	for _, id := range ids {
		conns[id] = dialWith(t, n, tokens[id], nil)
	}

	rec.Reset()
	var wg sync.WaitGroup
	lastOwn := make(map[string]int64)
	var mu sync.Mutex
	for _, id := range ids {
		wg.Go(func() {
			for i := range each {
				ack, err := conns[id].Send(ctx, group.ID, fmt.Sprintf("%s #%d", id, i))
				if err != nil {
					t.Errorf("%s: send %d: %v", id, i, err)
					return
				}
				mu.Lock()
				lastOwn[id] = max(lastOwn[id], ack.Seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Receipts write the conversation's pending read-cursor moves before they count: any cursor
	// move the sends had left pending is written now, and recorded.
	if _, err := conns[ids[0]].Request(ctx, protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: group.ID, Seq: 1}); err != nil {
		t.Fatalf("receipts: %v", err)
	}
	writes := map[string]int{}
	for _, c := range rec.Writes("") {
		writes[c.Name+" "+c.Collection]++
	}
	inserts, seals, updates := writes["insert messageClaims"], writes["insert messageBuckets"], writes["update conversationCounters"]
	t.Logf("%d sends from %d senders: %d batches (claim inserts), store writes %v", senders*each, senders, inserts, writes)
	if writes["update readCursors"] > 0 || writes["insert readCursors"] > 0 {
		t.Errorf("the sends wrote read cursors (%v); want none: a sender's position is stored with the batch", writes)
	}
	if inserts == 0 || updates == 0 || updates > inserts {
		t.Errorf("%d claim inserts and %d counter updates; want one insert per batch, and at most one update", inserts, updates)
	}
	if seals != senders*each/storage.BucketSize || writes["update messageBuckets"] > 0 {
		t.Errorf("%d buckets sealed, %d bucket updates; want one insert per full bucket and nothing else", seals, writes["update messageBuckets"])
	}
	if n := writes["update conversations"]; n > 0 {
		t.Errorf("the sends rewrote the conversation's document, members and all, %d times; want its counters written apart", n)
	}

	last := int64(senders * each)
	for _, id := range ids {
		var badge struct{ Total int64 }
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/api/badge", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokens[id])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&badge)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("badge of %s: %v", id, err)
		}
		if want := last - lastOwn[id]; badge.Total != want {
			t.Errorf("%s, whose newest message is %d of %d, has %d unread; want %d", id, lastOwn[id], last, badge.Total, want)
		}
	}
}

// TestFirstConnectReadsTheStoreOnce: a new user signs in, connects and syncs (the client syncs as
// it connects) with one write of their account and one read each of it and of their
// conversations: the connect finds the account the sign-in stored, and with no conversation there
// are no read positions to read and nothing to list again. A later sync reads the list again.
func TestFirstConnectReadsTheStoreOnce(t *testing.T) {
	env, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, time.Minute)
	sent := func() []string {
		var got []string
		for _, cmd := range rec.Commands("", "") {
			// Presence is written apart, in batches, whenever a batch is due.
			if cmd.Collection != "" && cmd.Collection != "presence" && cmd.Collection != "presenceNodes" {
				got = append(got, cmd.Name+" "+cmd.Collection)
			}
		}
		return got
	}
	rec.Reset()
	c := connectReady(t, n, "newcomer")
	want := []string{"findAndModify users", "find users", "find memberships"}
	if got := sent(); !slices.Equal(got, want) {
		t.Fatalf("a first sign-in, connect and sync sent the store %v; want %v", got, want)
	}
	if _, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got, want := sent(), append(want, "find memberships"); !slices.Equal(got, want) {
		t.Fatalf("after a second sync the store was sent %v; want %v", got, want)
	}

	// Signed in on another node, so this node's account check reads the account: the load of
	// the user's state takes it from the check instead of reading it again.
	elsewhere := env.NodeConfig()
	elsewhere.NodeID = "elsewhere"
	token := login(t, testenv.StartNode(t, elsewhere), "traveller")
	rec.Reset()
	dialWith(t, n, token, nil)
	if got, want := sent(), []string{"find users", "find memberships"}; !slices.Equal(got, want) {
		t.Fatalf("a connect whose check read the account sent the store %v; want %v", got, want)
	}
}
