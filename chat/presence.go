package chat

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Presence: who is online, and since when someone is not. A user is online while any node holds
// a connection of theirs; each node records that it does when the user's first connection there
// opens and drops the record when their last one there closes (then reads the others; in batches,
// off the connect path, see recordPresences), and a node that died is left out by
// asking Nodes which nodes live. A change is pushed only to
// the members of the user's DMs and small groups (up to LiveReceiptsMaxMembers), one event per
// such member on their own subject, so one frame per device and nothing at all to the members
// of large groups, who ask with Presence when they want to know.

// presenceStore is what presence and profiles read and write.
type presenceStore interface {
	// ConversationsOf tells whom a user may ask about: those they share a conversation with.
	ConversationsOf(ctx context.Context, userID string) ([]storage.Conversation, error)
	RecordPresence(ctx context.Context, node string, online, offline []string, at time.Time) (map[string][]string, error)
	SetLastSeen(ctx context.Context, userIDs []string, at time.Time) error
	PresenceOf(ctx context.Context, userIDs []string) (map[string]storage.Presence, error)
	SetHidePresence(ctx context.Context, userID string, hide bool) error
	SetName(ctx context.Context, userID, name string) error
	Profiles(ctx context.Context, ids []string) ([]storage.User, error)
	FindUsers(ctx context.Context, prefix, except string, limit int64) ([]storage.User, error)
}

// presence is the part of the service that records who is online (on which node), tells peers
// when that changes, answers who is online, and keeps display names (profiles.go). It shares the
// hub and the bus with the other parts (live) and has a store of its own.
type presence struct {
	*live
	store presenceStore

	// queue feeds recordPresences, which closes done once stopped is closed and nothing waits, or
	// when cancel ends it.
	queue   *presenceQueue
	stopped chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
}

// newPresence returns the presence part and starts its writer; Stop ends it.
func newPresence(store presenceStore, l *live) *presence {
	p := &presence{live: l, store: store, queue: newPresenceQueue(),
		stopped: make(chan struct{}), done: make(chan struct{})}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go p.recordPresences(ctx)
	return p
}

// changed queues a record of a user's first connection here opening or their last one closing;
// u is their state then, whose peers hear of it if they are gone when it is written.
func (s *presence) changed(uid string, u *onlineUser) {
	s.queue.put(presenceJob{uid: uid, u: u})
}

// Nodes tells which nodes of the cluster are alive; sequencer.Leases implements it.
type Nodes interface {
	Alive(node string) bool
}

// alive reports whether node holds live connections: this node, or one Nodes says lives.
func (s *presence) alive(node string) bool {
	return node == s.cfg.NodeID || (s.cfg.Nodes != nil && s.cfg.Nodes.Alive(node))
}

// onlineElsewhere reports whether a live node other than this one holds a connection of the user.
func (s *presence) onlineElsewhere(nodes []string) bool {
	return slices.ContainsFunc(nodes, func(n string) bool { return n != s.cfg.NodeID && s.alive(n) })
}

// hidesPresence reports whether an online user hides their presence.
func (u *onlineUser) hidesPresence() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hidePresence
}

// presenceJob is a presence record to write: a user's first connection here opened or their last
// one here closed. Which of the two is read from the hub when the record is written (see
// writePresence), so a record written late never undoes a newer change: a user who left and came
// back before their offline record was written is recorded online.
type presenceJob struct {
	uid string
	u   *onlineUser // the user's state when the job was queued: whom a presence change is told to
}

// presenceQueue holds the presence records waiting to be written, at most one per user: a newer
// change of a user replaces the waiting one (online, then offline before the writer got to it,
// is written as offline). So a connect or a disconnect never waits for the store, however far
// behind the writer is (5,000 users connecting took their records minutes to write on the
// embedded store, and a bounded channel made the 5,000 disconnects after them wait that long),
// and the queue is bounded by the users who came or went.
type presenceQueue struct {
	mu      sync.Mutex
	waiting map[string]presenceJob
	order   []string        // the users with a waiting job, oldest first
	wake    chan struct{}   // one token: something waits
	writing bool            // the writer holds a job it took
	idle    []chan struct{} // closed when nothing waits and nothing is being written (awaitIdle)
	stopped bool            // Stop was called: nothing more is queued
}

func newPresenceQueue() *presenceQueue {
	return &presenceQueue{waiting: make(map[string]presenceJob), wake: make(chan struct{}, 1)}
}

