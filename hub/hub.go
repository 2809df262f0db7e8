// Package hub is a node's registry of live connections and its delivery engine. It knows which
// local connections belong to which user and which users of this node are members of which
// conversation, and writes an already-encoded frame to every connection that should see it: the
// same bytes to all of them, encoded once by the caller. It gives each connection a
// conversation's messages in seq order and each seq once, across a reconnect's replay and live
// delivery. It knows nothing of NATS, the store or read state; the chat service drives it.
//
// There is no node-wide lock on the delivery path: users and conversations live in maps sharded by
// id, each conversation entry has its own lock, and delivering to one conversation never waits
// for another.
package hub

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults, each with its reason.
const (
	// shards splits the user and conversation maps so that joins and lookups of unrelated ids do
	// not contend; 64 is plenty for two to a few dozen cores.
	shards = 64
	// DefaultSyncGrace is how long a new connection's message pushes are held for its first sync
	// (see Hub.Sync); a client that never syncs gets them after this.
	DefaultSyncGrace = 2 * time.Second
	// DefaultMaxHeld bounds the pushes held for one connection while it syncs; past it they are
	// dropped and the client fills the gap from history, as after any gap.
	DefaultMaxHeld = 1024
)

// Conn is one live connection as the hub sees it. Implementations must not block in Push or
// PushEphemeral and must not call back into the hub from them.
type Conn interface {
	// UserID is the connection's authenticated user.
	UserID() string
	// Push queues a frame that must reach the reader; the connection decides what to do with a
	// reader that cannot take it (it is cut and resyncs on reconnect).
	Push(frame []byte) bool
	// PushWait queues a frame the client asked for, waiting for room.
	PushWait(ctx context.Context, frame []byte) error
	// PushEphemeral queues a frame that replaces a waiting one with the same key and may be
	// dropped for a reader that falls behind.
	PushEphemeral(key string, frame []byte)
}

// Config tunes a Hub. Zero fields take the defaults above.
type Config struct {
	SyncGrace time.Duration
	MaxHeld   int
	// Metrics, if set, records the message pushes and their delivery latency; nil records
	// nothing.
	Metrics *Metrics
}

// Hub routes frames to this node's connections, and keeps, with each user connected here, the
// state U its consumer holds of them (the chat service's read positions and settings): one
// registry of who is online here, under one shard set. It is safe for concurrent use; deliveries
// of one conversation are serialized by that conversation's lock, so they reach every connection
// in the order they were delivered.
//
// The hub reports, and does not act on, the interest its changes make: Add says whether a user's
// first connection came, Remove whether their last went, Join and Leave whether a route changed.
// Whoever drives it subscribes to the events that interest needs (see Watching), outside any of
// the hub's locks.
type Hub[C Conn, U any] struct {
	cfg   Config
	seed  maphash.Seed
	users [shards]userShard[C, U]
	convs [shards]convShard[C]
	conns atomic.Int64
}

type userShard[C Conn, U any] struct {
	mu sync.RWMutex
	m  map[string]*userEntry[C, U]
}

// userEntry is a user with at least one connection here, the conversations routed to them, and
// the consumer's state of them, which lives exactly as long as the entry.
type userEntry[C Conn, U any] struct {
	conns map[*connState[C]]struct{}
	convs map[string]struct{}
	state U
}

type convShard[C Conn] struct {
	mu sync.RWMutex
	m  map[string]*convEntry[C]
}

// convEntry is a conversation with at least one member connected here.
type convEntry[C Conn] struct {
	mu    sync.Mutex
	gone  bool // removed from its shard; a delivery that still holds it does nothing
	conns *connSet[C]
	// delivered is the highest seq delivered here: delivery only moves forward, so a message that
	// arrives behind a later one (republished after an owner failover) is left to the clients' gap
	// fill from history.
	delivered int64
	// positions holds, per key, the highest position an ephemeral frame has carried (receipts), so
	// those pushes only move forward.
	positions map[string]int64
}

// connState is the hub's view of one connection.
type connState[C Conn] struct {
	conn C

	syncMu sync.Mutex // one sync at a time per connection

	mu      sync.Mutex
	sent    map[string]int64 // per conversation, the highest seq given to this connection
	focus   string           // the conversation the client shows now, "" for none
	holding bool
	held    []heldPush
	maxHeld int
	grace   *time.Timer
	metrics *Metrics
}

type heldPush struct {
	conversationID string
	seq            int64
	frame          []byte
}

