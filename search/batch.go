package search

import (
	"context"
	"fmt"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
)

// deletePage is how many documents one round of DeleteSender or DeleteConversation finds and
// deletes: one batch, bounded so an account with a million messages is not held in memory at once.
const deletePage = 1000

// Message is what the index keeps of one stored message. The caller indexes only what a member
// may find: text messages, not tombstones or system messages. ConversationID, Seq and CreatedAt
// (the message's creation time, which never changes) identify the message.
type Message struct {
	ConversationID string
	Seq            int64
	SenderID       string
	CreatedAt      time.Time
	Body           string
}

// docID keys a message's document: its creation time (Unix milliseconds), conversation and seq,
// the numbers zero-padded so that ids sort newest first as a query returns hits (newestFirst).
// The seq is digits only, so the last "/" ends the conversation id, and no two messages share an
// id whatever their conversation ids hold.
func docID(m Message) string {
	return fmt.Sprintf("%013d/%s/%019d", m.CreatedAt.UnixMilli(), m.ConversationID, m.Seq)
}

// Batch is a set of changes applied together with Apply: one disk write for all of them, which is
// what makes indexing keep up with many sends. When a batch changes one message twice, the last
// change wins. A Batch is not safe for concurrent use.
type Batch struct {
	batch *bleve.Batch
}

// NewBatch returns an empty batch for ix.
func (ix *Index) NewBatch() *Batch {
	return &Batch{batch: ix.index.NewBatch()}
}

// Put indexes m, replacing the message's earlier text (an edit) if it was indexed.
func (b *Batch) Put(m Message) error {
	err := b.batch.Index(docID(m), document{
		Conversation: m.ConversationID,
		Seq:          m.Seq,
		Sender:       m.SenderID,
		Created:      m.CreatedAt.UnixMilli(),
		Body:         m.Body,
	})
	if err != nil {
		return fmt.Errorf("index message %d of %s: %w", m.Seq, m.ConversationID, err)
	}
	return nil
}

// Delete removes a message (deleted for everyone): the one with m's ConversationID, Seq and
// CreatedAt; its Body is not needed. Removing one never indexed is no error.
func (b *Batch) Delete(m Message) {
	b.batch.Delete(docID(m))
}

// Progress is how far the index has taken a conversation's messages (every seq up to Seq) and
// changes (every version up to Version), recorded with the batch that took them.
type Progress struct {
	Seq     int64
	Version int64
}

// progressKey names the internal value that holds a conversation's Progress.
func progressKey(conversationID string) []byte {
	return []byte("chatd.search.progress/" + conversationID)
}

// SetProgress records, with the batch's changes, how far the index has taken a conversation.
func (b *Batch) SetProgress(conversationID string, p Progress) {
	b.batch.SetInternal(progressKey(conversationID), fmt.Appendf(nil, "%d/%d", p.Seq, p.Version))
}

// Progress returns how far the index has taken a conversation: zero for one it never took.
func (ix *Index) Progress(conversationID string) (Progress, error) {
	v, err := ix.index.GetInternal(progressKey(conversationID))
	if err != nil {
		return Progress{}, fmt.Errorf("read search progress of %s: %w", conversationID, err)
	}
	var p Progress
	if len(v) > 0 {
		if _, err := fmt.Sscanf(string(v), "%d/%d", &p.Seq, &p.Version); err != nil {
			return Progress{}, fmt.Errorf("read search progress of %s: %q: %w", conversationID, v, err)
		}
	}
	return p, nil
}

// Len is the number of changes in the batch.
func (b *Batch) Len() int {
	return b.batch.Size()
}

// Apply makes the batch's changes, durably: when it returns they are on disk and found by every
// query that starts after. It empties the batch for reuse; after an error the batch still holds
// its changes and may be applied again.
func (ix *Index) Apply(ctx context.Context, b *Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("apply search batch: %w", err)
	}
	n := b.Len()
	// Bleve's batch write takes no context; it is bounded by the batch's size.
	if err := ix.index.Batch(b.batch); err != nil {
		return fmt.Errorf("apply search batch of %d: %w", n, err)
	}
	// A new batch rather than Reset: Bleve's Batch leaves a goroutine that may still be ranging
	// over the old one's map when it returns (found by the race detector).
	b.batch = ix.index.NewBatch()
	return nil
}

// DeleteSender removes every message senderID sent (a deleted account) and returns how many.
func (ix *Index) DeleteSender(ctx context.Context, senderID string) (int, error) {
	n, err := ix.deleteAll(ctx, fieldSender, senderID)
	if err != nil {
		return n, fmt.Errorf("delete messages of sender %s: %w", senderID, err)
	}
	return n, nil
}

// DeleteConversation removes every message of conversationID (a deleted DM) and returns how many.
func (ix *Index) DeleteConversation(ctx context.Context, conversationID string) (int, error) {
	n, err := ix.deleteAll(ctx, fieldConversation, conversationID)
	if err != nil {
		return n, fmt.Errorf("delete messages of conversation %s: %w", conversationID, err)
	}
	return n, nil
}

// deleteAll deletes the documents whose keyword field is value, a page at a time until none is
// left: Bleve has no delete by query. Each page's deletion is visible to the next page's search.
func (ix *Index) deleteAll(ctx context.Context, field, value string) (int, error) {
	match := query.NewTermQuery(value)
	match.SetField(field)
	deleted := 0
	for {
		req := bleve.NewSearchRequestOptions(match, deletePage, 0, false)
		req.Score = bleve.ScoreNone // only the ids are wanted
		res, err := ix.index.SearchInContext(ctx, req)
		if err != nil {
			return deleted, err
		}
		if len(res.Hits) == 0 {
			return deleted, nil
		}
		b := ix.index.NewBatch()
		for _, h := range res.Hits {
			b.Delete(h.ID)
		}
		if err := ix.index.Batch(b); err != nil {
			return deleted, err
		}
		deleted += len(res.Hits)
	}
}
