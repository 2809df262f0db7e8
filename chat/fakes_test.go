package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// TestMain fails the package if a test leaves a goroutine behind (a fan-out grace timer, say).
// Bleve's analysis workers (the search index, linked through chat) are process-wide, started
// when its package initialises, and never stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

// The fakes below are in memory and synchronous: no NATS, no store, no network. Each keeps the
// semantics of the real implementation that the service relies on, and records what was asked
// of it so tests can assert on it.

// cursorKey names one member's cursor in one conversation.
type cursorKey struct{ user, conv string }

// fakeStore implements Store over maps, with storage.Store's semantics: conversations and users
// are returned by value, seqs are gapless per conversation, a deleted message stays a tombstone,
// cursors move forward only.
type fakeStore struct {
	mu      sync.Mutex
	notify  map[string]map[string]string // by user, then conversation (notify_fakes_test.go)
	convs   map[string]storage.Conversation
	msgs    map[string][]storage.Message // by conversation; msgs[c][i] has seq i+1
	cursors map[cursorKey]storage.Cursor
	users   map[string]storage.User
	blocks  map[blockKey]time.Time     // blocker|blocked -> when
	online  map[string]map[string]bool // user -> nodes holding a connection
	// blockLookups counts the block checks asked of the store (Blocked and BlockedWith), so a
	// test can prove a send reads the cache.
	blockLookups int
	// conversationsReads and cursorsReads count ConversationsOf and CursorsOf, so a test can
	// prove a connect reads no more than it needs.
	conversationsReads, cursorsReads int

	// beforeRange, when set, runs at the start of every MessageRange, outside the lock, so a test
	// can make something happen while the service replays or pages.
	beforeRange func(convID string, from, to int64)
	// afterConversationsOf, when set, runs after ConversationsOf has read, outside the lock, so
	// a test can make something happen between a connecting user's read and what follows.
	afterConversationsOf func(userID string)
	// afterBlocked, when set, runs after Blocked has read and before it answers, outside the
	// lock, so a test can block or unblock while a send waits for the store.
	afterBlocked func(a, b string)
	// beforePresence, when set, runs at the start of RecordPresence, outside the lock, so a test
	// can hold the presence writer up; presenceWrites lists the changes written, as
	// "online <user>" or "offline <user>", and presenceBatches the number of changes of each call.
	beforePresence  func(ctx context.Context)
	presenceWrites  []string
	presenceBatches []int
	// presenceFailures is how many RecordPresence calls fail from now on, writing nothing.
	presenceFailures int
}

var _ Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{
		convs:   make(map[string]storage.Conversation),
		msgs:    make(map[string][]storage.Message),
		cursors: make(map[cursorKey]storage.Cursor),
		users:   make(map[string]storage.User),
		blocks:  make(map[blockKey]time.Time),
		online:  make(map[string]map[string]bool),
	}
}

func cloneConv(c storage.Conversation) storage.Conversation {
	c.Members = slices.Clone(c.Members)
	c.DeletedSeqs = slices.Clone(c.DeletedSeqs)
	c.Senders = maps.Clone(c.Senders)
	return c
}

// recordDeletedLocked adds seqs to a conversation's deletedSeqs, each once, counting each once,
// as the real store's guarded update does.
func (f *fakeStore) recordDeletedLocked(convID string, seqs ...int64) {
	c, ok := f.convs[convID]
	if !ok {
		return
	}
	for _, seq := range seqs {
		if !slices.Contains(c.DeletedSeqs, seq) {
			c.DeletedSeqs = append(slices.Clone(c.DeletedSeqs), seq)
			c.DeletedCount++
		}
	}
	f.convs[convID] = c
}

func (f *fakeStore) addUser(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[id] = storage.User{ID: id, Name: id, CreatedAt: time.Now().UTC()}
}

// createCursorsLocked gives members a cursor at 0 where they have none, as the real store does
// when a conversation is made or members are added.
func (f *fakeStore) createCursorsLocked(convID string, members []string) {
	for _, m := range members {
		k := cursorKey{m, convID}
		if _, ok := f.cursors[k]; !ok {
			f.cursors[k] = storage.Cursor{UserID: m, ConversationID: convID, UpdatedAt: time.Now().UTC()}
		}
	}
}

func (f *fakeStore) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[id]
	if !ok {
		return storage.Conversation{}, storage.ErrNotFound
	}
	return cloneConv(c), nil
}

func (f *fakeStore) ConversationsOf(_ context.Context, userID string) ([]storage.Conversation, error) {
	f.mu.Lock()
	f.conversationsReads++
	var out []storage.Conversation
	for _, c := range f.convs {
		if c.IsMember(userID) {
			out = append(out, cloneConv(c))
		}
	}
	after := f.afterConversationsOf
	f.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if after != nil {
		after(userID)
	}
	return out, nil
}

