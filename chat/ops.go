package chat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// dmNamespace makes DM ids: a pair of users always maps to the same conversation id.
var dmNamespace = uuid.MustParse("6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11")

// DMID is the conversation id of the DM between two users, the same whichever opens it.
func DMID(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return uuid.NewSHA1(dmNamespace, []byte(a+"\n"+b)).String()
}

// SendRequest is one message a user sends.
type SendRequest struct {
	ConversationID string
	ClientMsgID    string
	Body           string
	ReplyTo        int64
	// Attachments are ids of the sender's pending uploads (see sequencer.Files).
	Attachments []string
}

// Send sequences and persists a message of userID and returns it with its seq, once stored. The
// sender's read position moves to it (stored by the owner with the message). A DM with a block between its members refuses it (see
// blocks.go).
func (s *messaging) Send(ctx context.Context, userID string, req SendRequest) (protocol.Message, error) {
	start := time.Now()
	m, err := s.send(ctx, userID, req)
	s.cfg.Metrics.sent(start, err)
	return m, err
}

func (s *messaging) send(ctx context.Context, userID string, req SendRequest) (protocol.Message, error) {
	p, err := s.positionOf(userID, req.ConversationID)
	if err != nil {
		return protocol.Message{}, err
	}
	if p.kind == storage.KindDM {
		if err := s.blocks.checkDMSend(ctx, userID, req.ConversationID); err != nil {
			return protocol.Message{}, err
		}
	}
	return s.sequence(ctx, userID, req)
}

// sequence has the conversation's owner store a send whose sender passed the checks here.
func (s *messaging) sequence(ctx context.Context, userID string, req SendRequest) (protocol.Message, error) {
	m, err := s.seq.Send(ctx, sequencer.SendRequest{
		ConversationID: req.ConversationID,
		SenderID:       userID,
		ClientMsgID:    req.ClientMsgID,
		Kind:           protocol.KindText,
		Body:           req.Body,
		ReplyTo:        req.ReplyTo,
		Attachments:    req.Attachments,
	})
	var refusal *protocol.Error
	switch {
	case errors.Is(err, protocol.ErrUnavailable):
		s.log.Warn().Err(err).Str("conversation", req.ConversationID).Msg("send not acknowledged")
		return protocol.Message{}, protocol.Refuse(protocol.ErrUnavailable, "message not stored; retry with the same clientMsgId")
	case errors.As(err, &refusal):
		// The owner's word: not a member (it may know of a removal before this node does), or a
		// reply to a message that does not exist.
		return protocol.Message{}, refusal
	case err != nil:
		return protocol.Message{}, fmt.Errorf("send to %s: %w", req.ConversationID, err)
	}
	// The owner stored the sender's read position with the message (Conversation.Senders): no
	// cursor write. In memory it moves on one path, on every node alike: when the message is
	// delivered (deliverMessage), before it reaches the sender's devices.
	return m, nil
}

// ListConversations returns the conversations of userID, without those deleted for them that
// have had nothing new since.
func (s *messaging) ListConversations(ctx context.Context, userID string) ([]protocol.Conversation, error) {
	return s.listConversations(ctx, userID, false)
}

// listConversations is ListConversations; a syncing session's (syncing true) reads the store in
// a sync read slot.
func (s *messaging) listConversations(ctx context.Context, userID string, syncing bool) ([]protocol.Conversation, error) {
	if s.knownToHaveNone(userID) {
		return []protocol.Conversation{}, nil
	}
	if syncing {
		release, err := s.syncReadSlot(ctx)
		if err != nil {
			return nil, fmt.Errorf("list conversations of %s: %w", userID, err)
		}
		defer release()
	}
	convs, err := s.store.ConversationsOf(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("load conversations of %s: %w", userID, err)
	}
	cursors := map[string]storage.Cursor(nil)
	if s.online(userID) == nil {
		if cursors, err = s.cursors.cursorsOf(ctx, userID); err != nil {
			return nil, err
		}
	}
	var notify map[string]string
	if len(convs) > 0 { // the settings are per conversation
		if notify, err = s.store.NotifySettings(ctx, userID); err != nil {
			return nil, fmt.Errorf("load notification settings of %s: %w", userID, err)
		}
	}
	views := make([]protocol.Conversation, 0, len(convs))
	for _, c := range convs {
		p, err := s.positionOf(userID, c.ID)
		if err != nil { // not live here: the stored position
			cur := cursors[c.ID]
			p = position{readSeq: c.ReadSeq(userID, cur), hiddenSeq: cur.HiddenSeq}
		} else {
			// Live here: mend what this node may have missed of the deletions, for its badges.
			s.learnDeleted(c.ID, c.DeletedSeqs)
		}
		p.mentions = c.Mentioned[userID] // the owner's, written before what this node heard
		last := max(c.LastSeq, s.lastSeq(c.ID, p))
		if p.hiddenSeq > 0 && last <= p.hiddenSeq {
			continue // deleted for this user, and nothing new since
		}
		view := toView(c, p, last)
		view.Notify = notify[c.ID]
		views = append(views, view)
	}
	return views, nil
}

// knownToHaveNone reports, once, that an online user was loaded in no conversation and has joined
// none since: their first list (the first sync after a new account's first connect) is then
// answered without reading the store again. Later lists read it, so one that mends a missed join
// still comes with the next sync.
func (s *messaging) knownToHaveNone(userID string) bool {
	u := s.online(userID)
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	none := u.loadedNone && len(u.positions) == 0
	u.loadedNone = false
	return none
}

