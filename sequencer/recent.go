package sequencer

import "github.com/chatd/chatd/protocol"

// recentIDs remembers the last n acknowledged sends by (conversation, clientMsgId), evicting the
// oldest, so a retry is answered without a store lookup.
type recentIDs struct {
	byKey map[string]protocol.Message
	ring  []string
	next  int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{byKey: make(map[string]protocol.Message, n), ring: make([]string, n)}
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
	if old := r.ring[r.next]; old != "" {
		delete(r.byKey, old)
	}
	r.ring[r.next] = key
	r.byKey[key] = m
	r.next = (r.next + 1) % len(r.ring)
}