func (f *fakeStore) EnsureConversation(_ context.Context, c storage.Conversation) (storage.Conversation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.convs[c.ID]; ok {
		return cloneConv(old), nil
	}
	f.convs[c.ID] = cloneConv(c)
	f.createCursorsLocked(c.ID, c.Members)
	return cloneConv(c), nil
}

func (f *fakeStore) MessageRange(_ context.Context, conversationID string, from, to int64) ([]storage.Message, error) {
	if hook := f.hook(); hook != nil {
		hook(conversationID, from, to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if to < from {
		return nil, nil
	}
	var out []storage.Message
	for _, m := range f.msgs[conversationID] {
		if m.Seq >= from && m.Seq <= to {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeStore) hook() func(string, int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beforeRange
}

func (f *fakeStore) CursorsOf(_ context.Context, userID string) ([]storage.Cursor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cursorsReads++
	var out []storage.Cursor
	for k, c := range f.cursors {
		if k.user == userID {
			out = append(out, c)
		}
	}
	return out, nil
}

// readersLocked is readersFilter of the real store: read up to seq, not the sender, not hidden.
func (f *fakeStore) readersLocked(convID string, seq int64, senderID string) []storage.Cursor {
	var out []storage.Cursor
	for k, c := range f.cursors {
		if k.conv == convID && c.ReadSeq >= seq && k.user != senderID && !c.Hidden {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UserID < out[j].UserID })
	return out
}

func (f *fakeStore) CountReaders(_ context.Context, conversationID string, seq int64, senderID string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.readersLocked(conversationID, seq, senderID))), nil
}

func (f *fakeStore) CountDelivered(_ context.Context, conversationID string, seq int64, senderID string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for k, c := range f.cursors {
		if k.conv == conversationID && k.user != senderID && max(c.DeliveredSeq, c.ReadSeq) >= seq {
			n++
		}
	}
	return n, nil
}

func (f *fakeStore) Readers(_ context.Context, conversationID string, seq int64, senderID string, limit int64) ([]storage.Cursor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.readersLocked(conversationID, seq, senderID)
	if int64(len(out)) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (f *fakeStore) User(_ context.Context, id string) (storage.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.users[id]
	if !ok {
		return storage.User{}, storage.ErrNotFound
	}
	return u, nil
}

func (f *fakeStore) MissingUsers(_ context.Context, ids []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var missing []string
	for _, id := range ids {
		if _, ok := f.users[id]; !ok {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

func (f *fakeStore) SetName(_ context.Context, userID, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.users[userID]
	if !ok {
		return storage.ErrNotFound
	}
	u.Name = name
	f.users[userID] = u
	return nil
}

func (f *fakeStore) Profiles(_ context.Context, ids []string) ([]storage.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storage.User
	for _, id := range ids {
		if u, ok := f.users[id]; ok {
			out = append(out, u)
		}
	}
	return out, nil
}

// FindUsers matches the start of the whole name only: enough for the service's tests.
func (f *fakeStore) FindUsers(_ context.Context, prefix, except string, limit int64) ([]storage.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storage.User
	for id, u := range f.users {
		if id != except && strings.HasPrefix(strings.ToLower(u.Name), strings.ToLower(prefix)) {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b storage.User) int { return strings.Compare(a.Name, b.Name) })
	return out[:min(int64(len(out)), limit)], nil
}

func (f *fakeStore) SetHidePresence(_ context.Context, userID string, hide bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.users[userID]; ok {
		u.HidePresence = hide
		f.users[userID] = u
	}
	return nil
}

func (f *fakeStore) RecordPresence(ctx context.Context, node string, online, offline []string, _ time.Time) (map[string][]string, error) {
	if f.beforePresence != nil {
		f.beforePresence(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.presenceFailures > 0 {
		f.presenceFailures--
		return nil, errors.New("fake store: presence refused")
	}
	f.presenceBatches = append(f.presenceBatches, len(online)+len(offline))
	for _, uid := range online {
		f.presenceWrites = append(f.presenceWrites, "online "+uid)
		if f.online[uid] == nil {
			f.online[uid] = make(map[string]bool)
		}
		f.online[uid][node] = true
	}
	for _, uid := range offline {
		f.presenceWrites = append(f.presenceWrites, "offline "+uid)
		delete(f.online[uid], node)
	}
	nodes := make(map[string][]string)
	for _, uid := range append(slices.Clone(online), offline...) {
		if n := f.onlineNodesLocked(uid); len(n) > 0 {
			nodes[uid] = n
		}
	}
	return nodes, nil
}

func (f *fakeStore) onlineNodesLocked(userID string) []string {
	var nodes []string
	for n := range f.online[userID] {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return nodes
}

func (f *fakeStore) SetLastSeen(_ context.Context, userIDs []string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, uid := range userIDs {
		if u, ok := f.users[uid]; ok && (u.LastSeen == nil || at.After(*u.LastSeen)) {
			u.LastSeen = &at
			f.users[uid] = u
		}
	}
	return nil
}

func (f *fakeStore) PresenceOf(_ context.Context, userIDs []string) (map[string]storage.Presence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]storage.Presence)
	for _, id := range userIDs {
		if u, ok := f.users[id]; ok {
			out[id] = storage.Presence{Nodes: f.onlineNodesLocked(id), LastSeen: u.LastSeen, Hidden: u.HidePresence}
		}
	}
	return out, nil
}

func (f *fakeStore) SetHideReceipts(_ context.Context, userID string, hide bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.users[userID]; ok {
		u.HideReceipts = hide
		f.users[userID] = u
	}
	for k, c := range f.cursors {
		if k.user == userID {
			c.Hidden = hide
			f.cursors[k] = c
		}
	}
	return nil
}

func (f *fakeStore) AddMembers(_ context.Context, id string, userIDs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[id]
	if !ok {
		return nil // an update that matches nothing, as in MongoDB
	}
	for _, u := range userIDs {
		if !c.IsMember(u) {
			c.Members = append(c.Members, u)
		}
	}
	f.convs[id] = c
	f.createCursorsLocked(id, userIDs)
	return nil
}

func (f *fakeStore) RemoveMember(_ context.Context, id, userID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeMemberLocked(id, userID)
	return nil
}

// administer is the owner's part of a group change: the group's rules checked against the
// conversation as stored, and the change written; it returns the system message to sequence
// ("" for a change that changed nothing).
func (f *fakeStore) administer(req sequencer.SendRequest) (storage.GroupUpdate, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[req.ConversationID]
	if !ok || !c.IsMember(req.SenderID) {
		return storage.GroupUpdate{}, "", protocol.ErrNotMember
	}
	res, err := group.Apply(group.Of(c), req.SenderID, *req.Group, time.Now())
	if err != nil || !res.Changed {
		return storage.GroupUpdate{}, "", err
	}
	f.convs[c.ID] = group.Applied(c, res.Update)
	f.createCursorsLocked(c.ID, res.Update.Add)
	if res.Update.Remove != "" {
		delete(f.cursors, cursorKey{res.Update.Remove, c.ID})
	}
	return res.Update, res.Body, nil
}

func (f *fakeStore) removeMemberLocked(id, userID string) {
	if c, ok := f.convs[id]; ok {
		c.Members = slices.DeleteFunc(slices.Clone(c.Members), func(m string) bool { return m == userID })
		f.convs[id] = c
	}
	delete(f.cursors, cursorKey{userID, id})
}

// DeleteMessage tombstones a message behind the sequencer's back (no change is published), as
// an account deletion does, for tests of what a node that heard nothing counts.
func (f *fakeStore) DeleteMessage(_ context.Context, conversationID string, seq int64, senderID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	msgs := f.msgs[conversationID]
	if seq < 1 || seq > int64(len(msgs)) {
		return storage.ErrNotFound
	}
	m := &msgs[seq-1]
	if m.SenderID != senderID || m.Kind == protocol.KindDeleted {
		return storage.ErrNotFound
	}
	m.Kind, m.Body, m.ReplyTo = protocol.KindDeleted, "", 0
	f.recordDeletedLocked(conversationID, seq)
	return nil
}

func (f *fakeStore) HideConversation(_ context.Context, userID, conversationID string, lastSeq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := cursorKey{userID, conversationID}
	if c, ok := f.cursors[k]; ok {
		c.ReadSeq, c.HiddenSeq = max(c.ReadSeq, lastSeq), max(c.HiddenSeq, lastSeq)
		f.cursors[k] = c
	}
	return nil
}

func (f *fakeStore) eraseSender(id, userID string) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var seqs []int64
	for i := range f.msgs[id] {
		if m := &f.msgs[id][i]; m.SenderID == userID {
			if m.Kind != protocol.KindDeleted {
				seqs = append(seqs, m.Seq)
			}
			m.Kind, m.Body, m.ReplyTo, m.SenderID = protocol.KindDeleted, "", 0, ""
		}
	}
	f.recordDeletedLocked(id, seqs...)
	return seqs
}

func (f *fakeStore) DeleteAccount(_ context.Context, userID string) (storage.DeletedAccount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out storage.DeletedAccount
	ids := make([]string, 0, len(f.convs))
	for id := range f.convs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := f.convs[id]
		if !c.IsMember(userID) {
			continue
		}
		if c.Kind == storage.KindDM {
			delete(f.msgs, id)
			for k := range f.cursors {
				if k.conv == id {
					delete(f.cursors, k)
				}
			}
			delete(f.convs, id)
			out.DMs = append(out.DMs, cloneConv(c))
			continue
		}
		f.removeMemberLocked(id, userID)
		out.Groups = append(out.Groups, cloneConv(c))
	}
	for k := range f.cursors {
		if k.user == userID {
			delete(f.cursors, k)
		}
	}
	delete(f.users, userID)
	for k := range f.blocks {
		if k.blocker == userID || k.blocked == userID {
			delete(f.blocks, k)
		}
	}
	return out, nil
}

// blockKey is one user blocking another.
type blockKey struct{ blocker, blocked string }

func (f *fakeStore) Block(_ context.Context, blocker, blocked string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := blockKey{blocker, blocked}
	if _, ok := f.blocks[k]; !ok {
		f.blocks[k] = at
	}
	return nil
}

func (f *fakeStore) Unblock(_ context.Context, blocker, blocked string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocks, blockKey{blocker, blocked})
	return nil
}

func (f *fakeStore) BlocksOf(_ context.Context, blocker string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.blocks {
		if k.blocker == blocker {
			out = append(out, k.blocked)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeStore) blockedLocked(a, b string) bool {
	_, ab := f.blocks[blockKey{a, b}]
	_, ba := f.blocks[blockKey{b, a}]
	return ab || ba
}

func (f *fakeStore) Blocked(_ context.Context, a, b string) (bool, error) {
	f.mu.Lock()
	f.blockLookups++
	blocked := f.blockedLocked(a, b)
	after := f.afterBlocked
	f.mu.Unlock()
	if after != nil {
		after(a, b)
	}
	return blocked, nil
}

func (f *fakeStore) BlockedWith(_ context.Context, userID string, others []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blockLookups++
	var out []string
	for _, o := range others {
		if o != userID && f.blockedLocked(userID, o) && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeStore) lookups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blockLookups
}

// appendMessage is the sequencer's part: check membership, give the next seq, store the message
// and advance the conversation's lastSeq, all at once.
func (f *fakeStore) appendMessage(req sequencer.SendRequest) (storage.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSenderLocked(req); err != nil {
		return storage.Message{}, err
	}
	c := f.convs[req.ConversationID]
	c.LastSeq++
	if req.Kind != protocol.KindSystem { // the owner stores the sender's position with the batch
		if c.Senders == nil {
			c.Senders = make(map[string]int64)
		}
		c.Senders[req.SenderID] = c.LastSeq
	}
	f.convs[req.ConversationID] = c
	m := storage.Message{ConversationID: c.ID, Seq: c.LastSeq, SenderID: req.SenderID, Kind: req.Kind,
		Body: req.Body, CreatedAt: time.Now().UTC().Truncate(time.Millisecond), ClientMsgID: req.ClientMsgID,
		ReplyTo: req.ReplyTo}
	if r := req.ReplyTo; r > 0 && r < c.LastSeq {
		m.Quote = message.QuoteOf(f.msgs[c.ID][r-1])
	}
	f.msgs[c.ID] = append(f.msgs[c.ID], m)
	return m, nil
}

// changeMessage makes a change of a stored message by the sequencer's rules, numbered with the
// conversation's next version, and returns the message as it is now and the change to publish
// (nil when nothing changed). A deletion records its seq on the conversation.
func (f *fakeStore) changeMessage(req sequencer.SendRequest) (storage.Message, *sequencer.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSenderLocked(req); err != nil {
		return storage.Message{}, nil, err
	}
	c, msgs := f.convs[req.ConversationID], f.msgs[req.ConversationID]
	if req.Seq < 1 || req.Seq > int64(len(msgs)) {
		return storage.Message{}, nil, protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", req.Seq)
	}
	m := &msgs[req.Seq-1]
	changed, err := message.Apply(m, req.MessageChange(), c.LastVersion+1, time.Now().UTC().Truncate(time.Millisecond))
	if err != nil || !changed {
		return *m, nil, err
	}
	c.LastVersion++
	f.convs[req.ConversationID] = c
	if m.Kind == protocol.KindDeleted {
		f.recordDeletedLocked(req.ConversationID, req.Seq)
	}
	ch := sequencer.ChangeOf(*m, req, len(c.Members))
	return *m, &ch, nil
}

func (f *fakeStore) ChangedMessages(_ context.Context, conversationID string, afterVersion, maxSeq int64, limit int) ([]storage.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storage.Message
	for _, m := range f.msgs[conversationID] {
		if m.Version > afterVersion && m.Seq <= maxSeq {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b storage.Message) int { return cmp.Compare(a.Version, b.Version) })
	return out[:min(len(out), limit)], nil
}

// checkSenderLocked refuses, as the sequencer's owner does, a sender who is not a member; system
// messages come from the server for a sender who may have just left.
func (f *fakeStore) checkSenderLocked(req sequencer.SendRequest) error {
	c, ok := f.convs[req.ConversationID]
	if !ok || (req.Kind != protocol.KindSystem && !c.IsMember(req.SenderID)) {
		return protocol.ErrNotMember
	}
	return nil
}

func (f *fakeStore) checkSender(req sequencer.SendRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkSenderLocked(req)
}

// advanceCursors is AdvanceCursors of the real store, for the fake Reads' flushes: readSeq moves
// only forward, and a cursor that does not exist is not created.
func (f *fakeStore) advanceCursors(batch []storage.Cursor) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cur := range batch {
		k := cursorKey{cur.UserID, cur.ConversationID}
		if c, ok := f.cursors[k]; ok {
			c.ReadSeq, c.Hidden, c.UpdatedAt = max(c.ReadSeq, cur.ReadSeq), cur.Hidden, cur.UpdatedAt
			c.DeliveredSeq = max(c.DeliveredSeq, cur.DeliveredSeq, cur.ReadSeq)
			f.cursors[k] = c
		}
	}
}

func (f *fakeStore) cursor(user, conv string) storage.Cursor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursors[cursorKey{user, conv}]
}

func (f *fakeStore) messages(conv string) []storage.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.msgs[conv])
}

func (f *fakeStore) conversations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.convs)
}

