package node_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file pin down search as users see it: two real nodes, each with its own
// index fed over real NATS, the store over TCP, real WebSockets. A hit shows up on both nodes, and
// only for those who may see it now.

// editDeadline is how soon an edit must be found by its new text, on any node (issue 35).
const editDeadline = time.Second

// srNodes starts two nodes, each with a search index of its own.
func srNodes(t *testing.T) (a, b *testenv.Node) {
	t.Helper()
	_, nodes := rtNodes(t, 2, func(cfg *node.Config) { cfg.SearchDir = filepath.Join(t.TempDir(), "search") })
	return nodes[0], nodes[1]
}

// srFind returns the hits of one search by c's user, as conversation/seq, newest first.
func srFind(t *testing.T, c *client.Conn, query, conv string) ([]string, error) {
	t.Helper()
	r, err := c.Request(ctxT(t, 10*time.Second), protocol.ClientFrame{Type: protocol.TypeSearch, Query: query, ConversationID: conv})
	if err != nil {
		return nil, err
	}
	if r.Type != protocol.TypeSearchResults || r.Hits == nil {
		t.Fatalf("search answered %+v; want search_results with hits", r)
	}
	out := make([]string, 0, len(*r.Hits))
	for _, h := range *r.Hits {
		out = append(out, fmt.Sprintf("%s/%d", h.ConversationID, h.Seq))
	}
	return out, nil
}

// srWait polls until the search by c's user finds exactly want, within timeout.
func srWait(t *testing.T, who string, c *client.Conn, query string, timeout time.Duration, want ...string) {
	t.Helper()
	var got []string
	err := testenv.Poll(timeout, 20*time.Millisecond, func() error {
		var err error
		if got, err = srFind(t, c, query, ""); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("found %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s searching %q: want %v: %v", who, query, want, err)
	}
}

func key(conv string, seq int64) string { return fmt.Sprintf("%s/%d", conv, seq) }

// TestSearchFindsTheSameOnEveryNode: a group's messages are found by its members on either node,
// in any script (a Japanese word inside a sentence, an Arabic word behind its attached article),
// newest first, with the matched word marked in a plain-text snippet; a non-member finds
// nothing and is refused the conversation; an edit is found by its new text and not its old one
// within a second, on both nodes.
func TestSearchFindsTheSameOnEveryNode(t *testing.T) {
	a, b := srNodes(t)
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, a, "alice")
	bob := connectReady(t, b, "bob")
	eve := connectReady(t, b, "eve")
	g, err := alice.CreateGroup(ctx, "plans", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, body := range []string{"The quarterly BUDGET is ready", "明日東京に行きます", "مرحبا بالعالم", "budget meeting at noon"} {
		ack, err := alice.Send(ctx, g.ID, body)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Seq)
	}
	first, japanese, arabic, last := key(g.ID, seqs[0]), key(g.ID, seqs[1]), key(g.ID, seqs[2]), key(g.ID, seqs[3])
	srWait(t, "bob (node B)", bob, "budget", 10*time.Second, last, first)
	srWait(t, "alice (node A)", alice, "budget", 10*time.Second, last, first)
	srWait(t, "bob", bob, "東京", 10*time.Second, japanese)
	srWait(t, "alice", alice, "العالم", 10*time.Second, arabic)

	r, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSearch, Query: "quarterly"})
	if err != nil {
		t.Fatal(err)
	}
	if hits := *r.Hits; len(hits) != 1 || hits[0].SenderID != "alice" || hits[0].CreatedAt.IsZero() ||
		!slices.Contains(hits[0].Snippet, protocol.SnippetRun{Text: "quarterly", Match: true}) {
		t.Errorf("hit = %+v; want alice's message with quarterly marked", hits)
	}

	if got, err := srFind(t, eve, "budget", ""); err != nil || len(got) != 0 {
		t.Errorf("eve, not a member, found %v (%v); want nothing", got, err)
	}
	_, err = srFind(t, eve, "budget", g.ID)
	wantCode(t, "eve searching the group", err, protocol.CodeNotMember)

	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: g.ID, Seq: seqs[0], Body: "The quarterly forecast is ready"}); err != nil {
		t.Fatal(err)
	}
	srWait(t, "bob (node B) after the edit", bob, "forecast", editDeadline, first)
	srWait(t, "alice (node A) after the edit", alice, "forecast", editDeadline, first)
	srWait(t, "bob, the old word", bob, "budget", editDeadline, last)
	srWait(t, "alice, the old word", alice, "budget", editDeadline, last)
}

