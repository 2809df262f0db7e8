// Package message owns the rules of one message: applying a change (edit, react, delete) to a
// stored message, reaction limits, the quote of a reply, and the wire view of a stored message.
// It holds no state and does no I/O: the sequencer's owner applies these rules to the messages of
// its batches, and the chat service shows stored messages through View.
//
// A message is defined once as it is stored (storage.Message: its text, its kind, and who
// reacted with what) and once as a viewer sees it on the wire (protocol.Message: reactions
// counted, the viewer's own marked). The two differ on purpose: pages and pushes never carry the
// lists of who reacted (a large group's would be large), so the stored shape cannot leak onto the
// wire by a field forgotten. View is the conversion from one to the other, and Reactors the
// answer to who reacted, the one wire view that names them. A message's kinds are protocol's
// (protocol.KindText, KindDeleted, KindSystem): the same strings on the wire and in the store.
package message

import (
	"fmt"
	"slices"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Changes of a stored message: the values of Change.Op.
const (
	OpEdit    = "edit"
	OpDelete  = "delete"
	OpReact   = "react"
	OpUnreact = "unreact"
)

// Change is one change a user asks of a stored message.
type Change struct {
	// Op is one of OpEdit, OpDelete, OpReact and OpUnreact.
	Op string
	// UserID asks for the change: only the sender edits or deletes.
	UserID string
	// Body is the new text of an edit.
	Body string
	// Emoji is the reaction added or taken away.
	Emoji string
	// Admin says UserID runs the message's group: they may delete any member's message, and the
	// tombstone records them (RemovedBy).
	Admin bool
}

// Apply checks change c against the stored message m and makes it in m, giving m version when it
// changes anything. It reports false, with no error, for a change that changes nothing: an edit
// to the same text, a reaction already there, one taken away that was not. Only text messages
// change: system messages and tombstones refuse every change. A deletion leaves a tombstone that
// keeps only what never changes (conversation, seq, sender, time, clientMsgId). Reactions stay
// within protocol.MaxReactionKinds emoji per message and protocol.MaxReactionsPerUser per member.
// A refusal is a *protocol.Error of kind protocol.ErrForbidden or protocol.ErrLimit whose
// message says why, for the user; any other error is a bug of the caller (an unknown op).
func Apply(m *storage.Message, c Change, version int64, at time.Time) (bool, error) {
	if m.Kind != protocol.KindText {
		what := "a system message"
		if m.Kind == protocol.KindDeleted {
			what = "deleted"
		}
		return false, protocol.Refuse(protocol.ErrForbidden, "message %d is %s and cannot change", m.Seq, what)
	}
	switch c.Op {
	case OpEdit, OpDelete:
		mine := m.SenderID == c.UserID
		if !mine && (c.Op != OpDelete || !c.Admin) {
			return false, protocol.Refuse(protocol.ErrForbidden, "message %d is not yours to %s", m.Seq, c.Op)
		}
		if c.Op == OpDelete {
			removedBy := ""
			if !mine {
				removedBy = c.UserID
			}
			*m = storage.Message{ConversationID: m.ConversationID, Seq: m.Seq, SenderID: m.SenderID,
				Kind: protocol.KindDeleted, CreatedAt: m.CreatedAt, ClientMsgID: m.ClientMsgID, RemovedBy: removedBy}
			break
		}
		if m.Body == c.Body {
			return false, nil
		}
		m.Body, m.EditedAt = c.Body, &at
	case OpReact:
		if changed, err := addReaction(m, c.UserID, c.Emoji); !changed || err != nil {
			return false, err
		}
	case OpUnreact:
		if !removeReaction(m, c.UserID, c.Emoji) {
			return false, nil
		}
	default:
		return false, fmt.Errorf("unknown change %q", c.Op)
	}
	m.Version = version
	return true, nil
}

// addReaction adds user's emoji to m within the bounds of protocol.MaxReactionKinds and
// MaxReactionsPerUser; a reaction already there changes nothing. It never changes the slices m
// shares with a copy made before.
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
		return false, protocol.Refuse(protocol.ErrLimit, "you have %d reactions on this message, the most there may be", mine)
	}
	if at < 0 {
		if len(m.Reactions) >= protocol.MaxReactionKinds {
			return false, protocol.Refuse(protocol.ErrLimit, "this message has %d different reactions, the most there may be", len(m.Reactions))
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

// QuoteOf is the quote a reply to m carries: the start of its text (protocol.QuoteText), or only
// its sender and Deleted for a tombstone.
func QuoteOf(m storage.Message) *storage.Quote {
	if m.Kind == protocol.KindDeleted {
		return &storage.Quote{SenderID: m.SenderID, Deleted: true}
	}
	return &storage.Quote{SenderID: m.SenderID, Body: protocol.QuoteText(m.Body), Attachment: FirstAttachment(m.Attachments)}
}

// View is the stored message m as viewer sees it on the wire: its reactions counted, and marked
// Me where viewer has one. With viewer "" none is marked: the view the owner publishes to every
// member alike. Who reacted is never part of it.
func View(m storage.Message, viewer string) protocol.Message {
	w := protocol.Message{
		ConversationID: m.ConversationID,
		Seq:            m.Seq,
		SenderID:       m.SenderID,
		Kind:           m.Kind,
		Body:           m.Body,
		CreatedAt:      m.CreatedAt,
		ClientMsgID:    m.ClientMsgID,
		ReplyTo:        m.ReplyTo,
		Version:        m.Version,
		EditedAt:       m.EditedAt,
		RemovedBy:      m.RemovedBy,
		Mentions:       m.Mentions,
	}
	if q := m.Quote; q != nil {
		w.Quote = &protocol.Quote{SenderID: q.SenderID, Body: q.Body, Deleted: q.Deleted, Attachment: RefView(q.Attachment)}
	}
	w.Attachments = AttachmentsView(m.Attachments)
	for _, r := range m.Reactions {
		w.Reactions = append(w.Reactions, protocol.Reaction{Emoji: r.Emoji, Count: int64(len(r.Users)),
			Me: viewer != "" && slices.Contains(r.Users, viewer)})
	}
	return w
}

// Reactors is who reacted to m with what, as the answer to a reactions request gives it: each
// emoji in the order of first use with its count, whether viewer is among them, and the users.
// Never nil, so an answer with none is an empty list.
func Reactors(m storage.Message, viewer string) []protocol.Reaction {
	out := make([]protocol.Reaction, 0, len(m.Reactions))
	for _, r := range m.Reactions {
		out = append(out, protocol.Reaction{Emoji: r.Emoji, Count: int64(len(r.Users)),
			Me: slices.Contains(r.Users, viewer), UserIDs: r.Users})
	}
	return out
}
