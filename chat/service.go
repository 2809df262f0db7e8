// Package chat is the chat service: every operation a user can do (send, edit, react, delete,
// open a DM, create a group, change members, list, sync, page history, read, receipts, typing,
// hide, privacy, account deletion, badge) as a plain method that takes the caller's user id and
// returns values or refusals: *protocol.Error, of the kinds protocol declares
// (protocol.ErrNotMember, ...), which the session answers as they are; any other error is a
// failure, answered as internal. The WebSocket router and the HTTP API both call it; neither
// holds chat logic. It keeps, for the users connected to this node, their read positions in memory, and
// it turns the events of the bus into frames that the hub delivers. Every state change
// reaches a device by one path, applied idempotently (positions only move forward), so one change
// is one frame per device. Sends and changes of stored messages go through the sequencer; the
// service never assigns a seq or a version.
package chat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// noSuchUser is the refusal for naming a user who does not exist or whose account is gone, and,
// word for word, for a user who blocks the asker (see blocks.go).
const noSuchUser = "no such user: %s"

// Store is what the parts read and write, their stores together; the connection lifecycle (a
// user's load) and the resync read through it too. Sends and changes go through the Sender.
type Store interface {
	presenceStore
	blockStore
	readStore
	memberStore
	messageStore
}

// Sender sequences and persists a message, or a change of one; the sequencer implements it.
type Sender interface {
	Send(ctx context.Context, req sequencer.SendRequest) (protocol.Message, error)
	Reload(ctx context.Context, conversationID string) error
	EraseSender(ctx context.Context, conversationID, userID string) ([]int64, error)
	Administer(ctx context.Context, req sequencer.SendRequest) (protocol.Message, storage.GroupUpdate, error)
}

// Reads coalesces read-cursor moves; readstate implements it.
type Reads interface {
	Advance(cur storage.Cursor)
	Pending(userID string) []storage.Cursor
	FlushUser(ctx context.Context, userID string) error
	FlushConversation(ctx context.Context, conversationID string) error
}

// Bus publishes events to every node that needs them, and subscribes this node to the events of
// the conversations and users it holds; the bus package implements it and hands what it receives
// back to the service's Handle methods. Watching what is watched already, or unwatching what is
// not, changes nothing.
type Bus interface {
	PublishConversation(conversationID string, data []byte) error
	PublishUser(userID string, data []byte) error
	WatchConversation(conversationID string)
	UnwatchConversation(conversationID string)
	WatchUser(userID string)
	UnwatchUser(userID string)
}

// Conn is one live connection of a user.
type Conn interface {
	hub.Conn
	// End closes the connection because its user is gone (the account was deleted).
	End(reason string)
}

// Service is the chat service of one node. It is safe for concurrent use.
type Service struct {
	*live
	// presence records and tells who is online and answers for display names (presence.go,
	// profiles.go): a part of its own, with its own store.
	*presence
	// blocking keeps blocks and checks them (blocks.go): a part of its own, with its own store.
	*blocking
	// readState moves read and delivered positions and counts receipts and unread (reads.go): a
	// part of its own, with its own store.
	*readState
	// membership makes conversations and changes who is in them (members.go): a part of its own,
	// with its own store.
	*membership
	// messaging sends, pages, syncs, lists, changes and hides messages and conversations (ops.go,
	// changes.go, sharedreads.go): a part of its own, with its own store.
	*messaging

	// store serves the connection lifecycle (a user's load) and the resync after a NATS
	// reconnect, which are the service's own; Close writes pending cursors through readState's
	// Reads.
	store Store
}

// messageStore is what messaging reads and writes; sends and changes go through the Sender.
type messageStore interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	ConversationsOf(ctx context.Context, userID string) ([]storage.Conversation, error)
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
	ChangedMessages(ctx context.Context, conversationID string, afterVersion, maxSeq int64, limit int) ([]storage.Message, error)
	HideConversation(ctx context.Context, userID, conversationID string, lastSeq int64) error
	NotifySettings(ctx context.Context, userID string) (map[string]string, error)
	SetNotify(ctx context.Context, userID, conversationID, level string) error
}

// messaging is the part of the service that carries messages: sends (through the conversation's
// owner), history pages, the sync of a (re)connecting session, the list, edits, reactions and
// deletes, hiding a conversation, typing, and the delivery of what the bus brings. It shares the
// hub and the bus with the other parts (live), asks blocking before a DM's send and read state
// for cursors, and has a store of its own.
type messaging struct {
	*live
	store   messageStore
	seq     Sender
	blocks  *blocking
	cursors *readState

	typing typingThrottle

	// syncRanges and pageRanges merge identical concurrent message range reads of syncs and of
	// history pages, and convs the conversation look-ups of history and hiding (see sharedReads).
	// Syncs and pages are kept apart so a page never waits for a sync read slot.
	syncRanges *sharedReads[messageRange, []storage.Message]
	pageRanges *sharedReads[messageRange, []storage.Message]
	convs      *sharedReads[string, storage.Conversation]
	// syncReads holds one token per store read of a connecting or syncing session running now, at
	// most MaxConcurrentSyncReads: a reconnect storm queues here rather than in the store.
	syncReads chan struct{}
}