// TestSearchShowsOnlyWhatTheAskerMaySee: a message deleted for everyone, the messages of a
// conversation its member deleted for themselves (but not the newer ones), a conversation its
// member left, and the messages of a deleted account are never found, on either node.
func TestSearchShowsOnlyWhatTheAskerMaySee(t *testing.T) {
	a, b := srNodes(t)
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, a, "alice")
	bob := connectReady(t, b, "bob")
	dave := connectReady(t, b, "dave")
	fay := connectReady(t, b, "fay")
	erinConn, erinToken := testenv.ConnectWithToken(t, a.URL(), "erin")
	g, err := alice.CreateGroup(ctx, "walnuts", []string{"bob", "dave", "erin", "fay"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(c *client.Conn, body string) int64 {
		t.Helper()
		ack, err := c.Send(ctx, g.ID, body)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Seq
	}
	gone := send(alice, "walnut one, to be deleted")
	hidden := send(alice, "walnut two, before bob hides")
	erins := send(erinConn, "walnut three, from erin")
	srWait(t, "bob", bob, "walnut", 10*time.Second, key(g.ID, erins), key(g.ID, hidden), key(g.ID, gone))
	srWait(t, "dave", dave, "walnut", 10*time.Second, key(g.ID, erins), key(g.ID, hidden), key(g.ID, gone))

	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: g.ID, Seq: gone}); err != nil {
		t.Fatal(err)
	}
	srWait(t, "bob after the deletion", bob, "walnut", 10*time.Second, key(g.ID, erins), key(g.ID, hidden))
	srWait(t, "alice after the deletion", alice, "walnut", 10*time.Second, key(g.ID, erins), key(g.ID, hidden))

	if _, err := bob.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHideConversation, ConversationID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := srFind(t, bob, "walnut", ""); err != nil || len(got) != 0 {
		t.Errorf("bob found %v (%v) in what he deleted for himself; want nothing", got, err)
	}
	after := send(alice, "walnut four, after bob hid")
	srWait(t, "bob after hiding", bob, "walnut", 10*time.Second, key(g.ID, after))

	if _, err := dave.Request(ctx, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := srFind(t, dave, "walnut", ""); err != nil || len(got) != 0 {
		t.Errorf("dave found %v (%v) after leaving; want nothing", got, err)
	}

	deleteAccount(t, ctx, a, erinToken)
	srWait(t, "alice after erin's account was deleted", alice, "walnut", 10*time.Second, key(g.ID, after), key(g.ID, hidden))
	srWait(t, "fay (node B) after erin's account was deleted", fay, "walnut", 10*time.Second, key(g.ID, after), key(g.ID, hidden))
}

// TestSearchRefusals: a search without words, with a cursor it never returned or with too large
// a page is refused with invalid_field, and the socket stays open.
func TestSearchRefusals(t *testing.T) {
	a, _ := srNodes(t)
	alice := connectReady(t, a, "alice")
	for _, f := range []protocol.ClientFrame{
		{Type: protocol.TypeSearch, Query: "  "},
		{Type: protocol.TypeSearch, Query: "?!"},
		{Type: protocol.TypeSearch, Query: "hello", Cursor: "%%%"},
		{Type: protocol.TypeSearch, Query: "hello", Limit: protocol.MaxSearchHits + 1},
		{Type: protocol.TypeSearch, Query: strings.Repeat("a", protocol.MaxSearchRunes+1)},
	} {
		_, err := alice.Request(ctxT(t, 10*time.Second), f)
		wantCode(t, fmt.Sprintf("search %+v", f), err, protocol.CodeInvalidField)
	}
	if _, err := srFind(t, alice, "hello", ""); err != nil {
		t.Errorf("a search after the refusals: %v", err)
	}
}

// TestSearchIndexCatchesUpAfterDowntime: what was sent and edited while a node was down is found
// on it once it is back, by its text now: the node reads what its index missed from the store.
func TestSearchIndexCatchesUpAfterDowntime(t *testing.T) {
	env := testenv.NewEnv(t)
	withSearch := func(id string) node.Config {
		cfg := env.NodeConfig()
		cfg.NodeID, cfg.Sequencer.Partitions, cfg.SearchDir = id, rtPartitions, filepath.Join(t.TempDir(), "search")
		return cfg
	}
	a := testenv.StartNode(t, withSearch("sr-a"))
	b := testenv.StartRestartableNode(t, withSearch("sr-b"))
	ctx := ctxT(t, time.Minute)
	alice := connectReady(t, a, "alice")
	bobToken := login(t, b, "bob")
	g, err := alice.CreateGroup(ctx, "almonds", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := alice.Send(ctx, g.ID, "almond harvest before")
	if err != nil {
		t.Fatal(err)
	}
	srWait(t, "bob before the downtime", dialWith(t, b, bobToken, nil), "almond", 10*time.Second, key(g.ID, before.Seq))

	b.Stop()
	missed, err := alice.Send(ctx, g.ID, "almond harvest missed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: g.ID, Seq: before.Seq, Body: "pistachio harvest"}); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	bob := dialWith(t, b, bobToken, nil)
	srWait(t, "bob after the downtime", bob, "almond", 10*time.Second, key(g.ID, missed.Seq))
	srWait(t, "bob, the edit made during the downtime", bob, "pistachio", 10*time.Second, key(g.ID, before.Seq))
}