func (f *fakeStore) conv(id string) (storage.Conversation, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[id]
	return cloneConv(c), ok
}

// fakeSender is the sequencer: gapless seqs per conversation, membership checked against the
// store, a resend with the same clientMsgId answered with the stored message, and every stored
// message (a resent one again) published on the conversation's message subject before the reply,
// as the real owner does.
type fakeSender struct {
	store *fakeStore
	bus   *fakeBus

	mu       sync.Mutex // held across store and publish, so messages are published in seq order
	recent   map[string]storage.Message
	requests []sequencer.SendRequest
	reloads  []string
	fail     error // when set, Send stores nothing and returns it
}

var _ Sender = (*fakeSender)(nil)

func (f *fakeSender) Send(_ context.Context, req sequencer.SendRequest) (protocol.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if f.fail != nil {
		return protocol.Message{}, f.fail
	}
	if req.Reload {
		f.reloads = append(f.reloads, req.ConversationID)
		if req.Kind == "" {
			return protocol.Message{ConversationID: req.ConversationID}, nil
		}
	}
	if req.Op != "" {
		return f.change(req)
	}
	if err := f.store.checkSender(req); err != nil {
		return protocol.Message{}, err
	}
	key := req.ConversationID + "\n" + req.ClientMsgID
	m, ok := f.recent[key]
	if !ok {
		var err error
		if m, err = f.store.appendMessage(req); err != nil {
			return protocol.Message{}, err
		}
		f.recent[key] = m
	}
	wire := message.View(m, "")
	data, err := json.Marshal(wire)
	if err != nil {
		return protocol.Message{}, err
	}
	f.bus.publishMessage(wire.ConversationID, data)
	return wire, nil
}

