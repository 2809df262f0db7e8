package sequencer

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Changes of a stored message: the values of SendRequest.Op and Change.Op. They go through the
// conversation's owner, like sends, so that the changes of one message happen in one order (an
// edit after a delete is refused, whatever node each came from) and each gets the next change
// number (version) of its conversation.
const (
	OpEdit    = "edit"
	OpDelete  = "delete"
	OpReact   = "react"
	OpUnreact = "unreact"
)

// Errors a change can end with besides ErrNotMember and ErrUnavailable; the error's text says
// why, for the user.
var (
	// ErrNotFound means the conversation has no message with that seq.
	ErrNotFound = errors.New("no such message")
	// ErrForbidden means the user may not make this change: not their message, a tombstone, a
	// system message.
	ErrForbidden = errors.New("change not allowed")
	// ErrLimit means the change would pass a bound on the message's reactions.
	ErrLimit = errors.New("reaction limit")
)

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
}

// refusal is a change refused for a reason the user is told.
type refusal struct {
	kind   error
	reason string
}

func (r *refusal) Error() string { return r.reason }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, reason: fmt.Sprintf(format, args...)}
}

// ApplyChange checks a change of req.SenderID against the stored message m and makes it in m,
// giving it version when it changes anything. It reports false, with no error, for a change that
// changes nothing: an edit to the same text, a reaction already there, one taken away that was
// not. Only text messages change: system messages and tombstones refuse every change.
func ApplyChange(m *storage.Message, req SendRequest, version int64, at time.Time) (bool, error) {
	if m.Kind != storage.KindText {
		what := "a system message"
		if m.Kind == storage.KindDeleted {
			what = "deleted"
		}
		return false, refuse(ErrForbidden, "message %d is %s and cannot change", m.Seq, what)
	}
	switch req.Op {
	case OpEdit, OpDelete:
		if m.SenderID != req.SenderID {
			return false, refuse(ErrForbidden, "message %d is not yours to %s", m.Seq, req.Op)
		}
		if req.Op == OpDelete {
			*m = storage.Message{ConversationID: m.ConversationID, Seq: m.Seq, SenderID: m.SenderID,
				Kind: storage.KindDeleted, CreatedAt: m.CreatedAt, ClientMsgID: m.ClientMsgID}
			break
		}
		if m.Body == req.Body {
			return false, nil
		}
		m.Body, m.EditedAt = req.Body, &at
	case OpReact:
		if changed, err := addReaction(m, req.SenderID, req.Emoji); !changed || err != nil {
			return false, err
		}
	case OpUnreact:
		if !removeReaction(m, req.SenderID, req.Emoji) {
			return false, nil
		}
	default:
		return false, fmt.Errorf("unknown change %q", req.Op)
	}
	m.Version = version
	return true, nil
}

// addReaction adds user's emoji to m within the bounds of protocol.MaxReactionKinds and
// MaxReactionsPerUser; a reaction already there changes nothing.
func addReaction(m *storage.Message, user, emoji string) (bool, error) {
	mine, at := 0, -1
	for i, r := range m.Reactions {
		if slices.Contains(r.Users, user) {
			if r.Emoji == emoji {
				return false, nil
			}
			mine++
		}
		if r.Emoji == emoji {
			at = i
		}
	}
	if mine >= protocol.MaxReactionsPerUser {
		return false, refuse(ErrLimit, "you have %d reactions on this message, the most there may be", mine)
	}
	if at < 0 {
		if len(m.Reactions) >= protocol.MaxReactionKinds {
			return false, refuse(ErrLimit, "this message has %d different reactions, the most there may be", len(m.Reactions))
		}
		m.Reactions = append(slices.Clone(m.Reactions), storage.Reaction{Emoji: emoji})
		at = len(m.Reactions) - 1
	} else {
		m.Reactions = slices.Clone(m.Reactions)
	}
	m.Reactions[at].Users = append(slices.Clone(m.Reactions[at].Users), user)
	return true, nil
}

// removeReaction takes user's emoji off m, dropping an emoji nobody has any more; it reports
// whether there was one.
func removeReaction(m *storage.Message, user, emoji string) bool {
	for i, r := range m.Reactions {
		if r.Emoji != emoji || !slices.Contains(r.Users, user) {
			continue
		}
		m.Reactions = slices.Clone(m.Reactions)
		users := slices.DeleteFunc(slices.Clone(r.Users), func(u string) bool { return u == user })
		if len(users) == 0 {
			m.Reactions = slices.Delete(m.Reactions, i, i+1)
		} else {
			m.Reactions[i].Users = users
		}
		return true
	}
	return false
}

// ChangeOf is the published form of a change req made to m.
func ChangeOf(m storage.Message, req SendRequest, members int) Change {
	c := Change{Op: req.Op, ConversationID: m.ConversationID, Seq: m.Seq, Version: m.Version, UserID: req.SenderID,
		Members: members}
	switch req.Op {
	case OpEdit:
		c.Body, c.EditedAt = m.Body, m.EditedAt
	case OpReact, OpUnreact:
		c.Emoji = req.Emoji
		for _, r := range m.Reactions {
			if r.Emoji == req.Emoji {
				c.Count = int64(len(r.Users))
			}
		}
	}
	return c
}

// QuoteOf is the quote a reply to m carries.
func QuoteOf(m storage.Message) *storage.Quote {
	if m.Kind == storage.KindDeleted {
		return &storage.Quote{SenderID: m.SenderID, Deleted: true}
	}
	return &storage.Quote{SenderID: m.SenderID, Body: protocol.QuoteText(m.Body)}
}
