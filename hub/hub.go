// Package hub is a node's registry of live sessions and its router of conversation events. It
// subscribes to a conversation's NATS subjects while at least one member is online on this node,
// encodes each persisted message once and writes the same bytes to every local socket that should
// see it, keeps each online user's unread badge in memory, and answers the client frames that a
// session hands it. Sends go through the sequencer; the hub never assigns a seq.
package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
)

// Store is what the hub reads and writes directly; sends go through the Sender.
type Store interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	ConversationsOf(ctx context.Context, userID string) ([]storage.Conversation, error)
	EnsureConversation(ctx context.Context, c storage.Conversation) (storage.Conversation, error)
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
	CursorsOf(ctx context.Context, userID string) ([]storage.Cursor, error)
	CountReaders(ctx context.Context, conversationID string, seq int64, senderID string) (int64, error)
	Readers(ctx context.Context, conversationID string, seq int64, senderID string, limit int64) ([]storage.Cursor, error)
	User(ctx context.Context, id string) (storage.User, error)
	MissingUsers(ctx context.Context, ids []string) ([]string, error)
	SetHideReceipts(ctx context.Context, userID string, hide bool) error
	AddMembers(ctx context.Context, id string, userIDs []string) error
	RemoveMember(ctx context.Context, id, userID string) error
	DeleteMessage(ctx context.Context, conversationID string, seq int64, senderID string) error
	HideConversation(ctx context.Context, userID, conversationID string, lastSeq int64) error
	DeleteAccount(ctx context.Context, userID string) (storage.DeletedAccount, error)
}

// Sender sequences and persists a message; the sequencer implements it.
type Sender interface {
	Send(ctx context.Context, req sequencer.SendRequest) (protocol.Message, error)
	Reload(ctx context.Context, conversationID string) error
}

// Hub routes conversation events to this node's sessions. One mutex guards the registry: every
// critical section is a few map operations and non-blocking enqueues.
type Hub struct {
	cfg   Config
	nc    *nats.Conn
	seq   Sender
	store Store
	reads *readstate.Coalescer
	log   zerolog.Logger

	mu    sync.Mutex
	users map[string]*onlineUser
	convs map[string]*liveConversation

	// events receives every subscription's messages; one dispatcher goroutine handles them in
	// arrival order. Channel subscriptions cost no goroutine each, unlike callback ones, which
	// matters with a subscription per online user and per live conversation.
	events chan *nats.Msg
	stop   chan struct{}
	done   chan struct{}
}

// eventBuffer bounds the NATS messages waiting for the dispatcher; past it NATS drops them as a
// slow consumer (logged), and clients fill the gap from history.
const eventBuffer = 1 << 16

// onlineUser is a user with at least one session on this node.
type onlineUser struct {
	id           string
	hideReceipts bool
	sessions     map[*session.Session]struct{}
	memberships  map[string]*membership
	total        int64 // sum of unread over memberships, kept incrementally
	sub          *nats.Subscription
}

// membership is one user's position in one conversation.
type membership struct {
	lastSeq   int64
	readSeq   int64
	hiddenSeq int64 // the user deleted the conversation for themselves at this seq
}

func (m *membership) unread() int64 { return max(0, m.lastSeq-m.readSeq) }

// liveConversation is a conversation with at least one member online on this node.
type liveConversation struct {
	id        string
	kind      string
	members   int // total members, for the live-receipts decision
	local     map[string]*onlineUser
	sub       *nats.Subscription
	// delivered is the highest seq delivered here. Delivery only moves forward, so every socket
	// sees a conversation in seq order, each seq once; a message that arrives behind a later one
	// (republished after an owner failover) is left to the clients' gap fill from history.
	delivered int64
}

// New returns a hub. reads receives every cursor move and is flushed on disconnect.
func New(cfg Config, nc *nats.Conn, seq Sender, store Store, reads *readstate.Coalescer, log zerolog.Logger) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{
		cfg:    cfg.withDefaults(),
		nc:     nc,
		seq:    seq,
		store:  store,
		reads:  reads,
		log:    log.With().Str("component", "hub").Logger(),
		users:  make(map[string]*onlineUser),
		convs:  make(map[string]*liveConversation),
		events: make(chan *nats.Msg, eventBuffer),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go h.dispatch()
	return h, nil
}