// Sync replays to a connection, per conversation named in since, the messages after the seq the
// client holds (up to SyncLimit each), in seq order and without repeating what the connection
// already has, while its live pushes wait; then it returns the user's conversations, so the
// client learns of new ones and of anything still missing beyond the limit. Syncs running at once
// with identical replays share their store reads (see sharedReads), and the store reads of all
// syncing and connecting sessions of the node are bounded by MaxConcurrentSyncReads, so a
// reconnect storm queues here instead of swamping the store. With versions it then catches the
// client up on the changes (edits, reactions, deletions) of what it holds (see catchUp).
func (s *messaging) Sync(ctx context.Context, c Conn, since, versions map[string]int64) ([]protocol.Conversation, error) {
	uid := c.UserID()
	err := s.hub.Sync(ctx, c, func(push hub.ReplayFunc) error {
		for convID, have := range since {
			if _, err := s.positionOf(uid, convID); err != nil {
				continue // a conversation the user left or never had: nothing to replay
			}
			msgs, err := s.syncRange(ctx, convID, have+1, have+int64(s.cfg.SyncLimit))
			if err != nil {
				return fmt.Errorf("replay %s: %w", convID, err)
			}
			for _, m := range msgs {
				frame, err := protocol.EncodeMessagePush(s.viewOf(m, uid))
				if err != nil {
					return err
				}
				if err := push(convID, m.Seq, frame); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.catchUp(ctx, c, since, versions); err != nil {
		return nil, err
	}
	return s.listConversations(ctx, uid, true)
}

// Anchor says where a history page sits; at most one field is set, none means the latest page.
type Anchor struct {
	Before, After, Around *int64
	// Fraction is 0 for the start, 1 for the end.
	Fraction *float64
}

// Page is one page of history and where the conversation's ends are, as the member may see them.
type Page struct {
	Messages            []protocol.Message
	FirstSeq, LastSeq   int64
	HasBefore, HasAfter bool
}

// History answers one page with one bounded range query on {conversationId, seq}. Seqs are gapless
// (deleted messages stay as tombstones), so the range is computed from the anchor and the page
// size alone, at any depth. Identical pages asked at once (members opening a conversation after a
// reconnect) share one query and one conversation look-up (see sharedReads).
func (s *messaging) History(ctx context.Context, userID, convID string, at Anchor, limit int) (Page, error) {
	start := time.Now()
	page, err := s.history(ctx, userID, convID, at, limit)
	if err == nil {
		s.cfg.Metrics.paged(start)
	}
	return page, err
}

func (s *messaging) history(ctx context.Context, userID, convID string, at Anchor, limit int) (Page, error) {
	p, last, err := s.checkedPosition(ctx, userID, convID)
	if err != nil {
		return Page{}, err
	}
	from, to := pageRange(at, limit, last)
	// After deleting a conversation for themselves a user sees only what came later.
	from = max(from, p.hiddenSeq+1)
	msgs, err := s.pageMessages(ctx, convID, from, to)
	if err != nil {
		return Page{}, fmt.Errorf("load page of %s: %w", convID, err)
	}
	page := Page{Messages: make([]protocol.Message, len(msgs)), LastSeq: last, HasAfter: to < last}
	for i, m := range msgs {
		page.Messages[i] = s.viewOf(m, userID)
	}
	if last > p.hiddenSeq {
		page.FirstSeq = p.hiddenSeq + 1
	}
	page.HasBefore = page.FirstSeq > 0 && from > page.FirstSeq
	return page, nil
}

// checkedPosition returns a member's position and the conversation's last seq (the store's counter
// or what was delivered here, whichever is ahead), checking membership against the store too.
func (s *messaging) checkedPosition(ctx context.Context, userID, convID string) (position, int64, error) {
	p, err := s.positionOf(userID, convID)
	if err != nil {
		return position{}, 0, err
	}
	conv, err := s.conversation(ctx, convID)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !conv.IsMember(userID)) {
		return position{}, 0, protocol.ErrNotMember // removed, and this node has not heard yet
	}
	if err != nil {
		return position{}, 0, fmt.Errorf("load conversation %s: %w", convID, err)
	}
	return p, max(conv.LastSeq, s.lastSeq(convID, p)), nil
}

// pageRange turns a history anchor into the seq range [from, to] within [1, last].
func pageRange(at Anchor, limit int, last int64) (from, to int64) {
	n := int64(limit)
	if n <= 0 {
		n = protocol.DefaultPageSize
	}
	centred := at.Around != nil || at.Fraction != nil
	switch {
	case at.Before != nil:
		to = *at.Before - 1
		from = to - n + 1
	case at.After != nil:
		from = *at.After + 1
		to = from + n - 1
	case centred:
		center := int64(0)
		if at.Around != nil {
			center = *at.Around
		} else {
			center = int64(math.Round(*at.Fraction * float64(last)))
		}
		from = center - n/2
		to = from + n - 1
	default:
		to = last
		from = last - n + 1
	}
	// Keep a full page when the anchor sits near an end.
	if centred {
		if from < 1 {
			to += 1 - from
			from = 1
		}
		if to > last {
			from -= to - last
			to = last
		}
	}
	return max(from, 1), min(to, last)
}

// Typing tells the other members online that userID is typing, at most once per TypingInterval
// per conversation; more frequent calls succeed and send nothing.
func (s *messaging) Typing(userID, convID string) error {
	if _, err := s.positionOf(userID, convID); err != nil {
		return err
	}
	if s.typing.allow(userID, convID, s.cfg.TypingInterval) {
		s.publishConversation(convID, conversationEvent{Type: protocol.TypeTyping, UserID: userID})
	}
	return nil
}