// Administer is the owner's part of a group change: the store checks and writes it, and the
// system message that tells the group is sequenced like any.
func (f *fakeSender) Administer(ctx context.Context, req sequencer.SendRequest) (protocol.Message, storage.GroupUpdate, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		return protocol.Message{}, storage.GroupUpdate{}, fail
	}
	u, body, err := f.store.administer(req)
	if err != nil || body == "" {
		return protocol.Message{ConversationID: req.ConversationID}, u, err
	}
	m, err := f.Send(ctx, sequencer.SendRequest{ConversationID: req.ConversationID, SenderID: req.SenderID,
		ClientMsgID: req.ClientMsgID, Kind: protocol.KindSystem, Body: body})
	return m, u, err
}

// EraseSender is the owner's part of an account deletion: the sender's messages in the
// conversation become tombstones without a sender, recorded as deleted.
func (f *fakeSender) EraseSender(_ context.Context, conversationID, userID string) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	return f.store.eraseSender(conversationID, userID), nil
}

// change is the owner's part of a change: the store makes it by the sequencer's rules, and what
// changed is published on the conversation's change subject before the reply.
func (f *fakeSender) change(req sequencer.SendRequest) (protocol.Message, error) {
	m, ch, err := f.store.changeMessage(req)
	if err != nil {
		return protocol.Message{}, err
	}
	if ch != nil {
		data, err := json.Marshal(ch)
		if err != nil {
			return protocol.Message{}, err
		}
		f.bus.publishChange(req.ConversationID, data)
	}
	return message.View(m, ""), nil
}

