package push_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// devices is a Store that keeps only subscriptions; the other methods are never called here.
type devices struct {
	push.Store
	saved []storage.PushSubscription
}

func (d *devices) PushSubscriptionsOf(_ context.Context, users []string) (map[string][]storage.PushSubscription, error) {
	out := map[string][]storage.PushSubscription{}
	for _, s := range d.saved {
		out[s.UserID] = append(out[s.UserID], s)
	}
	return out, nil
}

func (d *devices) SavePushSubscription(_ context.Context, s storage.PushSubscription) error {
	d.saved = append(d.saved, s)
	return nil
}

func TestConfigRefusesAKeyPairThatDoesNotMatch(t *testing.T) {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	if err := (push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv}).Validate(); err != nil {
		t.Fatalf("a generated pair: %v", err)
	}
	for name, cfg := range map[string]push.Config{
		"no keys":           {},
		"another's public":  {VAPIDPublicKey: other, VAPIDPrivateKey: priv},
		"not base64url":     {VAPIDPublicKey: pub, VAPIDPrivateKey: "not a key!"},
		"a negative window": {VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Window: -1},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSubscribeRefusesWhatIsNoSubscription(t *testing.T) {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	store := &devices{}
	n, err := push.New(push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv}, store, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	good := push.Subscription{Endpoint: "https://push.example/abc"}
	good.Keys.P256dh = pub // any uncompressed P-256 point will do
	good.Keys.Auth = "tBHItJI5svbpez7KI4CCXg"
	bad := func(change func(*push.Subscription)) push.Subscription {
		s := good
		change(&s)
		return s
	}
	for name, c := range map[string]struct {
		device string
		sub    push.Subscription
	}{
		"a device id with a slash": {"a/b", good},
		"an empty device id":       {"", good},
		"plain http":               {"phone", bad(func(s *push.Subscription) { s.Endpoint = "http://push.example/abc" })},
		"no host":                  {"phone", bad(func(s *push.Subscription) { s.Endpoint = "https:///abc" })},
		"a long endpoint":          {"phone", bad(func(s *push.Subscription) { s.Endpoint = "https://push.example/" + strings.Repeat("a", 2048) })},
		"a short key":              {"phone", bad(func(s *push.Subscription) { s.Keys.P256dh = "BAAA" })},
		"a long secret":            {"phone", bad(func(s *push.Subscription) { s.Keys.Auth = pub })},
	} {
		if err := n.Subscribe(t.Context(), "bob", c.device, c.sub); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: %v; want invalid", name, err)
		}
	}
	for i := range push.MaxDevices {
		if err := n.Subscribe(t.Context(), "bob", "d"+strings.Repeat("x", i), good); err != nil {
			t.Fatalf("device %d: %v", i, err)
		}
	}
	if err := n.Subscribe(t.Context(), "bob", "one-too-many", good); !errors.Is(err, protocol.ErrLimit) {
		t.Fatalf("device %d: %v; want the limit", push.MaxDevices+1, err)
	}
	if err := n.Subscribe(t.Context(), "bob", "d", good); err != nil {
		t.Fatalf("replacing a device's subscription past the limit: %v", err)
	}
	if len(store.saved) != push.MaxDevices+1 {
		t.Fatalf("%d subscriptions stored; want %d", len(store.saved), push.MaxDevices+1)
	}
}
