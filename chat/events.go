package chat

import (
	"context"
	"encoding/json"
	"time"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// conversationEvent is what nodes publish on a conversation's event subject.
type conversationEvent struct {
	Type         string `json:"type"` // receipt, delivered, typing or tombstoned
	UserID       string `json:"userId"`
	ReadSeq      int64  `json:"readSeq,omitempty"`
	DeliveredSeq int64  `json:"deliveredSeq,omitempty"`
	Seq          int64  `json:"seq,omitempty"`
	// Seqs are the messages a tombstoned event made tombstones.
	Seqs []int64 `json:"seqs,omitempty"`
}

// convTombstoned says that messages were made tombstones without a delete_message (a member's
// account was deleted): nodes learn the seqs for their unread counts and push nothing, since
// the system message that follows tells clients to list their conversations again.
const convTombstoned = "tombstoned"

// maxTombstonedSeqs bounds the seqs of one tombstoned event, so that one stays far below NATS's
// default 1 MiB payload limit (a seq is at most 20 bytes of JSON) whatever a member sent.
const maxTombstonedSeqs = 10000

// userEvent is what nodes publish on a user's subject, so all of a user's devices on any node
// agree. Applying one is idempotent (positions only move forward, a known join or leave changes
// nothing), so the node that made a change may apply it at once and its own echo is a no-op: one
// change, one frame per device.
type userEvent struct {
	Type         string                 `json:"type"` // joined, left, cursor, hidden, deleted, blocks, presence, privacy or profile
	Conversation *protocol.Conversation `json:"conversation,omitempty"`
	ConvID       string                 `json:"conversationId,omitempty"`
	ReadSeq      int64                  `json:"readSeq,omitempty"`
	// Peer is the other user of a block or unblock (blocks events).
	Peer string `json:"peer,omitempty"`
	// DeletedSeqs are the seqs of Conversation deleted for everyone (joined events), so the
	// joiner's node counts unread without them.
	DeletedSeqs []int64 `json:"deletedSeqs,omitempty"`
	// Name is Peer's new display name (profile events).
	Name string `json:"name,omitempty"`
	// Online and LastSeen are Peer's presence (presence events).
	Online   bool       `json:"online,omitempty"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
	// Notify is the user's new notification setting for ConvID (notify events).
	Notify string `json:"notify,omitempty"`
	// HideReceipts and HidePresence are the user's changed privacy settings (privacy events).
	HideReceipts *bool `json:"hideReceipts,omitempty"`
	HidePresence *bool `json:"hidePresence,omitempty"`
	// Report is a member's report of a message in ConvID, for the user, an admin (report events).
	Report *protocol.Report `json:"report,omitempty"`
}

// User event types.
const (
	userJoined  = "joined"
	userLeft    = "left"
	userCursor  = "cursor"
	userHidden  = "hidden"
	userDeleted = "deleted"
	// userBlocks says a block between the user and Peer was made or undone, in either direction:
	// the node forgets the block state it cached for their DM and reads it again on the next send.
	userBlocks = "blocks"
	// userPresence says Peer came online or went offline (see presence.go).
	userPresence = "presence"
	// userPrivacy carries the user's changed privacy settings to every node that holds them.
	userPrivacy = "privacy"
	// userProfile says Peer (the user or one of their peers) changed their display name.
	userProfile = "profile"
	// userReport brings a group's admin a member's report (see groups.go).
	userReport = "report"
)

func (s *live) publishUser(userID string, ev userEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		s.log.Error().Err(err).Msg("encode user event")
		return
	}
	if err := s.bus.PublishUser(userID, data); err != nil {
		s.log.Warn().Err(err).Str("user", userID).Msg("publish user event")
	}
}

func (s *live) publishConversation(convID string, ev conversationEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		s.log.Error().Err(err).Msg("encode conversation event")
		return
	}
	if err := s.bus.PublishConversation(convID, data); err != nil {
		s.log.Warn().Err(err).Str("conversation", convID).Msg("publish conversation event")
	}
}

// HandleMessage delivers a persisted message, as the sequencer published it, to the local members:
// one encoding, the same bytes on every socket. A message moves no badge frame: clients derive
// unread from the pushes. The sender's own position moves with it, on every node, so their own
// messages are never unread. received is when the bus took the message from NATS, from which the
// fan-out measures its delivery latency.
func (s *messaging) HandleMessage(convID string, data []byte, received time.Time) {
	s.deliverMessage(convID, data, received)
}

// deliverMessage is HandleMessage, reporting whether the message was news here (see
// hub.Hub.DeliverMessage); received is the zero time for a message read from the store.
func (s *messaging) deliverMessage(convID string, data []byte, received time.Time) bool {
	var msg protocol.Message
	if err := json.Unmarshal(data, &msg); err != nil || msg.ConversationID != convID {
		s.log.Error().Err(err).Str("conversation", convID).Msg("undecodable message event")
		return false
	}
	s.ownMessage(msg.SenderID, convID, msg.Seq)
	s.mentioned(convID, msg.Seq, msg.Mentions, true, msg.SenderID)
	return s.hub.DeliverMessage(convID, msg.Seq, protocol.PushFromEncodedMessage(data), received)
}

// ownMessage moves a sender's position past their own message, if they are online here.
func (s *messaging) ownMessage(senderID, convID string, seq int64) {
	if u := s.online(senderID); u != nil {
		u.mu.Lock()
		if p, ok := u.positions[convID]; ok {
			p.readSeq = max(p.readSeq, seq)
		}
		u.mu.Unlock()
	}
}

// HandleConversationEvent delivers a receipt, delivered or typing event to the local members, and
// learns the tombstones of an account deletion. Receipts and delivered positions only move
// forward; all three are ephemeral and not news to the user they are about. (Deletions of one
// message are changes: see HandleChange.)
func (s *Service) HandleConversationEvent(convID string, data []byte) {
	var ev conversationEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		s.log.Error().Err(err).Str("conversation", convID).Msg("undecodable conversation event")
		return
	}
	if ev.Type == convTombstoned {
		s.learnDeleted(convID, ev.Seqs)
		return
	}
	frame, err := protocol.Encode(protocol.ServerFrame{Type: ev.Type, ConversationID: convID, UserID: ev.UserID,
		ReadSeq: ev.ReadSeq, DeliveredSeq: ev.DeliveredSeq, Seq: ev.Seq})
	if err != nil {
		s.log.Error().Err(err).Msg("encode conversation event")
		return
	}
	switch ev.Type {
	case protocol.TypeReceipt:
		s.hub.EphemeralToConversation(convID, ev.UserID, "receipt:"+convID+":"+ev.UserID, ev.ReadSeq, frame)
	case protocol.TypeDelivered:
		s.hub.EphemeralToConversation(convID, ev.UserID, "delivered:"+convID+":"+ev.UserID, ev.DeliveredSeq, frame)
	case protocol.TypeTyping:
		s.hub.EphemeralToConversation(convID, ev.UserID, "typing:"+convID+":"+ev.UserID, 0, frame)
	}
}

// HandleUserEvent applies an event of one user to their state and devices here.
func (s *Service) HandleUserEvent(userID string, data []byte) {
	var ev userEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		s.log.Error().Err(err).Str("user", userID).Msg("undecodable user event")
		return
	}
	switch ev.Type {
	case userJoined:
		if ev.Conversation != nil {
			s.applyJoin(userID, *ev.Conversation, ev.DeletedSeqs)
		}
	case userLeft:
		s.applyLeave(userID, ev.ConvID)
	case userCursor:
		s.applyCursor(userID, ev.ConvID, ev.ReadSeq, 0)
	case userHidden:
		s.applyCursor(userID, ev.ConvID, ev.ReadSeq, ev.ReadSeq)
	case userDeleted:
		for _, c := range s.hub.Conns(userID) {
			c.End("account deleted")
		}
	case userRevoked:
		s.applyRevoke(userID)
	case userBlocks:
		s.forgetBlock(userID, ev.Peer)
	case userPresence:
		s.applyPresence(userID, ev)
	case userPrivacy:
		s.applyPrivacy(userID, ev)
	case userProfile:
		s.applyProfile(userID, ev)
	case userReport:
		if ev.Report != nil {
			s.pushToUser(userID, protocol.ServerFrame{Type: protocol.TypeReports, ConversationID: ev.ConvID, Reports: &[]protocol.Report{*ev.Report}})
		}
	case userNotify:
		s.applyNotify(userID, ev)
	}
}

// applyJoin routes a conversation to an online user and tells their devices; deleted are the
// conversation's seqs deleted for everyone. A join already applied changes nothing.
func (s *live) applyJoin(userID string, conv protocol.Conversation, deleted []int64) {
	u := s.online(userID)
	if u == nil {
		return
	}
	u.mu.Lock()
	if _, known := u.positions[conv.ID]; known {
		u.mu.Unlock()
		return
	}
	u.positions[conv.ID] = &position{kind: conv.Kind, members: len(conv.Members), loadedSeq: conv.LastSeq,
		peer: dmPeer(conv.Kind, conv.Members, userID)}
	s.addPeers(userID, u, conv.Kind, conv.Members)
	delete(u.left, conv.ID)
	// The route changes under u.mu with the position, so a join and a leave cannot cross.
	if s.hub.Join(userID, conv.ID, conv.LastSeq) {
		s.watchConversation(conv.ID)
	}
	s.learnDeleted(conv.ID, deleted) // after the join, so no forget undoes it
	u.mu.Unlock()
	conv.ReadSeq, conv.Unread = 0, storage.Unread(conv.LastSeq, 0, s.deleted.of(conv.ID))
	s.pushToUser(userID, protocol.ServerFrame{Type: protocol.TypeConversation, Conversation: &conv})
	s.badge(userID, u, conv.ID)
}

// applyLeave takes a conversation out of an online user's view.
func (s *live) applyLeave(userID, convID string) {
	u := s.online(userID)
	if u == nil {
		return
	}
	u.mu.Lock()
	_, known := u.positions[convID]
	delete(u.positions, convID)
	if u.left != nil { // still loading
		u.left[convID] = true
	}
	if known && s.hub.Leave(userID, convID) {
		s.watchConversation(convID)
	}
	u.mu.Unlock()
	if !known {
		return
	}
	s.forgetDeleted(convID)
	s.pushToUser(userID, protocol.ServerFrame{Type: protocol.TypeRemoved, ConversationID: convID})
	s.badge(userID, u, "")
}

// badge sends an online user's unread counts after a change in one conversation (or only the
// total, for convID ""). Badges are ephemeral: a newer one replaces one still waiting.
func (s *live) badge(userID string, u *onlineUser, convID string) {
	total := s.total(u)
	f := protocol.ServerFrame{Type: protocol.TypeBadge, ConversationID: convID, Total: &total}
	if convID != "" {
		u.mu.Lock()
		var p position
		if known, ok := u.positions[convID]; ok {
			p = *known
		}
		u.mu.Unlock()
		read, last := p.readSeq, s.lastSeq(convID, p)
		n, m := s.unreadOf(convID, p), unreadMentions(p.mentions, read, s.deleted.of(convID))
		f.Unread, f.ReadSeq, f.LastSeq, f.UnreadMentions = &n, read, max(last, read), &m
	}
	mentions := s.totalMentions(u)
	f.TotalMentions = &mentions
	s.ephemeralToUser(userID, "badge:"+convID, f)
}

func (s *live) pushToUser(userID string, f protocol.ServerFrame) {
	data, err := protocol.Encode(f)
	if err != nil {
		s.log.Error().Err(err).Msg("encode frame")
		return
	}
	s.hub.PushToUser(userID, data)
}

func (s *live) ephemeralToUser(userID, key string, f protocol.ServerFrame) {
	data, err := protocol.Encode(f)
	if err != nil {
		s.log.Error().Err(err).Msg("encode frame")
		return
	}
	s.hub.EphemeralToUser(userID, key, data)
}

// Resync catches up after this node could not hear the bus (core NATS drops what is published
// meanwhile). It first reconciles every online user's memberships with the store, so a join or a
// removal announced during the gap takes effect here too; then it delivers, per live
// conversation, the messages after the highest seq delivered here, up to SyncLimit (clients fill
// anything beyond from history). The DM block states cached here are forgotten, to be read again.
func (s *Service) Resync(ctx context.Context) {
	delivered := 0
	defer func() { s.cfg.Metrics.resynced(delivered) }()
	s.forgetAllBlocks() // block events may have been missed too
	s.reconcileMemberships(ctx)
	for id, seq := range s.hub.Conversations() {
		msgs, err := s.store.MessageRange(ctx, id, seq+1, seq+int64(s.cfg.SyncLimit))
		if err != nil {
			s.log.Warn().Err(err).Str("conversation", id).Msg("resync after reconnect")
			continue
		}
		for _, m := range msgs {
			data, err := json.Marshal(message.View(m, ""))
			if err != nil {
				s.log.Error().Err(err).Msg("encode resynced message")
				continue
			}
			// Read from the store, not received from the bus: no delivery latency to measure.
			if s.deliverMessage(id, data, time.Time{}) {
				delivered++
			}
		}
	}
}

// reconcileMemberships applies the joins and leaves the store knows of and this node missed.
func (s *Service) reconcileMemberships(ctx context.Context) {
	for _, uid := range s.hub.Users() {
		convs, err := s.store.ConversationsOf(ctx, uid)
		if err != nil {
			s.log.Warn().Err(err).Str("user", uid).Msg("reconcile memberships after reconnect")
			continue
		}
		inStore := make(map[string]bool, len(convs))
		for _, c := range convs {
			inStore[c.ID] = true
			s.applyJoin(uid, toView(c, position{}, c.LastSeq), c.DeletedSeqs)
			s.learnDeleted(c.ID, c.DeletedSeqs) // deletions announced during the gap, too
		}
		u := s.online(uid)
		if u == nil {
			continue
		}
		var gone []string
		u.mu.Lock()
		for id := range u.positions {
			if !inStore[id] {
				gone = append(gone, id)
			}
		}
		u.mu.Unlock()
		for _, id := range gone {
			s.applyLeave(uid, id)
		}
	}
}

// toView is a conversation as one member sees it. Its unread leaves out the seqs the stored
// conversation records as deleted for everyone; its preview is left out when the member deleted
// the conversation for themselves after that message.
func toView(c storage.Conversation, p position, lastSeq int64) protocol.Conversation {
	last := max(c.LastSeq, lastSeq)
	read := min(p.readSeq, last)
	first := int64(0)
	if last > p.hiddenSeq {
		first = p.hiddenSeq + 1
	}
	var preview *protocol.MessagePreview
	if lm := c.LastMessage; lm != nil && lm.Seq > p.hiddenSeq {
		preview = &protocol.MessagePreview{Seq: lm.Seq, SenderID: lm.SenderID, Kind: lm.Kind, Body: lm.Body, CreatedAt: lm.CreatedAt,
			Attachment: message.RefView(lm.Attachment)}
	}
	return protocol.Conversation{
		ID: c.ID, Kind: c.Kind, Name: c.Name, Members: c.Members, FirstSeq: first, LastSeq: last,
		ReadSeq: read, Unread: storage.Unread(last, read, c.DeletedSeqs), CreatedAt: c.CreatedAt, CreatedBy: c.CreatedBy,
		Version: c.LastVersion, LastMessage: preview, Group: group.View(c, time.Now()),
		UnreadMentions: unreadMentions(p.mentions, read, c.DeletedSeqs),
	}
}