// put queues job, replacing a waiting job of the same user; after stop it drops it (a stopping
// node's records are left out through its lease once it is gone).
func (q *presenceQueue) put(job presenceJob) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if _, ok := q.waiting[job.uid]; !ok {
		q.order = append(q.order, job.uid)
	}
	q.waiting[job.uid] = job
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the oldest waiting jobs, at most max of them, one per user. With none it returns
// none and releases awaitIdle.
func (q *presenceQueue) take(max int) []presenceJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		q.order, q.writing = nil, false
		for _, ch := range q.idle {
			close(ch)
		}
		q.idle = nil
		return nil
	}
	n := min(max, len(q.order))
	jobs := make([]presenceJob, n)
	for i, uid := range q.order[:n] {
		jobs[i] = q.waiting[uid]
		delete(q.waiting, uid)
	}
	q.order = q.order[n:]
	q.writing = true
	return jobs
}

// retry puts back the jobs of a batch the store failed, ahead of what waits, except those of users
// with a newer change waiting, which replaces theirs; after stop it drops them, as put does. Only
// the writer calls it, and takes them next, so it wakes nobody.
func (q *presenceQueue) retry(jobs []presenceJob) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	var back []string
	for _, j := range jobs {
		if _, newer := q.waiting[j.uid]; !newer {
			q.waiting[j.uid] = j
			back = append(back, j.uid)
		}
	}
	q.order = append(back, q.order...)
}

// awaitIdle returns a channel closed once nothing waits and the writer has finished what it took.
func (q *presenceQueue) awaitIdle() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	ch := make(chan struct{})
	if len(q.order) == 0 && !q.writing {
		close(ch)
		return ch
	}
	q.idle = append(q.idle, ch)
	return ch
}

// stop ends queueing; it reports whether this call did (rather than an earlier one).
func (q *presenceQueue) stop() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	first := !q.stopped
	q.stopped = true
	return first
}

// recordPresences writes presence records in batches of up to presenceBatch users, oldest
// change first, one batch at a time, until Stop. Off the connect path and one batch at a time,
// because presence may lag by a moment while the store is needed elsewhere: in a reconnect storm
// after a node dies, the new owners' reads and the reconnecting users' loads come first
// (recording presence inside Open cost the owner-crash failover about a second of store time).
// In batches, because one user at a time cost the store two round trips a user, and on the
// embedded store a read scanning the records each: 5,000 connects took minutes to record, during
// which every send waited behind them for the store. A batch the store fails is written again
// after presenceRetryPause. After Stop it writes what waits, until ctx ends.
func (s *presence) recordPresences(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		jobs := s.queue.take(presenceBatch)
		if len(jobs) == 0 {
			select {
			case <-s.queue.wake:
				continue
			case <-s.stopped:
				select {
				case <-s.queue.wake: // queued just before the stop
					continue
				default:
					return
				}
			case <-ctx.Done():
				return
			}
		}
		opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		err := s.writePresence(opCtx, jobs)
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Int("users", len(jobs)).Dur("retryIn", presenceRetryPause).Msg("record presence")
			s.queue.retry(jobs)
			select {
			case <-time.After(presenceRetryPause):
			case <-ctx.Done():
			}
		}
	}
}

// Stop ends the presence writer: it stops queueing records and writes those waiting until ctx
// ends (a dead node's records are left out through its lease anyway). Call it after the node's
// last connection has closed. A second call waits as the first did.
func (s *presence) Stop(ctx context.Context) {
	if s.queue.stop() {
		close(s.stopped)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		s.log.Warn().Err(ctx.Err()).Msg("presence records left unwritten at shutdown")
		s.cancel()
		<-s.done
	}
}

// writePresence records a batch of presence changes of users of this node and tells the peers of
// those whose presence changed anywhere: a user who came online here and whom no other live node
// holds is online; a user whose last connection here closed and whom no other live node holds
// was last seen now (stored first). Users who hide their presence are recorded, not announced.
// It fails, announcing nothing, when the records could not be written.
func (s *presence) writePresence(ctx context.Context, jobs []presenceJob) error {
	var online, offline []string
	here := make([]bool, len(jobs)) // online here now, whatever the job was queued for
	for i, j := range jobs {
		if u, ok := s.hub.User(j.uid); ok && isClosed(u.loaded) && u.loadErr == nil {
			jobs[i].u, here[i] = u, true
			online = append(online, j.uid)
		} else {
			offline = append(offline, j.uid)
		}
	}
	nodes, err := s.store.RecordPresence(ctx, s.cfg.NodeID, online, offline, now())
	if err != nil {
		return err
	}
	var gone []presenceJob
	for i, j := range jobs {
		switch {
		case s.onlineElsewhere(nodes[j.uid]):
		case !here[i]:
			gone = append(gone, j)
		case !j.u.hidesPresence():
			s.publishToPeers(j.u, userEvent{Type: userPresence, Peer: j.uid, Online: true})
		}
	}
	if len(gone) == 0 {
		return nil
	}
	seen := now()
	uids := make([]string, len(gone))
	for i, j := range gone {
		uids[i] = j.uid
	}
	if err := s.store.SetLastSeen(ctx, uids, seen); err != nil {
		s.log.Warn().Err(err).Int("users", len(uids)).Msg("record last seen")
	}
	for _, j := range gone {
		if !j.u.hidesPresence() {
			s.publishToPeers(j.u, userEvent{Type: userPresence, Peer: j.uid, LastSeen: &seen})
		}
	}
	return nil
}

