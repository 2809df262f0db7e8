package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// readStore is what read state reads and writes; moves of the cursors themselves are coalesced
// through Reads.
type readStore interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	ConversationsOf(ctx context.Context, userID string) ([]storage.Conversation, error)
	User(ctx context.Context, id string) (storage.User, error)
	CursorsOf(ctx context.Context, userID string) ([]storage.Cursor, error)
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
	CountReaders(ctx context.Context, conversationID string, seq int64, senderID string) (int64, error)
	CountDelivered(ctx context.Context, conversationID string, seq int64, senderID string) (int64, error)
	Readers(ctx context.Context, conversationID string, seq int64, senderID string, limit int64) ([]storage.Cursor, error)
	SetHideReceipts(ctx context.Context, userID string, hide bool) error
}

// readState is the part of the service that moves read and delivered positions, tells the other
// members (receipts) and the user's devices (cursor, badge), counts receipts on demand and
// computes the badge of a user who is not connected. It shares the hub, where the online users'
// positions are kept, and the bus with the other parts (live); cursor writes go through Reads.
type readState struct {
	*live
	store readStore
	reads Reads
}

// Receipts is "delivered to N, read by M" for one message; small conversations also say who read.
type Receipts struct {
	DeliveredTo int64
	ReadBy      int64
	Readers     []protocol.Reader
}

// Read moves userID's read cursor forward (clamped to the conversation's last seq); from a socket
// or from the HTTP API (a page that is closing sends its last read with a beacon). The store
// write is coalesced; each of the user's devices gets one cursor and one badge frame, and where
// receipts are live the other members get a receipt.
func (s *readState) Read(ctx context.Context, userID, convID string, seq int64) error {
	p, err := s.positionOf(userID, convID)
	hidden := s.hidesReceipts(userID)
	last := s.lastSeq(convID, p)
	if err != nil {
		// The user has no connection here: ask the store.
		conv, cerr := s.store.Conversation(ctx, convID)
		if errors.Is(cerr, storage.ErrNotFound) || (cerr == nil && !conv.IsMember(userID)) {
			return protocol.ErrNotMember
		}
		if cerr != nil {
			return fmt.Errorf("load conversation %s: %w", convID, cerr)
		}
		user, uerr := s.store.User(ctx, userID)
		if uerr != nil {
			return fmt.Errorf("load user %s: %w", userID, uerr)
		}
		// A late beacon must not publish a receipt behind what the user has read already.
		cursors, cerr := s.cursorsOf(ctx, userID)
		if cerr != nil {
			return cerr
		}
		p = position{kind: conv.Kind, members: len(conv.Members), readSeq: conv.ReadSeq(userID, cursors[convID])}
		hidden, last = user.HideReceipts, conv.LastSeq
	}
	seq = min(seq, last)
	if seq <= p.readSeq {
		return nil
	}
	s.reads.Advance(storage.Cursor{UserID: userID, ConversationID: convID, ReadSeq: seq, Hidden: hidden, UpdatedAt: now()})
	// Applied here at once, so the user's next request on this node sees it; the bus event then
	// moves nothing here and reaches the user's devices on other nodes.
	s.applyCursor(userID, convID, seq, 0)
	s.publishUser(userID, userEvent{Type: userCursor, ConvID: convID, ReadSeq: seq})
	if !hidden && s.liveReceipts(p) {
		s.publishConversation(convID, conversationEvent{Type: protocol.TypeReceipt, UserID: userID, ReadSeq: seq})
	}
	return nil
}

// Delivered records that a device of userID received the conversation's messages up to seq
// (clamped to the last seq). The position only moves forward, is written with the read cursor,
// and in DMs and small groups the other members get a delivered frame: the sender's "delivered"
// tick. Hiding receipts does not hide it. Nothing else is sent, not even to the user's own devices.
func (s *readState) Delivered(userID, convID string, seq int64) error {
	u := s.online(userID)
	if u == nil {
		return protocol.ErrNotMember
	}
	u.mu.Lock()
	p, ok := u.positions[convID]
	if !ok {
		u.mu.Unlock()
		return protocol.ErrNotMember
	}
	seq = min(seq, s.lastSeq(convID, *p))
	if seq <= max(p.deliveredSeq, p.readSeq) {
		u.mu.Unlock()
		return nil
	}
	p.deliveredSeq = seq
	live, hidden := s.liveReceipts(*p), u.hideReceipts
	u.mu.Unlock()
	s.reads.Advance(storage.Cursor{UserID: userID, ConversationID: convID, DeliveredSeq: seq, Hidden: hidden, UpdatedAt: now()})
	if live {
		s.publishConversation(convID, conversationEvent{Type: protocol.TypeDelivered, UserID: userID, DeliveredSeq: seq})
	}
	return nil
}

// liveReceipts reports whether cursor moves in a conversation are pushed to its members: DMs and
// small groups only.
func (s *readState) liveReceipts(p position) bool {
	return p.kind == storage.KindDM || p.members <= s.cfg.LiveReceiptsMaxMembers
}