func (f *fakeSender) Reload(ctx context.Context, conversationID string) error {
	_, err := f.Send(ctx, sequencer.SendRequest{ConversationID: conversationID, Reload: true})
	return err
}

func (f *fakeSender) reloaded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reloads)
}

func (f *fakeSender) sent() []sequencer.SendRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// fakeReads is readstate's Coalescer without the timer: moves stay pending (forward only) until a
// flush writes them to the fake store. It records every call.
type fakeReads struct {
	store *fakeStore

	mu          sync.Mutex
	pending     map[cursorKey]storage.Cursor
	advances    []storage.Cursor
	userFlushes []string
	convFlushes []string
	// beforeUserFlush, when set, runs at the start of FlushUser, so a test can hold a
	// disconnect up there.
	beforeUserFlush func()
}

var _ Reads = (*fakeReads)(nil)

func (r *fakeReads) Advance(cur storage.Cursor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advances = append(r.advances, cur)
	k := cursorKey{cur.UserID, cur.ConversationID}
	if old, ok := r.pending[k]; ok {
		cur.ReadSeq, cur.DeliveredSeq = max(cur.ReadSeq, old.ReadSeq), max(cur.DeliveredSeq, old.DeliveredSeq)
	}
	r.pending[k] = cur
}

func (r *fakeReads) Pending(userID string) []storage.Cursor {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []storage.Cursor
	for k, c := range r.pending {
		if k.user == userID {
			out = append(out, c)
		}
	}
	return out
}

