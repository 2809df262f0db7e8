package chat

import (
	"hash/maphash"
	"slices"
	"sync"

	"github.com/chatd/chatd/storage"
)

// deletions keeps, per conversation with a member connected here, the seqs deleted for everyone,
// so that the unread counts this node computes from memory (badges, the total on connect) leave
// them out exactly as the store's do. It learns them from the conversation documents it reads
// (a user's load, a join, a list) and from the conversation events of deletions; it forgets a
// conversation once no member here needs it. Only conversations with deletions have an entry.
type deletions struct {
	seed   maphash.Seed
	shards [deletionShards]deletionShard
}

// deletionShards splits the deletions by conversation so that unrelated conversations never
// contend.
const deletionShards = 64

type deletionShard struct {
	mu sync.Mutex
	// m holds sorted, distinct seqs. A slice stored here is replaced, never changed in place, so
	// a reader may use the one it got after the lock is released.
	m map[string][]int64
}

func newDeletions() *deletions {
	d := &deletions{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].m = make(map[string][]int64)
	}
	return d
}

func (d *deletions) shard(convID string) *deletionShard {
	return &d.shards[maphash.String(d.seed, convID)%deletionShards]
}

// of returns the seqs of convID deleted for everyone known here, sorted; nil when none. The
// caller must not change the slice.
func (d *deletions) of(convID string) []int64 {
	sh := d.shard(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[convID]
}

// learn adds seqs deleted for everyone in convID, if live reports that a member here needs the
// conversation. live is asked under the shard's lock, as forget asks it, so a learn that follows a
// member's join is never undone by a forget racing with it. Seqs already known change nothing.
func (d *deletions) learn(convID string, seqs []int64, live func() bool) {
	if len(seqs) == 0 {
		return
	}
	sh := d.shard(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	known := sh.m[convID]
	news := 0
	for _, s := range seqs {
		if _, found := slices.BinarySearch(known, s); !found {
			news++
		}
	}
	if news == 0 || !live() {
		return
	}
	merged := make([]int64, 0, len(known)+news)
	merged = append(append(merged, known...), seqs...)
	slices.Sort(merged)
	sh.m[convID] = slices.Compact(merged)
}

// forget drops what is known of convID unless live reports that a member here still needs it.
func (d *deletions) forget(convID string, live func() bool) {
	sh := d.shard(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[convID]; ok && !live() {
		delete(sh.m, convID)
	}
}

// liveHere reports whether a member of convID is connected here (the hub routes it).
func (s *live) liveHere(convID string) func() bool {
	return func() bool {
		_, ok := s.hub.Delivered(convID)
		return ok
	}
}

// learnDeleted records seqs of convID deleted for everyone, while a member here needs them.
func (s *live) learnDeleted(convID string, seqs []int64) {
	s.deleted.learn(convID, seqs, s.liveHere(convID))
}

// forgetDeleted drops the deletions known of conversations no member here needs any more.
func (s *live) forgetDeleted(convIDs ...string) {
	for _, id := range convIDs {
		s.deleted.forget(id, s.liveHere(id))
	}
}

// unreadOf is an online member's unread in one conversation, from what this node knows.
func (s *live) unreadOf(convID string, p position) int64 {
	return storage.Unread(s.lastSeq(convID, p), p.readSeq, s.deleted.of(convID))
}
