package chat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/search"
	"github.com/chatd/chatd/storage"
)

// Search: a user finds the messages they may see by their words. The node's index (package
// indexing) holds every conversation's text messages; the service limits each search to what
// the asker may see now, from what it keeps of them while they are connected: the conversations
// they are a member of (so leaving, or being removed, takes effect at once), and in each the
// seqs after those they deleted for themselves. Tombstones and edits are the index's to follow;
// a deleted account's messages leave every node's index (ForgetAccount), and until they have,
// its hits are left out here.

// Searcher answers searches from the node's index and removes a deleted account's messages
// from every node's; the indexing package implements it.
type Searcher interface {
	Search(ctx context.Context, q search.Query) (search.Page, error)
	ForgetAccount(userID string, conversations []string) error
}

// SearchRequest is one search as the asker gives it.
type SearchRequest struct {
	Query string
	// ConversationID, if set, searches only that conversation.
	ConversationID string
	Cursor         string
	Limit          int
}

// SearchPage is one page of hits, newest first, and the cursor of the next page ("" on the last).
type SearchPage struct {
	Hits []protocol.SearchHit
	Next string
}

// Search returns a page of the messages userID may see that hold every word of req.Query.
func (s *Service) Search(ctx context.Context, userID string, req SearchRequest) (SearchPage, error) {
	if s.cfg.Search == nil {
		return SearchPage{}, protocol.Refuse(protocol.ErrUnavailable, "search is not enabled on this server")
	}
	q := search.Query{Text: req.Query, Conversation: req.ConversationID, Cursor: req.Cursor,
		Limit: cmp.Or(req.Limit, protocol.DefaultSearchHits)}
	if u := s.online(userID); u != nil {
		u.mu.Lock()
		for id, p := range u.positions {
			q.Conversations = append(q.Conversations, id)
			if p.hiddenSeq > 0 {
				if q.After == nil {
					q.After = make(map[string]int64)
				}
				q.After[id] = p.hiddenSeq
			}
		}
		u.mu.Unlock()
	}
	if req.ConversationID != "" && !slices.Contains(q.Conversations, req.ConversationID) {
		return SearchPage{}, protocol.ErrNotMember
	}
	page, err := s.cfg.Search.Search(ctx, q)
	switch {
	case errors.Is(err, search.ErrNoWords):
		return SearchPage{}, protocol.Refuse(protocol.ErrInvalid, "query has no words to search for")
	case errors.Is(err, search.ErrBadCursor):
		return SearchPage{}, protocol.Refuse(protocol.ErrInvalid, "cursor is not one a search returned")
	case err != nil:
		return SearchPage{}, fmt.Errorf("search for %s: %w", userID, err)
	}
	gone, err := s.deletedSenders(ctx, page.Hits)
	if err != nil {
		return SearchPage{}, err
	}
	out := SearchPage{Hits: make([]protocol.SearchHit, 0, len(page.Hits)), Next: page.Next}
	for _, h := range page.Hits {
		if gone[h.SenderID] {
			continue
		}
		hit := protocol.SearchHit{ConversationID: h.ConversationID, Seq: h.Seq, SenderID: h.SenderID, CreatedAt: h.CreatedAt.UTC(),
			Snippet: make([]protocol.SnippetRun, len(h.Snippet))}
		for i, r := range h.Snippet {
			hit.Snippet[i] = protocol.SnippetRun{Text: r.Text, Match: r.Match}
		}
		out.Hits = append(out.Hits, hit)
	}
	return out, nil
}

// deletedSenders returns which senders of hits have deleted their account: their messages are
// being removed from every index, and a node that was down meanwhile learns it only here.
func (s *Service) deletedSenders(ctx context.Context, hits []search.Hit) (map[string]bool, error) {
	gone := make(map[string]bool)
	var senders []string
	for _, h := range hits {
		if !slices.Contains(senders, h.SenderID) {
			senders = append(senders, h.SenderID)
		}
	}
	if len(senders) == 0 {
		return gone, nil
	}
	users, err := s.store.Profiles(ctx, senders)
	if err != nil {
		return nil, fmt.Errorf("check the senders of search hits: %w", err)
	}
	known := make(map[string]bool, len(users))
	for _, u := range users {
		known[u.ID] = u.DeletedAt == nil
	}
	for _, id := range senders {
		gone[id] = !known[id]
	}
	return gone, nil
}

// forgetInSearch removes a deleted account's messages, and its DMs, from every node's index.
func (s *membership) forgetInSearch(userID string, deleted storage.DeletedAccount) error {
	if s.cfg.Search == nil {
		return nil
	}
	dms := make([]string, len(deleted.DMs))
	for i, dm := range deleted.DMs {
		dms[i] = dm.ID
	}
	return s.cfg.Search.ForgetAccount(userID, dms)
}
