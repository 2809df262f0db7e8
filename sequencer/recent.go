package sequencer

import "github.com/chatd/chatd/protocol"

// recentIDs remembers the last n acknowledged sends by (conversation, clientMsgId), evicting the
// oldest, so a retry is answered without a store lookup. It grows as sends arrive: a node owns
// many partitions, most of them quiet, and preallocating n entries each cost over a gigabyte.
type recentIDs struct {
	byKey map[string]protocol.Message
	ring  []string
	limit int
	next  int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{byKey: make(map[string]protocol.Message), limit: n}
}

func recentKey(conversationID, clientMsgID string) string {
	return conversationID + "\x00" + clientMsgID
}

func (r *recentIDs) get(key string) (protocol.Message, bool) {
	m, ok := r.byKey[key]
	return m, ok
}

func (r *recentIDs) add(key string, m protocol.Message) {
	if _, ok := r.byKey[key]; ok {
		return
	}
	r.byKey[key] = m
	if len(r.ring) < r.limit {
		r.ring = append(r.ring, key)
		return
	}
	delete(r.byKey, r.ring[r.next])
	r.ring[r.next] = key
	r.next = (r.next + 1) % r.limit
}