// Close stops the dispatcher. Sessions must be closed first.
func (h *Hub) Close() {
	close(h.stop)
	<-h.done
}

func (h *Hub) dispatch() {
	defer close(h.done)
	userPrefix := h.cfg.SubjectPrefix + ".user."
	for {
		select {
		case m := <-h.events:
			if strings.HasPrefix(m.Subject, userPrefix) {
				h.onUserEvent(m)
			} else {
				h.onConversationEvent(m)
			}
		case <-h.stop:
			return
		}
	}
}

// Subjects. Conversation events share one wildcard subscription per conversation.
func (h *Hub) userSubject(userID string) string { return h.cfg.SubjectPrefix + ".user." + userID }
func (h *Hub) conversationWildcard(id string) string {
	return h.cfg.SubjectPrefix + ".conv." + id + ".*"
}
func (h *Hub) conversationEventSubject(id string) string {
	return h.cfg.SubjectPrefix + ".conv." + id + ".evt"
}

// Opened registers a session: on the user's first session here it rebuilds the user's badge from
// cursors and lastSeq, O(conversations), and subscribes to the user's conversations.
func (h *Hub) Opened(ctx context.Context, s *session.Session) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.OpTimeout)
	defer cancel()
	uid := s.UserID()
	user, err := h.store.User(ctx, uid)
	if err != nil {
		return fmt.Errorf("load user %s: %w", uid, err)
	}
	convs, err := h.store.ConversationsOf(ctx, uid)
	if err != nil {
		return err
	}
	// A read sent just before a reload may still be pending here; store it before loading.
	if err := h.reads.Flush(ctx); err != nil {
		h.log.Warn().Err(err).Msg("flush read cursors before loading them")
	}
	cursors, err := h.store.CursorsOf(ctx, uid)
	if err != nil {
		return err
	}
	byConv := make(map[string]storage.Cursor, len(cursors))
	for _, c := range cursors {
		byConv[c.ConversationID] = c
	}

	h.mu.Lock()
	u, ok := h.users[uid]
	if ok && len(u.sessions) >= h.cfg.MaxConnectionsPerUser {
		h.mu.Unlock()
		return protocol.Errorf(protocol.CodeRateLimited, "at most %d connections per user", h.cfg.MaxConnectionsPerUser)
	}
	if !ok {
		u, err = h.addUser(user, convs, byConv)
		if err != nil {
			h.mu.Unlock()
			return err
		}
	}
	u.sessions[s] = struct{}{}
	total := u.total
	h.mu.Unlock()

	s.Reply(protocol.ServerFrame{Type: protocol.TypeHello, UserID: uid, SessionID: s.ID()})
	s.Reply(protocol.ServerFrame{Type: protocol.TypeBadge, Total: &total})
	return nil
}

// addUser registers a user's first session on this node. h.mu is held.
func (h *Hub) addUser(user storage.User, convs []storage.Conversation, cursors map[string]storage.Cursor) (*onlineUser, error) {
	u := &onlineUser{
		id:           user.ID,
		hideReceipts: user.HideReceipts,
		sessions:     make(map[*session.Session]struct{}),
		memberships:  make(map[string]*membership, len(convs)),
	}
	sub, err := h.nc.ChanSubscribe(h.userSubject(user.ID), h.events)
	if err != nil {
		return nil, fmt.Errorf("subscribe to user %s: %w", user.ID, err)
	}
	u.sub = sub
	h.users[user.ID] = u
	for _, c := range convs {
		if err := h.join(u, c.ID, c.Kind, len(c.Members), c.LastSeq, cursors[c.ID].ReadSeq); err != nil {
			h.removeUser(u)
			return nil, err
		}
		u.memberships[c.ID].hiddenSeq = cursors[c.ID].HiddenSeq
	}
	return u, nil
}

// join adds a membership to an online user and subscribes to the conversation if it is the first
// local member. It is idempotent. h.mu is held.
func (h *Hub) join(u *onlineUser, convID, kind string, members int, lastSeq, readSeq int64) error {
	if _, ok := u.memberships[convID]; ok {
		return nil
	}
	c, ok := h.convs[convID]
	if !ok {
		sub, err := h.nc.ChanSubscribe(h.conversationWildcard(convID), h.events)
		if err != nil {
			return fmt.Errorf("subscribe to conversation %s: %w", convID, err)
		}
		c = &liveConversation{id: convID, kind: kind, members: members, local: make(map[string]*onlineUser), sub: sub,
			delivered: lastSeq}
		h.convs[convID] = c
	}
	c.members = max(c.members, members)
	c.local[u.id] = u
	m := &membership{lastSeq: lastSeq, readSeq: min(readSeq, lastSeq)}
	u.memberships[convID] = m
	u.total += m.unread()
	return nil
}

