package search

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search"
	htmlhighlighter "github.com/blevesearch/bleve/v2/search/highlight/highlighter/html"
	"github.com/blevesearch/bleve/v2/search/query"
)

// Page sizes of Search.
const (
	// DefaultLimit is the page size when Query.Limit is 0: about a screen of hits.
	DefaultLimit = 20
	// MaxLimit bounds a page: each hit costs a stored-document read and a highlight.
	MaxLimit = 100
)

// Errors Search returns for a query it cannot answer; the caller maps them to an invalid request.
var (
	// ErrNoWords means the query's text has no word to search for (empty, or only punctuation).
	ErrNoWords = errors.New("search text has no words")
	// ErrBadCursor means Query.Cursor is not one Search returned.
	ErrBadCursor = errors.New("malformed search cursor")
)

// newestFirst orders hits by document id, descending: the id starts with the creation time, then
// the conversation and the seq, so this is newest first, one conversation's messages of one
// millisecond by seq, and a total order, so a cursor resumes exactly after its hit. Sorting by the
// id rather than by stored time and seq fields matters for speed: a field sort reads the field's
// doc values for every match, and decoding those was most of a common word's query time over
// 1,000,000 messages (over 100 ms), while the id comes with the match.
var newestFirst = []string{"-_id"}

// The stored fields a hit returns; the body comes back only as its snippet.
var hitFields = []string{fieldConversation, fieldSeq, fieldSender, fieldCreated}

// Query is one search.
type Query struct {
	// Text is the words to find; a message matches when it holds all of them.
	Text string
	// Conversations are the conversations the asker may search: their memberships now. No hit
	// ever comes from another conversation; none given finds nothing.
	Conversations []string
	// Conversation, if set, restricts the search to this one of Conversations; one not among
	// them finds nothing.
	Conversation string
	// After, per conversation, leaves out its messages up to that seq: those the asker deleted
	// for themselves (their history there starts after it).
	After map[string]int64
	// Cursor continues after the page that returned it; empty for the newest hits.
	Cursor string
	// Limit is the page size: 0 means DefaultLimit, more than MaxLimit means MaxLimit.
	Limit int
}

// Page is one page of hits, newest first.
type Page struct {
	Hits []Hit
	// Next is the Cursor of the following page; empty when this page is the last. A full page
	// always has one, so the page after it may be empty.
	Next string
}

// Hit is one message that matched.
type Hit struct {
	ConversationID string
	Seq            int64
	SenderID       string
	CreatedAt      time.Time
	// Snippet is the part of the body around the matched words.
	Snippet []Run
}

// Run is a stretch of a snippet's plain text, matched or not. The text is never markup: a page
// renders each run as text (a matched one inside <mark>), so a body cannot inject HTML.
type Run struct {
	Text  string
	Match bool
}

// Search returns one page of the messages in the asker's conversations that hold every word of
// q.Text, newest first.
func (ix *Index) Search(ctx context.Context, q Query) (Page, error) {
	words, err := ix.words(q.Text)
	if err != nil {
		return Page{}, err
	}
	var after []string
	if q.Cursor != "" {
		if after, err = decodeCursor(q.Cursor); err != nil {
			return Page{}, err
		}
	}
	conversations := q.Conversations
	if q.Conversation != "" {
		if !slices.Contains(q.Conversations, q.Conversation) {
			return Page{}, nil
		}
		conversations = []string{q.Conversation}
	}
	if len(conversations) == 0 {
		return Page{}, nil
	}
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = DefaultLimit
	case limit > MaxLimit:
		limit = MaxLimit
	}

	// Two searches: the page's ids first, with no scoring and no term vectors, which lets Bleve
	// turn the conversations' disjunction into one bitmap union (with term vectors, which the
	// highlighter needs, it advances one iterator per conversation for every candidate: 100 ms
	// for 1,000 conversations over 1,000,000 messages); then only those messages again, with
	// their stored fields and highlights.
	ids := bleve.NewSearchRequestOptions(query.NewConjunctionQuery([]query.Query{words, inAny(conversations)}), limit, 0, false)
	ids.Score = bleve.ScoreNone // ordered by time, so relevance would be computed for nothing
	ids.SortBy(newestFirst)
	// The messages q.After leaves out are dropped from what the search found, by the seq their
	// ids carry (rare: conversations deleted for oneself; indexing seqs for a range query would
	// have doubled the index), and the search goes on after them for at most filterRounds pages.
	var kept search.DocumentMatchCollection
	more := false
	for round := 0; round < filterRounds && len(kept) < limit; round++ {
		ids.SearchAfter = after
		found, err := ix.index.SearchInContext(ctx, ids)
		if err != nil {
			return Page{}, fmt.Errorf("search %d conversations: %w", len(conversations), err)
		}
		for _, h := range found.Hits {
			after = []string{h.ID}
			if visible(h.ID, q.After) {
				if kept = append(kept, h); len(kept) == limit {
					break
				}
			}
		}
		more = len(found.Hits) == limit
		if !more {
			break
		}
	}
	var page Page
	if len(kept) > 0 {
		if page, err = ix.hits(ctx, kept, words); err != nil {
			return Page{}, err
		}
	}
	if more {
		page.Next = encodeCursor(after[0])
	}
	return page, nil
}

