package push

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
)

// window is a conversation's messages gathered since its first one, until the window ends and one
// notification per member is worked out from them.
type window struct {
	conversationID string
	msgs           []protocol.Message // text messages, in seq order
	deleted        map[int64]bool     // of msgs, those deleted for everyone since
	// members are the conversation's members as the owner had them at the newest message; nil
	// when it did not know them (deliver then reads the conversation first).
	members []string
	timer   *time.Timer
}

// Stored gathers a stored message into its conversation's window, opening one (and its timer) for
// the first. Only text messages notify; a seq heard again (a retry, a republish) is dropped here
// or, after its window ended, by the notice of each member (deliver).
func (n *Notifier) Stored(m protocol.Message, members []string) {
	if m.Kind != protocol.KindText {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	w, ok := n.open[m.ConversationID]
	if !ok {
		if len(n.open) >= n.cfg.MaxOpen {
			n.cfg.Metrics.dropped()
			return
		}
		w = &window{conversationID: m.ConversationID, deleted: make(map[int64]bool)}
		n.open[m.ConversationID] = w
		w.timer = time.AfterFunc(n.cfg.Window, func() { n.close(w) })
	}
	if len(w.msgs) > 0 && m.Seq <= w.msgs[len(w.msgs)-1].Seq {
		return
	}
	w.msgs = append(w.msgs, m)
	w.members = members
}

// Changed notes a deletion for everyone of a message still gathering (it is not notified), and
// an edit's new text and mentions (the notification shows the text, and a member who hears only
// mentions hears of the message only if the text mentions them when the window ends).
// Deletions after the window ended are caught by the conversation's deleted seqs, read when the
// notification is worked out.
func (n *Notifier) Changed(c sequencer.Change) {
	if c.Op != message.OpDelete && c.Op != message.OpEdit {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.open[c.ConversationID]
	if !ok {
		return
	}
	if c.Op == message.OpDelete {
		w.deleted[c.Seq] = true
		return
	}
	if i, found := slices.BinarySearchFunc(w.msgs, c.Seq, func(m protocol.Message, seq int64) int { return cmp.Compare(m.Seq, seq) }); found {
		w.msgs[i].Body, w.msgs[i].Mentions = c.Body, c.Mentions
	}
}

// close ends w's window and queues the work of its notifications.
func (n *Notifier) close(w *window) {
	n.mu.Lock()
	if n.stopped || n.open[w.conversationID] != w {
		n.mu.Unlock()
		return
	}
	delete(n.open, w.conversationID)
	n.mu.Unlock()
	n.enqueue(func(ctx context.Context) { n.deliver(ctx, w) })
}