// leave removes a membership and unsubscribes when the last local member left. h.mu is held.
func (h *Hub) leave(u *onlineUser, convID string) {
	m, ok := u.memberships[convID]
	if !ok {
		return
	}
	u.total -= m.unread()
	delete(u.memberships, convID)
	c, ok := h.convs[convID]
	if !ok {
		return
	}
	delete(c.local, u.id)
	if len(c.local) == 0 {
		if err := c.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			h.log.Warn().Err(err).Str("conversation", convID).Msg("unsubscribe conversation")
		}
		delete(h.convs, convID)
	}
}

// removeUser drops a user with no sessions left. h.mu is held.
func (h *Hub) removeUser(u *onlineUser) {
	for convID := range u.memberships {
		h.leave(u, convID)
	}
	if err := u.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn().Err(err).Str("user", u.id).Msg("unsubscribe user")
	}
	delete(h.users, u.id)
}

// Closed unregisters a session and writes the user's pending cursor moves.
func (h *Hub) Closed(s *session.Session) {
	h.mu.Lock()
	if u, ok := h.users[s.UserID()]; ok {
		delete(u.sessions, s)
		if len(u.sessions) == 0 {
			h.removeUser(u)
		}
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
	defer cancel()
	if err := h.reads.Flush(ctx); err != nil {
		h.log.Warn().Err(err).Msg("flush read cursors on disconnect")
	}
}

// OnlineSessions counts the sessions registered on this node.
func (h *Hub) OnlineSessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, u := range h.users {
		n += len(u.sessions)
	}
	return n
}

