package sequencer

import (
	"slices"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/storage"
)

// Mentions: the owner finds whom a message mentions (message.Mentions, members only) when it
// stores or edits it, so every client agrees, and keeps per member the seqs of the newest
// messages that mention them (at most storage.MaxMentionSeqs) in the conversation's counter
// document, written with the batch's counters: a member's unread mentions are those seqs after
// their read position. An edit that drops a mention, and a deletion, take the seq back.

// mentionsIn returns the members body mentions.
func mentionsIn(c *conversationState, body string) []string {
	return message.Mentions(body, func(id string) bool { return c.members[id] })
}

// mention records that seq of c mentions user (or no longer does, with add false), for the
// batch's counters.
func (c *conversationState) mention(user string, seq int64, add bool) {
	seqs := c.mentioned[user]
	i, found := slices.BinarySearch(seqs, seq)
	switch {
	case add && !found:
		seqs = storage.AddMention(seqs, seq)
	case !add && found:
		seqs = slices.Delete(slices.Clone(seqs), i, i+1)
	default:
		return
	}
	if c.mentioned == nil {
		c.mentioned = make(map[string][]int64)
	}
	if c.mentionsChanged == nil {
		c.mentionsChanged = make(map[string]bool)
	}
	c.mentioned[user], c.mentionsChanged[user] = seqs, true
}

// noteMentions records the mentions of a batch's new messages and changed messages in their
// conversations: a member's own message does not count for them.
func (p *partition) noteMentions(entries []*entry, msgs *batchMessages) {
	for _, e := range entries {
		if m := e.stored; m != nil && e.assigned && e.req.Op == "" {
			if c, ok := p.convs[m.ConversationID]; ok {
				for _, u := range m.Mentions {
					if u != m.SenderID {
						c.mention(u, m.Seq, true)
					}
				}
			}
		}
	}
	for _, bm := range msgs.changed {
		c, ok := p.convs[bm.msg.ConversationID]
		if !ok {
			continue
		}
		for _, u := range without(bm.readMentions, bm.msg.Mentions) {
			c.mention(u, bm.msg.Seq, false)
		}
		for _, u := range without(bm.msg.Mentions, bm.readMentions) {
			if u != bm.msg.SenderID {
				c.mention(u, bm.msg.Seq, true)
			}
		}
	}
}

// changedMentions takes c's members whose mention seqs changed since its counters were written.
func (c *conversationState) changedMentions() map[string][]int64 {
	if len(c.mentionsChanged) == 0 {
		return nil
	}
	out := make(map[string][]int64, len(c.mentionsChanged))
	for u := range c.mentionsChanged {
		out[u] = c.mentioned[u]
	}
	c.mentionsChanged = nil
	return out
}

// without returns the ids of a that are not in b.
func without(a, b []string) []string {
	var out []string
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}

// unwrittenMentions marks the mention seqs of counters that could not be written as changed
// again, so the next batch of their conversations writes them.
func (p *partition) unwrittenMentions(counters map[string]storage.Counters) {
	for id, n := range counters {
		if c, ok := p.convs[id]; ok {
			c.unwritten(n.Mentioned)
		}
	}
}

// unwritten marks the members of mentioned as changed, so that the next raise of c's counters
// writes their mention seqs.
func (c *conversationState) unwritten(mentioned map[string][]int64) {
	for u := range mentioned {
		if c.mentionsChanged == nil {
			c.mentionsChanged = make(map[string]bool)
		}
		c.mentionsChanged[u] = true
	}
}

// unmention takes seqs made tombstones (a deleted account's messages) out of every member's
// mentions.
func (c *conversationState) unmention(seqs []int64) {
	for u, mine := range c.mentioned {
		for _, seq := range mine {
			if slices.Contains(seqs, seq) {
				c.mention(u, seq, false)
			}
		}
	}
}
