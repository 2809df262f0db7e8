package push

import (
	"context"
	"sync"
	"time"

	"github.com/chatd/chatd/storage"
)

// Most members of a conversation have no device to notify, and each window of a conversation asks
// for its members' devices: read from the store every time, that was one read per member per
// window (49 for a message in a group of 50), more store work than storing the messages. So a
// notifier remembers each user's devices, none included, for deviceCacheTTL. A device saved or
// removed on this node is forgotten here at once and announced (Config.Announce) so the other
// nodes forget it too (ForgetDevices); an announcement lost with a NATS connection is covered by
// forgetting everything on a reconnect (ForgetAllDevices) and, at worst, by the TTL.

const (
	// deviceCacheTTL bounds how long a missed announcement can keep a new device from being
	// notified (or a removed one notified): long enough that a busy conversation's windows cost
	// no read, short enough that nobody waits for it in practice.
	deviceCacheTTL = time.Minute
	// deviceCacheMax bounds the users remembered; past it, all are forgotten and read again.
	deviceCacheMax = 100_000
)

// deviceCache is what a notifier knows of users' push subscriptions.
type deviceCache struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]cachedDevices
	// gen counts forgets: a read that began before one is not cached, so a device announced while
	// the read was in flight is not hidden by it.
	gen uint64
}

type cachedDevices struct {
	devices []storage.PushSubscription
	expires time.Time
}

func newDeviceCache() *deviceCache {
	return &deviceCache{now: time.Now, m: make(map[string]cachedDevices)}
}

// devicesOf returns the devices of those of users who have any, from the cache, reading the users
// it does not know from the store.
func (n *Notifier) devicesOf(ctx context.Context, users []string) (map[string][]storage.PushSubscription, error) {
	out, missing, gen := n.devices.get(users)
	if len(missing) == 0 {
		return out, nil
	}
	read, err := n.store.PushSubscriptionsOf(ctx, missing)
	if err != nil {
		return nil, err
	}
	n.devices.put(missing, read, gen)
	for user, devices := range read {
		if len(devices) > 0 {
			out[user] = devices
		}
	}
	return out, nil
}

// get returns the known devices of users (only those who have some), the users not known, and
// the generation to hand to put after reading those.
func (c *deviceCache) get(users []string) (map[string][]storage.PushSubscription, []string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	out := make(map[string][]storage.PushSubscription)
	var missing []string
	for _, u := range users {
		e, ok := c.m[u]
		switch {
		case !ok || !now.Before(e.expires):
			missing = append(missing, u)
		case len(e.devices) > 0:
			out[u] = e.devices
		}
	}
	return out, missing, c.gen
}

// put remembers the devices read for users (none for those absent from read), unless a forget
// came in since get returned gen.
func (c *deviceCache) put(users []string, read map[string][]storage.PushSubscription, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.m)+len(users) > deviceCacheMax {
		clear(c.m)
	}
	expires := c.now().Add(deviceCacheTTL)
	for _, u := range users {
		c.m[u] = cachedDevices{devices: read[u], expires: expires}
	}
}

// forget drops what the cache knows of user, or of everyone when user is "".
func (c *deviceCache) forget(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if user == "" {
		clear(c.m)
		return
	}
	delete(c.m, user)
}

// devicesChanged forgets a user's devices here and announces the change to the other nodes.
func (n *Notifier) devicesChanged(user string) {
	n.devices.forget(user)
	if n.cfg.Announce != nil {
		n.cfg.Announce(user)
	}
}

// ForgetDevices drops what this node knows of a user's devices: another node announced a change.
func (n *Notifier) ForgetDevices(user string) {
	if user != "" {
		n.devices.forget(user)
	}
}

// ForgetAllDevices drops what this node knows of everyone's devices: announcements may have been
// missed (a NATS reconnect).
func (n *Notifier) ForgetAllDevices() { n.devices.forget("") }