func (r *fakeReads) FlushUser(_ context.Context, userID string) error {
	if r.beforeUserFlush != nil {
		r.beforeUserFlush()
	}
	r.mu.Lock()
	r.userFlushes = append(r.userFlushes, userID)
	r.mu.Unlock()
	r.flush(func(k cursorKey) bool { return k.user == userID })
	return nil
}

func (r *fakeReads) FlushConversation(_ context.Context, conversationID string) error {
	r.mu.Lock()
	r.convFlushes = append(r.convFlushes, conversationID)
	r.mu.Unlock()
	r.flush(func(k cursorKey) bool { return k.conv == conversationID })
	return nil
}

func (r *fakeReads) flush(match func(cursorKey) bool) {
	r.mu.Lock()
	var batch []storage.Cursor
	for k, c := range r.pending {
		if match(k) {
			batch = append(batch, c)
			delete(r.pending, k)
		}
	}
	r.mu.Unlock()
	r.store.advanceCursors(batch)
}

func (r *fakeReads) pendingOf(user, conv string) (storage.Cursor, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.pending[cursorKey{user, conv}]
	return c, ok
}

func (r *fakeReads) flushes() (users, convs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.userFlushes), slices.Clone(r.convFlushes)
}

func (r *fakeReads) advanced() []storage.Cursor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.advances)
}

// fakeInterest records what the service subscribes the bus to. Like a NATS subscription, a
// watched id is what the fake bus delivers: events of ids nobody here watches are lost.
type fakeInterest struct {
	mu    sync.Mutex
	convs map[string]bool // current watches
	users map[string]bool
	calls []string
}

func (f *fakeInterest) record(call string, m map[string]bool, id string, watch bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+id)
	if watch {
		m[id] = true
	} else {
		delete(m, id)
	}
}

func (b *fakeBus) WatchConversation(id string) {
	b.interest.record("watch conversation", b.interest.convs, id, true)
}
func (b *fakeBus) UnwatchConversation(id string) {
	b.interest.record("unwatch conversation", b.interest.convs, id, false)
}
func (b *fakeBus) WatchUser(id string) { b.interest.record("watch user", b.interest.users, id, true) }
func (b *fakeBus) UnwatchUser(id string) {
	b.interest.record("unwatch user", b.interest.users, id, false)
}

func (f *fakeInterest) watchingConversation(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.convs[id]
}

func (f *fakeInterest) watchingUser(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.users[id]
}

func (f *fakeInterest) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Kinds of bus event.
const (
	evMessage      = "message"
	evChange       = "change"
	evConversation = "conversation"
	evUser         = "user"
)

// busEvent is one publication on the fake bus.
type busEvent struct {
	kind, id string
	data     []byte
}

// fakeBus loops publications back to the service's Handle methods, for the ids the hub
// watches. By default it delivers synchronously inside Publish; after hold it queues, and drain
// delivers the queue in publication order, so a test decides when events arrive. times > 1
// delivers every event that many times, as a bus that echoes would.
type fakeBus struct {
	svc      *Service
	interest *fakeInterest

	mu     sync.Mutex
	held   bool
	times  int
	queue  []busEvent
	events []busEvent
}

var _ Bus = (*fakeBus)(nil)

