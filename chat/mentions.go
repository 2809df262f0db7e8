package chat

import "slices"

// Mentions: the conversation's owner finds whom a message mentions and keeps, per member, the
// seqs of the newest messages that mention them (storage.Conversation.Mentioned). A member's
// unread mentions are those seqs after their read position: forward-only with the read cursor.
// This node keeps the seqs of its online users in their positions, moved by what the bus brings
// (a message that mentions them, an edit that adds or drops a mention, a deletion); leaving a
// conversation drops its position, and with it its mentions.

// unreadMentions counts the seqs after read, less those deleted for everyone.
func unreadMentions(seqs []int64, read int64, deleted []int64) int64 {
	var n int64
	for _, seq := range seqs {
		if seq > read && !slices.Contains(deleted, seq) {
			n++
		}
	}
	return n
}

// totalMentions sums an online user's unread mentions over their conversations.
func (s *live) totalMentions(u *onlineUser) int64 {
	return u.sum(func(id string, p *position) int64 { return unreadMentions(p.mentions, p.readSeq, s.deleted.of(id)) })
}

// sum adds up count over an online user's conversations.
func (u *onlineUser) sum(count func(convID string, p *position) int64) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var t int64
	for id, p := range u.positions {
		t += count(id, p)
	}
	return t
}

// mentioned records that seq of convID mentions users (or no longer does, with add false) for
// those online here; a member's own message never counts for them (except, by sender "").
func (s *live) mentioned(convID string, seq int64, users []string, add bool, sender string) {
	for _, uid := range users {
		if uid == sender {
			continue
		}
		u := s.online(uid)
		if u == nil {
			continue
		}
		u.mu.Lock()
		if p, ok := u.positions[convID]; ok {
			p.mentions = mentionSet(p.mentions, seq, add)
		}
		u.mu.Unlock()
	}
}

// mentionSet returns seqs with seq added or taken away, as a new slice (views copy positions).
func mentionSet(seqs []int64, seq int64, add bool) []int64 {
	out := make([]int64, 0, len(seqs)+1)
	for _, s := range seqs {
		if s != seq {
			out = append(out, s)
		}
	}
	if add {
		out = append(out, seq)
	}
	return out
}