// conversationEvent is what nodes publish on a conversation's evt subject.
type conversationEvent struct {
	Type    string `json:"type"` // receipt, typing or deleted
	UserID  string `json:"userId"`
	ReadSeq int64  `json:"readSeq,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
}

// onConversationEvent delivers a persisted message (subject ...msg) or a receipt or typing event
// (subject ...evt) to the local members.
func (h *Hub) onConversationEvent(m *nats.Msg) {
	switch {
	case strings.HasSuffix(m.Subject, ".msg"):
		h.deliverMessage(m.Data)
	case strings.HasSuffix(m.Subject, ".evt"):
		convID := strings.TrimSuffix(strings.TrimPrefix(m.Subject, h.cfg.SubjectPrefix+".conv."), ".evt")
		h.deliverEvent(convID, m.Data)
	}
}

// deliverMessage writes one encoding of the message to every local session of every member, and
// moves their badges.
func (h *Hub) deliverMessage(data []byte) {
	var msg protocol.Message
	if err := json.Unmarshal(data, &msg); err != nil {
		h.log.Error().Err(err).Msg("undecodable message event")
		return
	}
	frame := protocol.PushFromEncodedMessage(data)
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.convs[msg.ConversationID]
	if !ok || msg.Seq <= c.delivered {
		return // nobody here, or not newer than what was delivered
	}
	c.delivered = msg.Seq
	for _, u := range c.local {
		ms, ok := u.memberships[msg.ConversationID]
		if !ok {
			continue
		}
		before := ms.unread()
		ms.lastSeq = max(ms.lastSeq, msg.Seq)
		if msg.SenderID == u.id {
			// Own messages are never unread, on any of the sender's devices.
			ms.readSeq = max(ms.readSeq, msg.Seq)
		}
		u.total += ms.unread() - before
		badge := h.badgeFrame(u, msg.ConversationID, ms)
		for s := range u.sessions {
			s.Enqueue(frame)
			if badge != nil {
				s.Enqueue(badge)
			}
		}
	}
}

// Resync catches up after this node could not hear NATS (core NATS drops what is published
// meanwhile). It first reconciles every online user's memberships with the store, so a join or a
// removal announced during the gap takes effect here too; then it delivers, per live
// conversation, the messages after the highest seq delivered here, up to SyncLimit (clients fill
// anything beyond from history).
func (h *Hub) Resync(ctx context.Context) {
	h.reconcileMemberships(ctx)
	h.mu.Lock()
	after := make(map[string]int64, len(h.convs))
	for id, c := range h.convs {
		after[id] = c.delivered
	}
	h.mu.Unlock()
	for id, seq := range after {
		msgs, err := h.store.MessageRange(ctx, id, seq+1, seq+int64(h.cfg.SyncLimit))
		if err != nil {
			h.log.Warn().Err(err).Str("conversation", id).Msg("resync after reconnect")
			continue
		}
		for _, m := range msgs {
			data, err := json.Marshal(sequencer.WireMessage(m))
			if err != nil {
				h.log.Error().Err(err).Msg("encode resynced message")
				continue
			}
			h.deliverMessage(data)
		}
	}
}

// reconcileMemberships applies the joins and leaves the store knows of and this node missed.
func (h *Hub) reconcileMemberships(ctx context.Context) {
	h.mu.Lock()
	users := make([]string, 0, len(h.users))
	for id := range h.users {
		users = append(users, id)
	}
	h.mu.Unlock()
	for _, uid := range users {
		convs, err := h.store.ConversationsOf(ctx, uid)
		if err != nil {
			h.log.Warn().Err(err).Str("user", uid).Msg("reconcile memberships after reconnect")
			continue
		}
		inStore := make(map[string]bool, len(convs))
		for _, c := range convs {
			inStore[c.ID] = true
			h.applyJoin(uid, toView(c, membership{lastSeq: c.LastSeq}))
		}
		h.mu.Lock()
		var gone []string
		if u, ok := h.users[uid]; ok {
			for id := range u.memberships {
				if !inStore[id] {
					gone = append(gone, id)
				}
			}
		}
		h.mu.Unlock()
		for _, id := range gone {
			h.applyLeave(uid, id)
		}
	}
}

// badgeFrame encodes a user's badge after a change in one conversation.
func (h *Hub) badgeFrame(u *onlineUser, convID string, ms *membership) []byte {
	total, unread := u.total, ms.unread()
	data, err := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeBadge, ConversationID: convID,
		Total: &total, Unread: &unread, ReadSeq: ms.readSeq, LastSeq: ms.lastSeq})
	if err != nil {
		h.log.Error().Err(err).Msg("encode badge")
		return nil
	}
	return data
}

func (h *Hub) deliverEvent(convID string, data []byte) {
	var ev conversationEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		h.log.Error().Err(err).Msg("undecodable conversation event")
		return
	}
	f := protocol.ServerFrame{Type: ev.Type, ConversationID: convID, UserID: ev.UserID, ReadSeq: ev.ReadSeq, Seq: ev.Seq}
	// A user's own typing and receipts are not news to them; a deletion is, on their other devices.
	skipActor := ev.Type != protocol.TypeDeleted
	frame, err := protocol.Encode(f)
	if err != nil {
		h.log.Error().Err(err).Msg("encode conversation event")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.convs[convID]
	if !ok {
		return
	}
	for _, u := range c.local {
		if skipActor && u.id == ev.UserID {
			continue
		}
		for s := range u.sessions {
			s.Enqueue(frame)
		}
	}
}

// userEvent is what nodes publish on a user's subject, so all of a user's devices on any node agree.
type userEvent struct {
	Type         string                 `json:"type"` // joined, left or cursor
	Conversation *protocol.Conversation `json:"conversation,omitempty"`
	ConvID       string                 `json:"conversationId,omitempty"`
	ReadSeq      int64                  `json:"readSeq,omitempty"`
}

// User event types.
const (
	userJoined  = "joined"
	userLeft    = "left"
	userCursor  = "cursor"
	userHidden  = "hidden"
	userDeleted = "deleted"
)

func (h *Hub) publishUserEvent(userID string, ev userEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		h.log.Error().Err(err).Msg("encode user event")
		return
	}
	if err := h.nc.Publish(h.userSubject(userID), data); err != nil {
		h.log.Warn().Err(err).Str("user", userID).Msg("publish user event")
	}
}

func (h *Hub) publishConversationEvent(convID string, ev conversationEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		h.log.Error().Err(err).Msg("encode conversation event")
		return
	}
	if err := h.nc.Publish(h.conversationEventSubject(convID), data); err != nil {
		h.log.Warn().Err(err).Str("conversation", convID).Msg("publish conversation event")
	}
}

func (h *Hub) onUserEvent(m *nats.Msg) {
	var ev userEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		h.log.Error().Err(err).Msg("undecodable user event")
		return
	}
	userID := strings.TrimPrefix(m.Subject, h.cfg.SubjectPrefix+".user.")
	switch ev.Type {
	case userJoined:
		if ev.Conversation != nil {
			h.applyJoin(userID, *ev.Conversation)
		}
	case userLeft:
		h.applyLeave(userID, ev.ConvID)
	case userCursor:
		h.applyCursor(userID, ev.ConvID, ev.ReadSeq)
	case userHidden:
		h.applyHide(userID, ev.ConvID, ev.ReadSeq)
	case userDeleted:
		h.closeUser(userID, "account deleted")
	}
}

// applyJoin makes a conversation live for an online user and tells their sessions.
func (h *Hub) applyJoin(userID string, conv protocol.Conversation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[userID]
	if !ok {
		return
	}
	if _, known := u.memberships[conv.ID]; known {
		return
	}
	if err := h.join(u, conv.ID, conv.Kind, len(conv.Members), conv.LastSeq, 0); err != nil {
		h.log.Error().Err(err).Str("user", userID).Str("conversation", conv.ID).Msg("join conversation")
		return
	}
	ms := u.memberships[conv.ID]
	conv.ReadSeq, conv.Unread = ms.readSeq, ms.unread()
	h.broadcast(u, protocol.ServerFrame{Type: protocol.TypeConversation, Conversation: &conv})
	if badge := h.badgeFrame(u, conv.ID, ms); badge != nil {
		for s := range u.sessions {
			s.Enqueue(badge)
		}
	}
}

// applyLeave removes a conversation from an online user's view.
func (h *Hub) applyLeave(userID, convID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[userID]
	if !ok {
		return
	}
	if _, known := u.memberships[convID]; !known {
		return
	}
	h.leave(u, convID)
	total := u.total
	h.broadcast(u, protocol.ServerFrame{Type: protocol.TypeRemoved, ConversationID: convID})
	h.broadcast(u, protocol.ServerFrame{Type: protocol.TypeBadge, Total: &total})
}

// applyCursor moves an online user's read position forward and tells all their sessions, so every
// device clears together.
func (h *Hub) applyCursor(userID, convID string, readSeq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[userID]
	if !ok {
		return
	}
	ms, ok := u.memberships[convID]
	if !ok {
		return
	}
	if readSeq > ms.readSeq {
		before := ms.unread()
		ms.readSeq = readSeq
		ms.lastSeq = max(ms.lastSeq, readSeq)
		u.total += ms.unread() - before
	}
	h.broadcast(u, protocol.ServerFrame{Type: protocol.TypeCursor, ConversationID: convID, ReadSeq: ms.readSeq})
	if badge := h.badgeFrame(u, convID, ms); badge != nil {
		for s := range u.sessions {
			s.Enqueue(badge)
		}
	}
}

// applyHide hides a conversation from an online user's list up to seq and clears its unread.
func (h *Hub) applyHide(userID, convID string, seq int64) {
	h.applyCursor(userID, convID, seq)
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[userID]
	if !ok {
		return
	}
	if ms, ok := u.memberships[convID]; ok {
		ms.hiddenSeq = max(ms.hiddenSeq, seq)
		h.broadcast(u, protocol.ServerFrame{Type: protocol.TypeHidden, ConversationID: convID, Seq: ms.hiddenSeq})
	}
}

// closeUser ends every session of a user on this node.
func (h *Hub) closeUser(userID, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.users[userID]; ok {
		for s := range u.sessions {
			s.Close(session.StatusRemoved, reason)
		}
	}
}

// broadcast encodes f once and queues it on every session of u. h.mu is held.
func (h *Hub) broadcast(u *onlineUser, f protocol.ServerFrame) {
	data, err := protocol.Encode(f)
	if err != nil {
		h.log.Error().Err(err).Msg("encode frame")
		return
	}
	for s := range u.sessions {
		s.Enqueue(data)
	}
}

// now is the clock for stored timestamps.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }
