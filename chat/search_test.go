package chat

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/search"
)

// fakeSearcher answers every search with the hits it holds and records the queries it got.
type fakeSearcher struct {
	mu      sync.Mutex
	hits    []search.Hit
	queries []search.Query
}

func (f *fakeSearcher) Search(_ context.Context, q search.Query) (search.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if q.Text == "?" {
		return search.Page{}, search.ErrNoWords
	}
	return search.Page{Hits: slices.Clone(f.hits)}, nil
}

func (f *fakeSearcher) ForgetAccount(string, []string) error { return nil }

// TestSearchAsksForWhatTheUserMaySee: a search names the asker's conversations now (not one they
// left), and, for a conversation they deleted for themselves, the seq their history starts after;
// hits of a deleted account are left out; a conversation they are not in is refused, and so is
// a query the index finds no words in.
func TestSearchAsksForWhatTheUserMaySee(t *testing.T) {
	searcher := &fakeSearcher{}
	ts := newTestServiceWith(t, Config{Search: searcher}, hub.Config{})
	ts.connect("alice")
	ts.connect("bob")
	ts.connect("carol")
	dm := ts.dm("alice", "bob")
	g := ts.group("alice", "bob", "carol")
	left := ts.group("carol", "alice")
	ts.send("bob", dm, "hello")
	if err := ts.svc.HideConversation(ts.ctx, "alice", dm); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.RemoveMember(ts.ctx, "alice", left, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.DeleteAccount(ts.ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	searcher.hits = []search.Hit{
		{ConversationID: g, Seq: 2, SenderID: "carol", CreatedAt: time.Now()},
		{ConversationID: g, Seq: 1, SenderID: "bob", CreatedAt: time.Now(), Snippet: []search.Run{{Text: "hello", Match: true}}},
	}
	page, err := ts.svc.Search(ts.ctx, "alice", SearchRequest{Query: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Hits) != 1 || page.Hits[0].SenderID != "bob" || !slices.Equal(page.Hits[0].Snippet, []protocol.SnippetRun{{Text: "hello", Match: true}}) {
		t.Errorf("hits %+v; want bob's only, with its snippet (carol's account is gone)", page.Hits)
	}
	q := searcher.queries[0]
	slices.Sort(q.Conversations)
	want := []string{dm, g}
	slices.Sort(want)
	if !slices.Equal(q.Conversations, want) || q.After[dm] != 1 || q.After[g] != 0 || q.Limit != protocol.DefaultSearchHits {
		t.Errorf("query %+v; want the DM (after seq 1) and the group, not the group alice left, a page of %d", q, protocol.DefaultSearchHits)
	}
	_, err = ts.svc.Search(ts.ctx, "alice", SearchRequest{Query: "hello", ConversationID: left})
	wantKind(t, "a conversation alice left", err, protocol.ErrNotMember)
	_, err = ts.svc.Search(ts.ctx, "alice", SearchRequest{Query: "?"})
	wantKind(t, "a query without words", err, protocol.ErrInvalid)
}
