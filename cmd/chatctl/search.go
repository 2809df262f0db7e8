package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/chatd/chatd/protocol"
)

// runSearch prints one page of search hits: "<conversation> #seq time sender: snippet" with the
// matched words in [brackets], then the cursor of the next page on stderr, if any.
func runSearch(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("search")
	in := fs.String("in", "", "search only this conversation")
	limit := fs.Int("limit", 0, fmt.Sprintf("hits per page (default %d, at most %d)", protocol.DefaultSearchHits, protocol.MaxSearchHits))
	cursor := fs.String("cursor", "", "continue after the page that printed this cursor")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	req := protocol.ClientFrame{Type: protocol.TypeSearch, Query: strings.Join(pos, " "), ConversationID: *in, Cursor: *cursor, Limit: *limit}
	return c.answer(ctx, req,
		func(r protocol.ServerFrame) any {
			return struct {
				Hits   []protocol.SearchHit `json:"hits"`
				Cursor string               `json:"cursor,omitempty"`
			}{orEmpty(hitsOf(r)), r.Cursor}
		},
		func(ctx context.Context, s *session, r protocol.ServerFrame) {
			hits := hitsOf(r)
			senders := make([]string, len(hits))
			for i, h := range hits {
				senders[i] = h.SenderID
			}
			c.learnNames(ctx, s.conn, senders...)
			for _, h := range hits {
				var snippet strings.Builder
				for _, run := range h.Snippet {
					if run.Match {
						fmt.Fprintf(&snippet, "[%s]", run.Text)
					} else {
						snippet.WriteString(run.Text)
					}
				}
				fmt.Fprintf(c.stdout, "%s #%d %s %s: %s\n", h.ConversationID, h.Seq, h.CreatedAt.Local().Format(time.DateTime),
					c.names.show(h.SenderID), strings.ReplaceAll(snippet.String(), "\n", " "))
			}
			if r.Cursor != "" {
				fmt.Fprintf(c.stderr, "more: chatctl search -cursor %s %s\n", r.Cursor, req.Query)
			}
		})
}

// hitsOf is the list a search_results reply carries.
func hitsOf(r protocol.ServerFrame) []protocol.SearchHit {
	if r.Hits == nil {
		return nil
	}
	return *r.Hits
}