// New returns a hub.
func New[C Conn, U any](cfg Config) *Hub[C, U] {
	if cfg.SyncGrace <= 0 {
		cfg.SyncGrace = DefaultSyncGrace
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	e := &Hub[C, U]{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range e.users {
		e.users[i].m = make(map[string]*userEntry[C, U])
		e.convs[i].m = make(map[string]*convEntry[C])
	}
	return e
}

func (e *Hub[C, U]) userShard(id string) *userShard[C, U] {
	return &e.users[maphash.String(e.seed, id)%shards]
}
func (e *Hub[C, U]) convShard(id string) *convShard[C] {
	return &e.convs[maphash.String(e.seed, id)%shards]
}

// Add registers a connection, unless its user has limit connections here already (limit <= 0:
// no limit), when ok is false and nothing changes. It joins the conversations its user already
// has routed here (see Join); on the user's first connection there are none yet, and fresh
// becomes the user's state. The connection's message pushes are held until its first Sync or for
// the sync grace. It returns the user's state and whether this is their first connection here.
func (e *Hub[C, U]) Add(c C, limit int, fresh U) (state U, first, ok bool) {
	uid := c.UserID()
	us := e.userShard(uid)
	us.mu.Lock()
	defer us.mu.Unlock()
	u, known := us.m[uid]
	if known && limit > 0 && len(u.conns) >= limit {
		return u.state, false, false
	}
	if !known {
		u = &userEntry[C, U]{conns: make(map[*connState[C]]struct{}), convs: make(map[string]struct{}), state: fresh}
		us.m[uid] = u
	}
	cs := &connState[C]{conn: c, sent: make(map[string]int64), holding: true, maxHeld: e.cfg.MaxHeld,
		metrics: e.cfg.Metrics}
	cs.grace = time.AfterFunc(e.cfg.SyncGrace, func() { cs.release() })
	for id := range u.convs {
		e.attach(id, 0, cs)
	}
	u.conns[cs] = struct{}{}
	e.conns.Add(1)
	return u.state, !known, true
}

// attach adds connections to a conversation's entry, creating it (delivered = lastSeq) for the
// first local member. The caller holds the user's shard lock.
func (e *Hub[C, U]) attach(convID string, lastSeq int64, conns ...*connState[C]) {
	s := e.convShard(convID)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[convID]
	if !ok {
		c = &convEntry[C]{conns: newConnSet[C](), delivered: lastSeq}
		s.m[convID] = c
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cs := range conns {
		c.conns.add(cs)
	}
}

// detach removes connections from a conversation's entry and drops the entry with its last
// connection. The caller holds the user's shard lock.
func (e *Hub[C, U]) detach(convID string, conns map[*connState[C]]struct{}) {
	s := e.convShard(convID)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[convID]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for cs := range conns {
		c.conns.remove(cs)
	}
	if c.conns.len() == 0 {
		c.gone = true
		delete(s.m, convID)
	}
}

// Remove unregisters a connection. It returns its user's state and whether it was their last
// connection here, when the state is dropped with them.
func (e *Hub[C, U]) Remove(c C) (state U, last bool) {
	uid := c.UserID()
	us := e.userShard(uid)
	us.mu.Lock()
	defer us.mu.Unlock()
	u, ok := us.m[uid]
	if !ok {
		return state, false
	}
	var cs *connState[C]
	for candidate := range u.conns {
		if Conn(candidate.conn) == Conn(c) {
			cs = candidate
		}
	}
	if cs == nil {
		return u.state, false
	}
	cs.grace.Stop()
	delete(u.conns, cs)
	e.conns.Add(-1)
	one := map[*connState[C]]struct{}{cs: {}}
	for id := range u.convs {
		e.detach(id, one)
	}
	if len(u.conns) > 0 {
		return u.state, false
	}
	delete(us.m, uid)
	return u.state, true
}

// Watching reports whether a conversation has a member connected here: whether its events are
// needed here now.
func (e *Hub[C, U]) Watching(convID string) bool {
	s := e.convShard(convID)
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.m[convID]
	return ok
}

// User returns the state of a user connected here, and false for a user who is not: whether the
// user's events are needed here now.
func (e *Hub[C, U]) User(userID string) (state U, ok bool) {
	us := e.userShard(userID)
	us.mu.RLock()
	defer us.mu.RUnlock()
	u, ok := us.m[userID]
	if !ok {
		return state, false
	}
	return u.state, true
}

// States returns the states of the users connected here.
func (e *Hub[C, U]) States() []U {
	var out []U
	for i := range e.users {
		s := &e.users[i]
		s.mu.RLock()
		for _, u := range s.m {
			out = append(out, u.state)
		}
		s.mu.RUnlock()
	}
	return out
}

// Join routes a conversation to every connection of an online user, from the seq after lastSeq.
// It reports false when the user has no connection here or the route exists already.
func (e *Hub[C, U]) Join(userID, convID string, lastSeq int64) bool {
	us := e.userShard(userID)
	us.mu.Lock()
	defer us.mu.Unlock()
	u, ok := us.m[userID]
	if !ok {
		return false
	}
	if _, known := u.convs[convID]; known {
		return false
	}
	u.convs[convID] = struct{}{}
	conns := make([]*connState[C], 0, len(u.conns))
	for cs := range u.conns {
		conns = append(conns, cs)
	}
	e.attach(convID, lastSeq, conns...)
	return true
}

// Leave stops routing a conversation to a user's connections. It reports false when there was no
// such route.
func (e *Hub[C, U]) Leave(userID, convID string) bool {
	us := e.userShard(userID)
	us.mu.Lock()
	defer us.mu.Unlock()
	u, ok := us.m[userID]
	if !ok {
		return false
	}
	if _, known := u.convs[convID]; !known {
		return false
	}
	delete(u.convs, convID)
	e.detach(convID, u.conns)
	for cs := range u.conns {
		cs.forget(convID)
	}
	return true
}

// locked returns the live entry of a conversation with its lock held, or nil.
func (e *Hub[C, U]) locked(convID string) *convEntry[C] {
	s := e.convShard(convID)
	s.mu.RLock()
	c := s.m[convID]
	s.mu.RUnlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return nil
	}
	return c
}

// DeliverMessage gives a conversation's message push (seq, encoded once) to every connection of
// its local members. It reports false, delivering nothing, when nobody here is a member or the seq
// is not newer than the last one delivered here. received is when the message came off the bus,
// from which the delivery latency is measured; the zero time measures nothing (a message read
// from the store).
func (e *Hub[C, U]) DeliverMessage(convID string, seq int64, frame []byte, received time.Time) bool {
	c := e.locked(convID)
	if c == nil {
		return false
	}
	defer c.mu.Unlock()
	if seq <= c.delivered {
		return false
	}
	c.delivered = seq
	pushed := 0
	for cs := range c.conns.all() {
		if cs.deliver(convID, seq, frame) {
			pushed++
		}
	}
	e.cfg.Metrics.pushed(pushed)
	if pushed > 0 { // held for syncing connections only, it has reached no outbox yet
		e.cfg.Metrics.delivered(received)
	}
	return true
}

// Delivered returns the highest seq of a conversation delivered here, and false when nobody here
// is a member.
func (e *Hub[C, U]) Delivered(convID string) (int64, bool) {
	c := e.locked(convID)
	if c == nil {
		return 0, false
	}
	defer c.mu.Unlock()
	return c.delivered, true
}

// Conversations returns the conversations with a member here, with the highest seq delivered.
func (e *Hub[C, U]) Conversations() map[string]int64 {
	out := make(map[string]int64)
	for i := range e.convs {
		s := &e.convs[i]
		s.mu.RLock()
		for id, c := range s.m {
			c.mu.Lock()
			out[id] = c.delivered
			c.mu.Unlock()
		}
		s.mu.RUnlock()
	}
	return out
}

// PushToConversation gives a frame that must be seen (a deletion notice, say) to every connection
// of the conversation's local members except those of skipUser (empty: nobody is skipped).
func (e *Hub[C, U]) PushToConversation(convID, skipUser string, frame []byte) {
	c := e.locked(convID)
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	for cs := range c.conns.all() {
		if cs.conn.UserID() != skipUser {
			cs.conn.Push(frame)
		}
	}
}

// PushToFocused gives a frame that must be seen to the connections of the conversation's local
// members that have it in focus (see Focus), and to no other: pushes for what is on screen only,
// such as a large group's reactions.
func (e *Hub[C, U]) PushToFocused(convID string, frame []byte) {
	c := e.locked(convID)
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	for cs := range c.conns.all() {
		cs.mu.Lock()
		focused := cs.focus == convID
		cs.mu.Unlock()
		if focused {
			cs.conn.Push(frame)
		}
	}
}

// Focus records the conversation a connection shows now ("" for none), for PushToFocused. It
// reports false when the connection is not registered.
func (e *Hub[C, U]) Focus(c C, convID string) bool {
	cs := e.state(c)
	if cs == nil {
		return false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.focus = convID
	return true
}

// EphemeralToConversation gives an ephemeral frame to the conversation's local connections except
// skipUser's. With a position > 0, the frame is dropped unless position is above the last one
// carried under the same key, so such pushes (receipts) only move forward.
func (e *Hub[C, U]) EphemeralToConversation(convID, skipUser, key string, position int64, frame []byte) {
	c := e.locked(convID)
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	if position > 0 {
		if position <= c.positions[key] {
			return
		}
		if c.positions == nil {
			c.positions = make(map[string]int64)
		}
		c.positions[key] = position
	}
	for cs := range c.conns.all() {
		if cs.conn.UserID() != skipUser {
			cs.conn.PushEphemeral(key, frame)
		}
	}
}

// PushToUser gives a frame that must be seen to every connection of a user here.
func (e *Hub[C, U]) PushToUser(userID string, frame []byte) {
	for _, c := range e.Conns(userID) {
		c.Push(frame)
	}
}

// EphemeralToUser gives an ephemeral frame to every connection of a user here.
func (e *Hub[C, U]) EphemeralToUser(userID, key string, frame []byte) {
	for _, c := range e.Conns(userID) {
		c.PushEphemeral(key, frame)
	}
}

// Conns returns a user's connections here.
func (e *Hub[C, U]) Conns(userID string) []C {
	us := e.userShard(userID)
	us.mu.RLock()
	defer us.mu.RUnlock()
	u, ok := us.m[userID]
	if !ok {
		return nil
	}
	out := make([]C, 0, len(u.conns))
	for cs := range u.conns {
		out = append(out, cs.conn)
	}
	return out
}

// Users returns the users with a connection here.
func (e *Hub[C, U]) Users() []string {
	var out []string
	for i := range e.users {
		s := &e.users[i]
		s.mu.RLock()
		for id := range s.m {
			out = append(out, id)
		}
		s.mu.RUnlock()
	}
	return out
}

// Connections counts the connections registered here.
func (e *Hub[C, U]) Connections() int { return int(e.conns.Load()) }

// Sync runs replay for a connection with its message pushes held: replay gives it stored
// messages through push (skipping seqs it has already been given), and then the pushes that
// arrived meanwhile are released, in order and without repeats. So a (re)connected client
// receives each conversation in seq order and each seq once. Syncs of one connection run one at a
// time.
func (e *Hub[C, U]) Sync(ctx context.Context, c C, replay func(push ReplayFunc) error) error {
	cs := e.state(c)
	if cs == nil {
		return replay(func(string, int64, []byte) error { return nil })
	}
	cs.syncMu.Lock()
	defer cs.syncMu.Unlock()
	cs.hold()
	defer cs.release()
	return replay(func(convID string, seq int64, frame []byte) error {
		if !cs.claim(convID, seq) {
			return nil
		}
		return c.PushWait(ctx, frame)
	})
}

// ReplayFunc gives one stored message push to the syncing connection.
type ReplayFunc func(convID string, seq int64, frame []byte) error

// state finds the hub's state of a connection.
func (e *Hub[C, U]) state(c C) *connState[C] {
	us := e.userShard(c.UserID())
	us.mu.RLock()
	defer us.mu.RUnlock()
	if u, ok := us.m[c.UserID()]; ok {
		for cs := range u.conns {
			if Conn(cs.conn) == Conn(c) {
				return cs
			}
		}
	}
	return nil
}

// deliver gives a live message push to the connection, or holds it while the connection syncs.
// It reports whether the push was given now.
func (cs *connState[C]) deliver(convID string, seq int64, frame []byte) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.holding {
		if len(cs.held) < cs.maxHeld {
			cs.held = append(cs.held, heldPush{convID, seq, frame})
		}
		return false
	}
	if seq > cs.sent[convID] {
		cs.sent[convID] = seq
		cs.conn.Push(frame)
		return true
	}
	return false
}

// claim records that seq of a conversation is being given to the connection, and reports false
// when it has been given already.
func (cs *connState[C]) claim(convID string, seq int64) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if seq <= cs.sent[convID] {
		return false
	}
	cs.sent[convID] = seq
	return true
}

func (cs *connState[C]) hold() {
	cs.grace.Stop()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.holding = true
}

// release ends holding and gives the held pushes in arrival order, skipping seqs given already.
func (cs *connState[C]) release() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.holding = false
	pushed := 0
	for _, h := range cs.held {
		if h.seq > cs.sent[h.conversationID] {
			cs.sent[h.conversationID] = h.seq
			cs.conn.Push(h.frame)
			pushed++
		}
	}
	cs.held = nil
	cs.metrics.pushed(pushed)
}

// forget drops what the connection was given of a conversation it left, so a later rejoin starts
// afresh, and the pushes of it still held, so a release does not give a conversation's messages
// to a user who has left it.
func (cs *connState[C]) forget(convID string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.sent, convID)
	if cs.focus == convID {
		cs.focus = ""
	}
	cs.held = slices.DeleteFunc(cs.held, func(h heldPush) bool { return h.conversationID == convID })
}