// newMessaging returns the messaging part.
func newMessaging(store messageStore, seq Sender, blocks *blocking, cursors *readState, l *live) *messaging {
	m := &messaging{live: l, store: store, seq: seq, blocks: blocks, cursors: cursors,
		pageRanges: newSharedReads[messageRange, []storage.Message](l.cfg.OpTimeout, nil),
		convs:      newSharedReads[string, storage.Conversation](l.cfg.OpTimeout, nil),
		syncReads:  make(chan struct{}, l.cfg.MaxConcurrentSyncReads)}
	m.syncRanges = newSharedReads[messageRange, []storage.Message](l.cfg.OpTimeout, m.admitSyncRange)
	m.typing.seen = make(map[typingKey]time.Time)
	return m
}

// messageRange is one exact range read, the key under which identical reads are merged.
type messageRange struct {
	conversationID string
	from, to       int64
}

// onlineUser is what the service keeps of a user with a connection here, in the hub's entry of the
// user: it lives from their first connection here to their last.
type onlineUser struct {
	// loaded is closed once the user's state has been read from the store, loadErr saying how
	// that went. The user's events are heard from before the read starts, so none published
	// meanwhile is missed.
	loaded  chan struct{}
	loadErr error

	mu           sync.Mutex
	hideReceipts bool
	hidePresence bool
	positions    map[string]*position
	// peers are the members of the user's DMs and small groups: who hears of their presence.
	peers map[string]struct{}
	// toldOnline is, for each peer whose presence the user's devices here were pushed, whether
	// the last push said online (see tellPresence).
	toldOnline map[string]bool
	// left remembers, while the state is loading, the conversations the user left meanwhile, so
	// the load does not bring them back; nil once loaded.
	left map[string]bool
	// blockGen counts the forgetting of the user's cached DM block states (see blocks.go), so a
	// store read that raced with a block or unblock does not cache what it read.
	blockGen uint64
	// loadedNone says the load found the user in no conversation (a new account, most often):
	// the first list then needs no store read while they have joined none since (see
	// listConversations). Set by the load, taken by the first list.
	loadedNone bool
}

// position is one member's place in one conversation. The conversation's last seq is the highest
// one the hub delivered here, or the store's when the position was loaded if that is
// ahead (messages written behind the sequencer's back, by a backfill).
type position struct {
	kind      string
	members   int // for the live-receipts decision
	loadedSeq int64
	readSeq   int64
	// deliveredSeq is how far the user's devices have said they received (see Delivered).
	deliveredSeq int64
	hiddenSeq    int64 // the user deleted the conversation for themselves at this seq
	// mentions are the seqs of the newest messages that mention the user (see mentions.go).
	mentions []int64
	// peer is the other member of a DM; block caches whether a block stands between them.
	peer  string
	block blockState
}

// New returns a service, with the hub of the node's live connections that it delivers through
// (tuned by cfg.Hub). Register it as the bus's handler.
func New(cfg Config, store Store, seq Sender, reads Reads, bus Bus, log zerolog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := newLive(cfg, bus, log.With().Str("component", "chat").Logger())
	blocks := &blocking{live: l, store: store}
	cursors := &readState{live: l, store: store, reads: reads}
	return &Service{live: l, presence: newPresence(store, l), blocking: blocks, readState: cursors,
		membership: &membership{live: l, store: store, seq: seq, blocks: blocks},
		messaging:  newMessaging(store, seq, blocks, cursors, l), store: store}, nil
}

// positionOf returns a copy of a member's position, or protocol.ErrNotMember.
func (s *live) positionOf(userID, convID string) (position, error) {
	if u := s.online(userID); u != nil {
		u.mu.Lock()
		defer u.mu.Unlock()
		if p, ok := u.positions[convID]; ok {
			return *p, nil
		}
	}
	return position{}, protocol.ErrNotMember
}

// lastSeq is the highest seq of a conversation known here, given a member's position in it.
func (s *live) lastSeq(convID string, p position) int64 {
	seq, _ := s.hub.Delivered(convID)
	return max(seq, p.loadedSeq)
}

