package sequencer

import (
	"time"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/storage"
)

// Changes of a stored message (SendRequest.Op and Change.Op are message.OpEdit, OpDelete, OpReact
// or OpUnreact) go through the conversation's owner, like sends, so that the changes of one
// message happen in one order (an edit after a delete is refused, whatever node each came from)
// and each gets the next change number (version) of its conversation. The rules of a change are
// the message package's (message.Apply); the owner applies them to its batch's copy of the
// message.

// Change is one change of a message as its owner publishes it on the conversation's change
// subject, after it is stored. Version numbers a conversation's changes in the order the owner
// made them.
type Change struct {
	Op             string `json:"op"`
	ConversationID string `json:"conversationId"`
	Seq            int64  `json:"seq"`
	Version        int64  `json:"version"`
	// UserID made the change.
	UserID string `json:"userId"`
	// Body and EditedAt are the new text of an edit.
	Body     string     `json:"body,omitempty"`
	EditedAt *time.Time `json:"editedAt,omitempty"`
	// Emoji is the reaction added or taken away, and Count how many members have it now.
	Emoji string `json:"emoji,omitempty"`
	Count int64  `json:"count,omitempty"`
	// Members is the conversation's size, for how widely nodes push a reaction.
	Members int `json:"members"`
	// Mentions are whom an edit's new text mentions, and Unmentioned whom an edit or a deletion
	// no longer mentions.
	Mentions    []string `json:"mentions,omitempty"`
	Unmentioned []string `json:"unmentioned,omitempty"`
	// CreatedAt is when the changed message was sent, which with its seq keys it in a node's
	// search index.
	CreatedAt time.Time `json:"createdAt,omitzero"`
}

// MessageChange is the change r asks of its message (r.Op set), as message.Apply takes it.
func (r SendRequest) MessageChange() message.Change {
	return message.Change{Op: r.Op, UserID: r.SenderID, Body: r.Body, Emoji: r.Emoji}
}

// ChangeOf is the published form of a change req made to m.
func ChangeOf(m storage.Message, req SendRequest, members int) Change {
	c := Change{Op: req.Op, ConversationID: m.ConversationID, Seq: m.Seq, Version: m.Version, UserID: req.SenderID,
		Members: members, CreatedAt: m.CreatedAt}
	switch req.Op {
	case message.OpEdit:
		c.Body, c.EditedAt, c.Mentions = m.Body, m.EditedAt, m.Mentions
	case message.OpReact, message.OpUnreact:
		c.Emoji = req.Emoji
		for _, r := range m.Reactions {
			if r.Emoji == req.Emoji {
				c.Count = int64(len(r.Users))
			}
		}
	}
	return c
}
