package storage

import (
	"context"
	"fmt"

	"github.com/chatd/chatd/protocol"
)

// Counters ahead. Raising a conversation's counters (AdvanceCounters) is the dearest statement of
// a send on the embedded store: a read and a write of the counter document, each a transaction,
// where a batch's insert costs a fifth of that per message. So the owner of a busy conversation
// raises them at most every few batches (package sequencer decides when): it stores and acks a
// batch with the counters behind, and every read of a conversation folds in the messages claimed
// after the counters' lastSeq (foldAhead), exactly as the owner's next raise will. A reader
// looks past lastSeq only when the counter document says the owner may be ahead, with two seqs
// raised by $max like the counters themselves:
//   - openedAt: raised to lastSeq by a raise that stores new messages and lets its writer run
//     ahead afterwards (Counters.Ahead);
//   - closedAt: raised to lastSeq by every other raise, whose writer has written all it stored.
//
// The owner may be ahead while openedAt > closedAt. A raise that opens carries seqs claimed after
// every seq stored before it (a seq is claimed once, and a writer that lost its conversation
// cannot claim past its successor), so its lastSeq is above every closedAt written before it,
// a stale owner's late write included: only a writer that has written everything stored so far
// can close it again.

// aheadProbe is how many claims after a conversation's lastSeq one read looks for: the owner
// runs a few messages ahead at most, so one read usually finds them all and the seq after.
const aheadProbe = 4

// ahead reports whether the owner may have stored messages after k.LastSeq (see above).
func (k counterDoc) ahead() bool { return k.OpenedAt > k.ClosedAt }

// foldAhead folds into each of convs whose owner may be ahead of its counters the messages
// claimed after its lastSeq, read by _id aheadProbe at a time until one is not claimed, as the
// owner's next raise will write them: lastSeq, the newest preview, each sender's newest seq and
// each member's mention seqs.
func (s *Store) foldAhead(ctx context.Context, convs []*Conversation) error {
	for len(convs) > 0 {
		var ids []string
		for _, c := range convs {
			for seq := c.LastSeq + 1; seq <= c.LastSeq+aheadProbe; seq++ {
				ids = append(ids, seqClaimID(c.ID, seq))
			}
		}
		claims, err := findByIDs[claimDoc](ctx, s.claims, ids)
		if err != nil {
			return fmt.Errorf("read the messages ahead of the counters of %d conversations: %w", len(convs), err)
		}
		var further []*Conversation
		for _, c := range convs {
			from := c.LastSeq + 1
			for seq := from; seq < from+aheadProbe; seq++ {
				claim, ok := claims[seqClaimID(c.ID, seq)]
				if !ok || claim.Message == nil {
					break
				}
				c.fold(*claim.Message)
			}
			if c.LastSeq == from+aheadProbe-1 {
				further = append(further, c)
			}
		}
		convs = further
	}
	return nil
}

// fold counts m, the message after c.LastSeq, in c's counters.
func (c *Conversation) fold(m Message) {
	c.LastSeq = m.Seq
	preview := m.Preview()
	c.LastMessage = &preview
	if m.Kind != protocol.KindSystem {
		if c.Senders == nil {
			c.Senders = make(map[string]int64)
		}
		c.Senders[m.SenderID] = m.Seq
	}
	for _, u := range m.Mentions {
		if u == m.SenderID {
			continue
		}
		if c.Mentioned == nil {
			c.Mentioned = make(map[string][]int64)
		}
		c.Mentioned[u] = AddMention(c.Mentioned[u], m.Seq)
	}
}