// filterRounds bounds the pages one Search reads past the messages q.After leaves out; a page
// may then hold fewer hits than asked, with a cursor for the next.
const filterRounds = 4

// visible reports whether the message of document id is not left out by after: its seq is past
// the one after names for its conversation. The id is time/conversation/seq (docID), the seq
// always its last 19 digits.
func visible(id string, after map[string]int64) bool {
	if len(after) == 0 || len(id) < 35 {
		return true
	}
	seq, err := strconv.ParseInt(id[len(id)-19:], 10, 64)
	return err != nil || seq > after[id[14:len(id)-20]]
}

// hits reads the page of found documents with their stored fields and highlights. A message
// deleted since the first search is left out, and the page's cursor still follows the first.
func (ix *Index) hits(ctx context.Context, found search.DocumentMatchCollection, words query.Query) (Page, error) {
	ids := make([]string, len(found))
	for i, h := range found {
		ids[i] = h.ID
	}
	req := bleve.NewSearchRequestOptions(query.NewConjunctionQuery([]query.Query{query.NewDocIDQuery(ids), words}), len(ids), 0, false)
	req.Score = bleve.ScoreNone
	req.SortBy(newestFirst)
	req.Fields = hitFields
	req.Highlight = bleve.NewHighlightWithStyle(htmlhighlighter.Name)
	req.Highlight.AddField(fieldBody)
	res, err := ix.index.SearchInContext(ctx, req)
	if err != nil {
		return Page{}, fmt.Errorf("highlight %d search hits: %w", len(ids), err)
	}
	page := Page{Hits: make([]Hit, 0, len(res.Hits))}
	for _, h := range res.Hits {
		hit := hitOf(h.Fields)
		if fragments := h.Fragments[fieldBody]; len(fragments) > 0 {
			hit.Snippet = runsOf(fragments[0])
		}
		page.Hits = append(page.Hits, hit)
	}
	return page, nil
}

// words is the query on the body: every word of text, analysed as bodies are.
func (ix *Index) words(text string) (query.Query, error) {
	analyzer := ix.index.Mapping().AnalyzerNamed(bodyAnalyzer)
	if analyzer == nil {
		return nil, fmt.Errorf("search: analyzer %s not registered", bodyAnalyzer)
	}
	if len(analyzer.Analyze([]byte(text))) == 0 {
		return nil, ErrNoWords
	}
	m := query.NewMatchQuery(text)
	m.SetField(fieldBody)
	m.SetOperator(query.MatchQueryOperatorAnd)
	return m, nil
}

// inAny matches the documents of any of the conversations.
func inAny(conversations []string) query.Query {
	terms := make([]query.Query, len(conversations))
	for i, c := range conversations {
		t := query.NewTermQuery(c)
		t.SetField(fieldConversation)
		terms[i] = t
	}
	return query.NewDisjunctionQuery(terms)
}

// hitOf reads a hit's stored fields, as Bleve returns them: strings, and numbers as float64 (exact
// below 2^53, far above any seq or Unix millisecond).
func hitOf(fields map[string]any) Hit {
	conversation, _ := fields[fieldConversation].(string)
	sender, _ := fields[fieldSender].(string)
	seq, _ := fields[fieldSeq].(float64)
	created, _ := fields[fieldCreated].(float64)
	return Hit{ConversationID: conversation, Seq: int64(seq), SenderID: sender, CreatedAt: time.UnixMilli(int64(created))}
}

// The marks Bleve's html highlighter puts around matched words. It escapes the text between them,
// so in its output these strings are always marks, never a body's own text.
const (
	markOpen  = "<mark>"
	markClose = "</mark>"
)

// runsOf turns a fragment of Bleve's html highlighter back into plain text runs, joining
// neighbouring matches (a CJK word is matched as several overlapping unigrams and bigrams).
func runsOf(fragment string) []Run {
	var runs []Run
	add := func(text string, match bool) {
		if text == "" {
			return
		}
		text = html.UnescapeString(text)
		if n := len(runs); n > 0 && runs[n-1].Match == match {
			runs[n-1].Text += text
			return
		}
		runs = append(runs, Run{Text: text, Match: match})
	}
	for fragment != "" {
		plain, rest, found := strings.Cut(fragment, markOpen)
		add(plain, false)
		if !found {
			break
		}
		matched, rest, _ := strings.Cut(rest, markClose)
		add(matched, true)
		fragment = rest
	}
	return runs
}

// A cursor is the last hit's sort value (Bleve's search-after key: its document id), opaque to
// the caller.
func encodeCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}

func decodeCursor(cursor string) ([]string, error) {
	id, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	if len(id) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadCursor)
	}
	return []string{string(id)}, nil
}