// Open registers a connection of its user and returns the user's total unread. On the user's first
// connection here it loads their conversations and read positions (O(conversations), reading
// through cursor moves not yet written), in one of the node's sync read slots (see
// MaxConcurrentSyncReads); the connection then receives its conversations' events. account, if
// not nil, is the user's account as the caller has just read it from the store (its privacy
// settings are part of the state); Open reads it otherwise.
func (s *Service) Open(ctx context.Context, c Conn, account *storage.User) (int64, error) {
	uid := c.UserID()
	fresh := &onlineUser{loaded: make(chan struct{}), positions: make(map[string]*position), left: make(map[string]bool)}
	// The user's events are heard from here on.
	u, first, ok := s.hub.Add(c, s.cfg.MaxConnectionsPerUser, fresh)
	if !ok {
		return 0, protocol.Refuse(protocol.ErrRateLimited, "at most %d connections per user", s.cfg.MaxConnectionsPerUser)
	}
	if first {
		s.watchUser(uid)
		u.loadErr = s.load(ctx, uid, u, account)
		close(u.loaded)
		if u.loadErr == nil {
			s.changed(uid, u)
		}
	}
	select {
	case <-u.loaded:
	case <-ctx.Done():
		s.Close(c)
		return 0, fmt.Errorf("wait for the state of %s: %w", uid, ctx.Err())
	}
	if u.loadErr != nil {
		s.Close(c)
		return 0, u.loadErr
	}
	return s.total(u), nil
}

// load reads an online user's state from the store and routes their conversations to them. Joins
// and leaves heard on the bus while it reads win over what it read. account, if not nil, is the
// user's account read from the store a moment ago, and is not read again.
func (s *Service) load(ctx context.Context, uid string, u *onlineUser, account *storage.User) error {
	release, err := s.syncReadSlot(ctx) // one slot for the three reads: a load, once started, ends soon
	if err != nil {
		return fmt.Errorf("load %s: %w", uid, err)
	}
	defer release()
	var user storage.User
	if account != nil {
		user = *account
	} else if user, err = s.store.User(ctx, uid); err != nil {
		return fmt.Errorf("load user %s: %w", uid, err)
	}
	convs, err := s.store.ConversationsOf(ctx, uid)
	if err != nil {
		return fmt.Errorf("load conversations of %s: %w", uid, err)
	}
	var cursors map[string]storage.Cursor
	if len(convs) > 0 { // read positions matter only in conversations
		if cursors, err = s.cursorsOf(ctx, uid); err != nil {
			return err
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hideReceipts, u.hidePresence = user.HideReceipts, user.HidePresence
	u.loadedNone = len(convs) == 0
	for _, conv := range convs {
		if _, known := u.positions[conv.ID]; known || u.left[conv.ID] {
			continue
		}
		cur := cursors[conv.ID]
		read := conv.ReadSeq(uid, cur)
		u.positions[conv.ID] = &position{kind: conv.Kind, members: len(conv.Members), loadedSeq: conv.LastSeq,
			readSeq: min(read, conv.LastSeq), deliveredSeq: min(max(cur.DeliveredSeq, read), conv.LastSeq),
			hiddenSeq: cur.HiddenSeq, peer: dmPeer(conv.Kind, conv.Members, uid), mentions: conv.Mentioned[uid]}
		if s.hub.Join(uid, conv.ID, conv.LastSeq) {
			s.watchConversation(conv.ID)
		}
		s.learnDeleted(conv.ID, conv.DeletedSeqs) // after the join, so no forget undoes it
		s.addPeers(uid, u, conv.Kind, conv.Members)
	}
	u.left = nil
	return nil
}

// Close unregisters a connection. With the user's last connection here their pending cursor
// moves are written, so a reconnect to another node finds them; nobody else's are.
func (s *Service) Close(c Conn) {
	uid := c.UserID()
	u, last := s.hub.Remove(c)
	if !last {
		return
	}
	s.watchUser(uid)
	for _, id := range u.conversations() {
		s.watchConversation(id)
	}
	// A user whose load has not finished was never queued online, and Open will not queue them now.
	if isClosed(u.loaded) && u.loadErr == nil {
		s.changed(uid, u)
	}
	s.forgetDeleted(u.conversations()...)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	defer cancel()
	if err := s.reads.FlushUser(ctx, uid); err != nil {
		s.log.Warn().Err(err).Str("user", uid).Msg("write read cursors on disconnect")
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// total sums an online user's unread over their conversations.
func (s *live) total(u *onlineUser) int64 {
	return u.sum(func(id string, p *position) int64 { return s.unreadOf(id, *p) })
}

// conversations returns the ids of the conversations routed to an online user.
func (u *onlineUser) conversations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := make([]string, 0, len(u.positions))
	for id := range u.positions {
		ids = append(ids, id)
	}
	return ids
}

// now is the clock for stored timestamps.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// typingThrottle lets a user's typing in a conversation fan out at most once per interval.
type typingThrottle struct {
	mu   sync.Mutex
	seen map[typingKey]time.Time
}

type typingKey struct{ user, conversation string }

// maxTypingEntries bounds the throttle's memory; past it, entries older than the interval go.
const maxTypingEntries = 10000

// allow reports whether a typing event of user in conversation may fan out now.
func (t *typingThrottle) allow(user, conversation string, interval time.Duration) bool {
	k, at := typingKey{user, conversation}, time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if last, ok := t.seen[k]; ok && at.Sub(last) < interval {
		return false
	}
	if len(t.seen) >= maxTypingEntries {
		for key, last := range t.seen {
			if at.Sub(last) >= interval {
				delete(t.seen, key)
			}
		}
	}
	t.seen[k] = at
	return true
}
