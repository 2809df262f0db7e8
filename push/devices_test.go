package push_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
)

// conversations is a Store of two-member conversations whose members are offline, read nothing
// yet and hear everything; it records whose devices it was asked for.
type conversations struct {
	push.Store
	mu      sync.Mutex
	devices map[string][]storage.PushSubscription
	asked   []string
}

func (c *conversations) PushSubscriptionsOf(_ context.Context, users []string) (map[string][]storage.PushSubscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, users...)
	out := map[string][]storage.PushSubscription{}
	for _, u := range users {
		if d := c.devices[u]; len(d) > 0 {
			out[u] = d
		}
	}
	return out, nil
}

func (c *conversations) askedFor() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

func (c *conversations) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	return storage.Conversation{ID: id, Kind: protocol.ConversationDM, Members: members(id)}, nil
}

func (c *conversations) PresenceOf(context.Context, []string) (map[string]storage.Presence, error) {
	return nil, nil
}

func (c *conversations) NotifySettings(context.Context, string) (map[string]string, error) {
	return nil, nil
}

func (c *conversations) CursorOf(_ context.Context, user, conv string) (storage.Cursor, error) {
	return storage.Cursor{UserID: user, ConversationID: conv}, nil
}

func (c *conversations) BlocksOf(context.Context, string) ([]string, error) { return nil, nil }

func (c *conversations) PushNoticeOf(context.Context, string, string) (storage.PushNotice, error) {
	return storage.PushNotice{}, storage.ErrNotFound
}

func (c *conversations) PushSettingsOf(context.Context, string) (storage.PushSettings, error) {
	return storage.DefaultPushSettings, nil
}

func (c *conversations) Profiles(context.Context, []string) ([]storage.User, error) { return nil, nil }

func (c *conversations) SavePushNotice(context.Context, storage.PushNotice) error { return nil }

// members of conversation "a+b" are a and b.
func members(conv string) []string {
	for i := range conv {
		if conv[i] == '+' {
			return []string{conv[:i], conv[i+1:]}
		}
	}
	return nil
}

// TestANodeAsksForAUsersDevicesOnceUntilToldTheyChanged: the windows of a conversation whose
// member has no device read nothing after the first; a device saved on another node is notified
// from the next window on, once that node's announcement arrives (ForgetDevices).
func TestANodeAsksForAUsersDevicesOnceUntilToldTheyChanged(t *testing.T) {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	store := &conversations{devices: map[string][]storage.PushSubscription{}}
	n, err := push.New(push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Window: 10 * time.Millisecond, Workers: 1,
		AllowHTTP: true}, store, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	seq := int64(0)
	send := func(conv string) {
		seq++
		n.Stored(protocol.Message{ConversationID: conv, Seq: seq, Kind: protocol.KindText, SenderID: members(conv)[0], Body: "hi"}, members(conv))
	}
	// windowsDone waits until a window of another conversation (whose member is asked for: the
	// cache has never seen them) has been worked out: windows are worked out in the order they
	// end, by the one worker, so every window ended before it has been too.
	barrier := 0
	windowsDone := func() {
		barrier++
		someone := fmt.Sprintf("stranger%d", barrier)
		send("alice+" + someone)
		poll.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
			if !slices.Contains(store.askedFor(), someone) {
				return fmt.Errorf("the window of %s was not worked out", someone)
			}
			return nil
		})
	}

	send("alice+bob")
	windowsDone()
	send("alice+bob")
	windowsDone()
	if got := store.askedFor(); len(slices.DeleteFunc(got, func(u string) bool { return u != "bob" })) != 1 {
		t.Fatalf("the devices of a user with none were read %d times in two windows; want once", len(got))
	}

	ps := testenv.NewPushService(t)
	sub := ps.Subscribe(t)
	store.mu.Lock()
	store.devices["bob"] = []storage.PushSubscription{{UserID: "bob", DeviceID: "phone", Endpoint: sub.Endpoint, P256dh: sub.P256dh, Auth: sub.Auth}}
	store.mu.Unlock()
	n.ForgetDevices("bob") // the node that saved it announced it
	send("alice+bob")
	poll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if got := len(ps.Received(sub)); got != 1 {
			return fmt.Errorf("bob's new device received %d notifications; want 1", got)
		}
		return nil
	})
}
