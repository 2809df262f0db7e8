package sequencer

import (
	"context"
	"time"

	"github.com/chatd/chatd/storage"
)

// Running ahead of the counters. A counter raise is the dearest statement a send costs on the
// embedded store (storage/ahead.go), so the owner of a busy conversation raises its counters at
// most once every aheadFor. A raise that stores new messages within aheadFor of the
// conversation's previous batch opens them (Counters.Ahead); the batches of plain new messages
// that follow within aheadFor of the opening, up to maxAhead messages, are stored and acked
// with no raise, and readers fold those messages in from their claims. What they would have
// raised is kept (conversationState.ahead) and goes with the conversation's next raise. Any
// other batch raises at once, and once a conversation has had no batch for aheadFor its counters
// are closed (closeCounters), so that readers stop looking past them. A quiet conversation's
// batch raises and closes them in one statement, as before: opening them would cost a second
// statement to close them.

const (
	// aheadFor is how long a conversation's counters may stay open before a batch raises them
	// again, and how long a conversation stays quiet before they are closed.
	aheadFor = 100 * time.Millisecond
	// maxAhead bounds the messages stored after the counters' lastSeq: what a reader folds in.
	maxAhead = 8
)

// aheadState is what the owner knows of a conversation's counters beyond their raised values.
type aheadState struct {
	// ahead is what the batches stored since the last raise would have raised, counting aheadN
	// new messages: it goes with the next raise.
	ahead  storage.Counters
	aheadN int
	// opened is when this owner last opened the counters; zero when it has not, or when it does
	// not know them open.
	opened time.Time
	// lastBatch is when a batch last stored or changed something of the conversation.
	lastBatch time.Time
}

// holdBack reports whether n, what a batch storing fresh new messages in c (and nothing else of
// it) raises, may wait for a later raise: it is then kept in c.ahead.
func (c *conversationState) holdBack(n storage.Counters, fresh int, now time.Time) bool {
	if fresh == 0 || c.opened.IsZero() || now.Sub(c.opened) >= aheadFor || c.aheadN+fresh > maxAhead {
		return false
	}
	c.ahead, c.aheadN = merged(c.ahead, n), c.aheadN+fresh
	return true
}

// withAhead returns n with what c holds back: the raise writes all of it.
func (c *conversationState) withAhead(n storage.Counters) storage.Counters {
	held := c.ahead
	c.ahead, c.aheadN = storage.Counters{}, 0
	return merged(held, n)
}

// merged returns the counters raised by a and then b.
func merged(a, b storage.Counters) storage.Counters {
	a.LastSeq, a.LastVersion = max(a.LastSeq, b.LastSeq), max(a.LastVersion, b.LastVersion)
	if b.Newest != nil && (a.Newest == nil || b.Newest.Seq > a.Newest.Seq) {
		a.Newest = b.Newest
	}
	for u, seq := range b.Senders {
		if a.Senders == nil {
			a.Senders = make(map[string]int64, len(b.Senders))
		}
		a.Senders[u] = max(a.Senders[u], seq)
	}
	a.Changed = append(a.Changed, b.Changed...)
	if b.Mentioned != nil {
		a.Mentioned = b.Mentioned
	}
	a.Ahead = b.Ahead
	return a
}

// raised takes the outcome of a raise of counters. A raise that failed leaves what it would have
// raised held back, for the next one, and the counters not known open: the conversation's next
// batch raises again, and a quiet one is closed by closeCounters.
func (p *partition) raised(counters map[string]storage.Counters, err error, now time.Time) {
	if err != nil {
		p.unwrittenMentions(counters)
	}
	for id, n := range counters {
		c, ok := p.convs[id]
		switch {
		case !ok:
			delete(p.open, id)
		case err != nil:
			n.Mentioned, n.Changed, n.Ahead = nil, nil, false
			c.ahead, c.opened = n, time.Time{}
			p.open[id] = true
		case n.Ahead:
			c.opened = now
			p.open[id] = true
		default:
			c.opened = time.Time{}
			delete(p.open, id)
		}
	}
}

// closeCounters closes the counters of the conversations this owner opened (or found open) and
// has had no batch of for aheadFor, with what they hold back, so that their readers stop looking
// past lastSeq. An owner that stops leaves them open (a store that is down would hold up the
// handover): the next owner closes them when it loads the conversation.
func (p *partition) closeCounters() {
	now := time.Now()
	counters := make(map[string]storage.Counters)
	for id := range p.open {
		c, ok := p.convs[id]
		if !ok {
			delete(p.open, id)
			continue
		}
		if now.Sub(c.lastBatch) < aheadFor {
			continue
		}
		n := c.withAhead(storage.Counters{LastSeq: c.lastSeq, LastVersion: c.lastVersion})
		n.Mentioned = c.changedMentions()
		counters[id] = n
	}
	if len(counters) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.seq.cfg.FlushTimeout)
	defer cancel()
	err := p.seq.store.AdvanceCounters(ctx, counters)
	if err != nil {
		p.seq.log.Warn().Err(err).Int("partition", p.id).Int("conversations", len(counters)).
			Msg("close counters; readers look past them until a later raise")
	}
	p.raised(counters, err, now)
}
