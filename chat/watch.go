package chat

import (
	"hash/maphash"
	"sync"
)

// Subscriptions follow the hub. The hub only reports what its changes did (a user's first or
// last connection here, a route joined or left); the service then subscribes the bus to the
// events the hub needs, or ends the subscription, outside every lock of the hub, so the hub
// never calls out while it holds one. What to do is read from the hub, under a lock of the id's
// own, each time: two changes of one conversation on two goroutines (its last member here
// leaving while another joins) may reach here in either order, and the one that comes second
// sees what holds after both. A join's subscription is in place before the join returns, so no
// event published after it is missed.

// interestStripes is how many locks the ids are spread over: subscriptions of unrelated ids
// rarely wait for each other, and the locks cost nothing idle.
const interestStripes = 64

// interestLocks serializes the subscription changes of one id.
type interestLocks struct {
	seed  maphash.Seed
	locks [interestStripes]sync.Mutex
}

func (l *interestLocks) lock(id string) *sync.Mutex {
	return &l.locks[maphash.String(l.seed, id)%interestStripes]
}

// watchConversation subscribes to a conversation's events while a member of it is connected here,
// and ends the subscription once none is.
func (s *live) watchConversation(convID string) {
	mu := s.interest.lock("c" + convID)
	mu.Lock()
	defer mu.Unlock()
	if s.hub.Watching(convID) {
		s.bus.WatchConversation(convID)
	} else {
		s.bus.UnwatchConversation(convID)
	}
}

// watchUser subscribes to a user's events while they have a connection here, and ends the
// subscription once they have none.
func (s *live) watchUser(userID string) {
	mu := s.interest.lock("u" + userID)
	mu.Lock()
	defer mu.Unlock()
	if _, ok := s.hub.User(userID); ok {
		s.bus.WatchUser(userID)
	} else {
		s.bus.UnwatchUser(userID)
	}
}