func (b *fakeBus) PublishConversation(id string, data []byte) error {
	b.publish(busEvent{evConversation, id, slices.Clone(data)})
	return nil
}

func (b *fakeBus) PublishUser(id string, data []byte) error {
	b.publish(busEvent{evUser, id, slices.Clone(data)})
	return nil
}

func (b *fakeBus) publishMessage(id string, data []byte) {
	b.publish(busEvent{evMessage, id, slices.Clone(data)})
}

func (b *fakeBus) publishChange(id string, data []byte) {
	b.publish(busEvent{evChange, id, slices.Clone(data)})
}

func (b *fakeBus) publish(ev busEvent) {
	b.mu.Lock()
	b.events = append(b.events, ev)
	if b.held {
		b.queue = append(b.queue, ev)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.deliver(ev)
}

func (b *fakeBus) deliver(ev busEvent) {
	b.mu.Lock()
	times := max(b.times, 1)
	b.mu.Unlock()
	for range times {
		switch ev.kind {
		case evMessage:
			if b.interest.watchingConversation(ev.id) {
				b.svc.HandleMessage(ev.id, ev.data, time.Now())
			}
		case evChange:
			if b.interest.watchingConversation(ev.id) {
				b.svc.HandleChange(ev.id, ev.data)
			}
		case evConversation:
			if b.interest.watchingConversation(ev.id) {
				b.svc.HandleConversationEvent(ev.id, ev.data)
			}
		case evUser:
			if b.interest.watchingUser(ev.id) {
				b.svc.HandleUserEvent(ev.id, ev.data)
			}
		}
	}
}

// hold makes the bus queue what is published until drain or release.
func (b *fakeBus) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = true
}

// drain delivers the queued events in publication order, with those their handling publishes,
// and returns how many it delivered.
func (b *fakeBus) drain() int {
	n := 0
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.mu.Unlock()
			return n
		}
		ev := b.queue[0]
		b.queue = b.queue[1:]
		b.mu.Unlock()
		b.deliver(ev)
		n++
	}
}

// release drains the queue and goes back to delivering synchronously.
func (b *fakeBus) release() {
	b.drain()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = false
}

func (b *fakeBus) echo(times int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.times = times
}

// published returns the events published so far of one kind and id ("" for any id).
func (b *fakeBus) published(kind, id string) []busEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []busEvent
	for _, ev := range b.events {
		if ev.kind == kind && (id == "" || ev.id == id) {
			out = append(out, ev)
		}
	}
	return out
}

// How a frame reached a fake connection.
const (
	viaPush      = "push"
	viaWait      = "wait"
	viaEphemeral = "ephemeral"
)

// pushed is one frame given to a fake connection, decoded.
type pushed struct {
	via   string
	key   string // the ephemeral key
	data  []byte
	frame protocol.ServerFrame
	err   error // from decoding
}

// fakeConn records every frame it is given and whether it was ended.
type fakeConn struct {
	user string

	mu     sync.Mutex
	frames []pushed
	ended  []string
}

var _ Conn = (*fakeConn)(nil)

func (c *fakeConn) UserID() string { return c.user }

func (c *fakeConn) record(via, key string, data []byte) {
	p := pushed{via: via, key: key, data: slices.Clone(data)}
	p.err = json.Unmarshal(data, &p.frame)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames = append(c.frames, p)
}

func (c *fakeConn) Push(frame []byte) bool {
	c.record(viaPush, "", frame)
	return true
}

func (c *fakeConn) PushWait(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.record(viaWait, "", frame)
	return nil
}

func (c *fakeConn) PushEphemeral(key string, frame []byte) { c.record(viaEphemeral, key, frame) }

func (c *fakeConn) End(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = append(c.ended, reason)
}

// all returns the frames given so far, failing the test on one that is not a server frame.
func (c *fakeConn) all(t *testing.T) []pushed {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.frames {
		if p.err != nil {
			t.Fatalf("%s got an undecodable frame %q: %v", c.user, p.data, p.err)
		}
	}
	return slices.Clone(c.frames)
}

// ofType returns the frames of one type given so far.
func (c *fakeConn) ofType(t *testing.T, typ string) []pushed {
	t.Helper()
	var out []pushed
	for _, p := range c.all(t) {
		if p.frame.Type == typ {
			out = append(out, p)
		}
	}
	return out
}

// seqs returns the seqs of the message pushes of one conversation, in the order given.
func (c *fakeConn) seqs(t *testing.T, convID string) []int64 {
	t.Helper()
	var out []int64
	for _, p := range c.ofType(t, protocol.TypeMessage) {
		if p.frame.ConversationID == convID {
			out = append(out, p.frame.Seq)
		}
	}
	return out
}

func (c *fakeConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.frames)
}