// Receipts counts on demand from the cursors who has received message seq (on any device) and who
// has read it, excluding its sender, and for reads the users who hide their receipts. The conversation's pending cursor moves are written first;
// nobody else's.
func (s *readState) Receipts(ctx context.Context, userID, convID string, seq int64) (Receipts, error) {
	p, err := s.positionOf(userID, convID)
	if err != nil {
		return Receipts{}, err
	}
	msgs, err := s.store.MessageRange(ctx, convID, seq, seq)
	if err != nil {
		return Receipts{}, fmt.Errorf("load message %s/%d: %w", convID, seq, err)
	}
	if len(msgs) == 0 {
		return Receipts{}, protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", seq)
	}
	sender := msgs[0].SenderID
	if err := s.reads.FlushConversation(ctx, convID); err != nil {
		s.log.Warn().Err(err).Str("conversation", convID).Msg("write read cursors before counting receipts")
	}
	n, err := s.store.CountReaders(ctx, convID, seq, sender)
	if err != nil {
		return Receipts{}, fmt.Errorf("count readers of %s/%d: %w", convID, seq, err)
	}
	delivered, err := s.store.CountDelivered(ctx, convID, seq, sender)
	if err != nil {
		return Receipts{}, fmt.Errorf("count deliveries of %s/%d: %w", convID, seq, err)
	}
	out := Receipts{DeliveredTo: delivered, ReadBy: n}
	if s.liveReceipts(p) {
		readers, err := s.store.Readers(ctx, convID, seq, sender, int64(s.cfg.LiveReceiptsMaxMembers))
		if err != nil {
			return Receipts{}, fmt.Errorf("list readers of %s/%d: %w", convID, seq, err)
		}
		for _, r := range readers {
			out.Readers = append(out.Readers, protocol.Reader{UserID: r.UserID, ReadSeq: r.ReadSeq})
		}
	}
	return out, nil
}

// SetPrivacy hides (or shows) userID's read position from others.
func (s *readState) SetPrivacy(ctx context.Context, userID string, hide bool) error {
	if err := s.store.SetHideReceipts(ctx, userID, hide); err != nil {
		return fmt.Errorf("store privacy of %s: %w", userID, err)
	}
	// Here at once, and on the user's other nodes, whose read frames publish receipts too.
	s.applyPrivacy(userID, userEvent{Type: userPrivacy, HideReceipts: &hide})
	s.publishUser(userID, userEvent{Type: userPrivacy, HideReceipts: &hide})
	return nil
}

// BadgeCounts are a user's unread messages over all conversations, and those of them that
// mention the user.
type BadgeCounts struct {
	Unread, Mentions int64
}

// Badge computes a user's total unread from the store with their pending cursor moves on top, for
// push services acting for offline users: O(conversations), never a count over messages. The
// seqs each conversation records as deleted for everyone do not count.
func (s *readState) Badge(ctx context.Context, userID string) (BadgeCounts, error) {
	convs, err := s.store.ConversationsOf(ctx, userID)
	if err != nil {
		return BadgeCounts{}, fmt.Errorf("load conversations of %s: %w", userID, err)
	}
	cursors, err := s.cursorsOf(ctx, userID)
	if err != nil {
		return BadgeCounts{}, err
	}
	var total BadgeCounts
	for _, c := range convs {
		read := c.ReadSeq(userID, cursors[c.ID])
		total.Unread += storage.Unread(c.LastSeq, read, c.DeletedSeqs)
		total.Mentions += unreadMentions(c.Mentioned[userID], read, c.DeletedSeqs)
	}
	return total, nil
}

func (s *readState) hidesReceipts(userID string) bool {
	u := s.online(userID)
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hideReceipts
}

// cursorsOf returns a user's read cursors by conversation: the store's, with the moves not yet
// written on top.
func (s *readState) cursorsOf(ctx context.Context, userID string) (map[string]storage.Cursor, error) {
	stored, err := s.store.CursorsOf(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("load cursors of %s: %w", userID, err)
	}
	out := make(map[string]storage.Cursor, len(stored))
	for _, c := range stored {
		out[c.ConversationID] = c
	}
	for _, p := range s.reads.Pending(userID) {
		cur := out[p.ConversationID]
		cur.UserID, cur.ConversationID = p.UserID, p.ConversationID
		cur.ReadSeq, cur.DeliveredSeq = max(cur.ReadSeq, p.ReadSeq), max(cur.DeliveredSeq, p.DeliveredSeq)
		out[p.ConversationID] = cur
	}
	return out, nil
}

// applyCursor moves an online user's read position forward (and their hidden position, when
// hiddenSeq > 0) and tells their devices with one cursor and one badge frame. A move that is not
// forward changes nothing and sends nothing, so a repeated or late event is harmless.
func (s *readState) applyCursor(userID, convID string, readSeq, hiddenSeq int64) {
	u := s.online(userID)
	if u == nil {
		return
	}
	u.mu.Lock()
	p, ok := u.positions[convID]
	if !ok || (readSeq <= p.readSeq && hiddenSeq <= p.hiddenSeq) {
		u.mu.Unlock()
		return
	}
	p.readSeq = max(p.readSeq, readSeq)
	hid := hiddenSeq > p.hiddenSeq
	p.hiddenSeq = max(p.hiddenSeq, hiddenSeq)
	cur, hidden := p.readSeq, p.hiddenSeq
	u.mu.Unlock()
	if hid {
		s.pushToUser(userID, protocol.ServerFrame{Type: protocol.TypeHidden, ConversationID: convID, Seq: hidden})
	}
	s.ephemeralToUser(userID, "cursor:"+convID, protocol.ServerFrame{Type: protocol.TypeCursor, ConversationID: convID, ReadSeq: cur})
	s.badge(userID, u, convID)
}