// publishToPeers sends an event about an online user (presence, profile) to each of their peers.
func (s *live) publishToPeers(u *onlineUser, ev userEvent) {
	u.mu.Lock()
	peers := make([]string, 0, len(u.peers))
	for p := range u.peers {
		peers = append(peers, p)
	}
	u.mu.Unlock()
	for _, p := range peers {
		s.publishUser(p, ev)
	}
}

// addPeers adds the members of a conversation to the user's peers, if it is a DM or a small
// group. u.mu is held.
func (s *live) addPeers(uid string, u *onlineUser, kind string, members []string) {
	if kind != storage.KindDM && len(members) > s.cfg.LiveReceiptsMaxMembers {
		return
	}
	if u.peers == nil {
		u.peers = make(map[string]struct{})
	}
	for _, m := range members {
		if m != uid {
			u.peers[m] = struct{}{}
		}
	}
}

// applyPresence gives a user's devices a peer's presence change. It is ephemeral: a newer one
// replaces one still waiting.
func (s *presence) applyPresence(userID string, ev userEvent) {
	if u := s.online(userID); u != nil && !u.tellPresence(ev.Peer, ev.Online) {
		return
	}
	online := ev.Online
	s.ephemeralToUser(userID, "presence:"+ev.Peer, protocol.ServerFrame{Type: protocol.TypePresence, UserID: ev.Peer,
		Online: &online, LastSeen: ev.LastSeen})
}

// tellPresence records that the user's devices here are pushed peer's presence, and reports
// whether it differs from the last push: two nodes whose last connections of the peer close at
// once each find the other gone and each announce it, and the second is no change.
func (u *onlineUser) tellPresence(peer string, online bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if told, ok := u.toldOnline[peer]; ok && told == online {
		return false
	}
	if u.toldOnline == nil {
		u.toldOnline = make(map[string]bool)
	}
	u.toldOnline[peer] = online
	return true
}

// Presence answers who of userIDs is online, and when the others were last seen: only users who
// share a conversation with userID (of any size) and do not hide their presence are answered;
// the rest are left out.
func (s *presence) Presence(ctx context.Context, userID string, userIDs []string) ([]protocol.Presence, error) {
	convs, err := s.store.ConversationsOf(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("load conversations of %s: %w", userID, err)
	}
	shared := map[string]bool{userID: true}
	for _, c := range convs {
		for _, m := range c.Members {
			shared[m] = true
		}
	}
	asked := slices.DeleteFunc(slices.Clone(userIDs), func(id string) bool { return !shared[id] })
	if len(asked) == 0 {
		return []protocol.Presence{}, nil
	}
	found, err := s.store.PresenceOf(ctx, asked)
	if err != nil {
		return nil, fmt.Errorf("load presence: %w", err)
	}
	out := []protocol.Presence{}
	for _, id := range asked {
		p, ok := found[id]
		if !ok || (p.Hidden && id != userID) {
			continue
		}
		// The asker is online: they ask over a live connection, whose record may still be queued.
		entry := protocol.Presence{UserID: id, Online: id == userID || slices.ContainsFunc(p.Nodes, s.alive)}
		if !entry.Online {
			entry.LastSeen = p.LastSeen
		}
		out = append(out, entry)
	}
	return out, nil
}

// SetPresencePrivacy hides (or shows) userID's online state and last seen time from everyone. The
// user's peers learn it at once (hidden looks offline with no last seen time), and so do the
// user's other nodes, which decide what their connections' comings and goings announce.
func (s *presence) SetPresencePrivacy(ctx context.Context, userID string, hide bool) error {
	if err := s.store.SetHidePresence(ctx, userID, hide); err != nil {
		return fmt.Errorf("store presence privacy of %s: %w", userID, err)
	}
	s.applyPrivacy(userID, userEvent{Type: userPrivacy, HidePresence: &hide})
	s.publishUser(userID, userEvent{Type: userPrivacy, HidePresence: &hide})
	if u := s.online(userID); u != nil {
		s.publishToPeers(u, userEvent{Type: userPresence, Peer: userID, Online: !hide})
	}
	return nil
}

// applyPrivacy takes an online user's privacy settings changed on any node.
func (s *live) applyPrivacy(userID string, ev userEvent) {
	u := s.online(userID)
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if ev.HideReceipts != nil {
		u.hideReceipts = *ev.HideReceipts
	}
	if ev.HidePresence != nil {
		u.hidePresence = *ev.HidePresence
	}
}