func (c *fakeConn) endings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ended)
}

// forget drops the frames recorded so far, so a test can assert on what comes next.
func (c *fakeConn) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames = nil
}

// testService is a Service wired to the fakes, with a cast of users in the store.
type testService struct {
	t        *testing.T
	ctx      context.Context
	svc      *Service
	store    *fakeStore
	sender   *fakeSender
	reads    *fakeReads
	bus      *fakeBus
	interest *fakeInterest
	hub      *hub.Hub[Conn, *onlineUser]

	mu    sync.Mutex
	conns []*fakeConn
}

// hubConfig is the hub's configuration, for tests that tune it.
type hubConfig = hub.Config

// users is the cast every test service starts with; "ghost" has no account.
var users = []string{"alice", "bob", "carol", "dave", "erin"}

func newTestService(t *testing.T) *testService {
	return newTestServiceWith(t, Config{}, hub.Config{})
}

// newTestServiceWith is newTestService with configurations; the hub's sync grace is a
// minute unless set, so held pushes are released by Sync only, never by a slow test machine.
func newTestServiceWith(t *testing.T, cfg Config, hubCfg hub.Config) *testService {
	t.Helper()
	if hubCfg.SyncGrace == 0 {
		hubCfg.SyncGrace = time.Minute
	}
	store := newFakeStore()
	for _, u := range users {
		store.addUser(u)
	}
	interest := &fakeInterest{convs: make(map[string]bool), users: make(map[string]bool)}
	bus := &fakeBus{interest: interest}
	sender := &fakeSender{store: store, bus: bus, recent: make(map[string]storage.Message)}
	reads := &fakeReads{store: store, pending: make(map[cursorKey]storage.Cursor)}
	cfg.Hub = hubCfg
	svc, err := New(cfg, store, sender, reads, bus, zerolog.Nop())
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	bus.svc = svc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ts := &testService{t: t, ctx: ctx, svc: svc, store: store, sender: sender, reads: reads, bus: bus,
		interest: interest, hub: svc.hub}
	t.Cleanup(func() {
		ts.mu.Lock()
		conns := slices.Clone(ts.conns)
		ts.mu.Unlock()
		for _, c := range conns {
			svc.Close(c) // closing twice is harmless: the hub no longer knows the connection
		}
		svc.Stop(ctx)
		cancel()
	})
	return ts
}

// open registers a new connection of user without syncing it: its message pushes are held.
func (ts *testService) open(user string) *fakeConn {
	ts.t.Helper()
	c := &fakeConn{user: user}
	if _, err := ts.svc.Open(ts.ctx, c, nil); err != nil {
		ts.t.Fatalf("open %s: %v", user, err)
	}
	ts.svc.awaitPresence() // its presence reaches peers now, as part of the open, not amid a later step
	ts.mu.Lock()
	ts.conns = append(ts.conns, c)
	ts.mu.Unlock()
	return c
}

// connect opens a connection of user and syncs it with nothing held, as a fresh client does, so
// live pushes reach it.
func (ts *testService) connect(user string) *fakeConn {
	ts.t.Helper()
	c := ts.open(user)
	if _, err := ts.svc.Sync(ts.ctx, c, nil, nil); err != nil {
		ts.t.Fatalf("sync %s: %v", user, err)
	}
	return c
}

func (ts *testService) dm(a, b string) string {
	ts.t.Helper()
	conv, err := ts.svc.OpenDM(ts.ctx, a, b)
	if err != nil {
		ts.t.Fatalf("open dm %s-%s: %v", a, b, err)
	}
	return conv.ID
}

func (ts *testService) group(creator string, members ...string) string {
	ts.t.Helper()
	conv, err := ts.svc.CreateGroup(ts.ctx, creator, "team", members)
	if err != nil {
		ts.t.Fatalf("create group of %s: %v", creator, err)
	}
	return conv.ID
}

func (ts *testService) send(user, convID, body string) protocol.Message {
	ts.t.Helper()
	m, err := ts.svc.Send(ts.ctx, user, SendRequest{ConversationID: convID, ClientMsgID: uuid.NewString(), Body: body})
	if err != nil {
		ts.t.Fatalf("send %q by %s: %v", body, user, err)
	}
	return m
}

// conversation returns the conversation as user's ListConversations shows it.
func (ts *testService) conversation(user, convID string) protocol.Conversation {
	ts.t.Helper()
	views, err := ts.svc.ListConversations(ts.ctx, user)
	if err != nil {
		ts.t.Fatalf("list conversations of %s: %v", user, err)
	}
	for _, v := range views {
		if v.ID == convID {
			return v
		}
	}
	ts.t.Fatalf("%s's list has no conversation %s: %+v", user, convID, views)
	return protocol.Conversation{}
}
