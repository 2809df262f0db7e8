package push

import (
	"context"
	"encoding/base64"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// maxEndpoint bounds a push endpoint URL a page may store; real ones are under 512 bytes.
const maxEndpoint = 2048

// deviceID is what a page names its device with: short, and safe in a document id.
var deviceID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Subscription is a device's push subscription as a page gives it (PushSubscription.toJSON()).
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// Subscribe stores sub as the push subscription of a user's device, replacing the device's
// earlier one. It refuses (protocol.ErrInvalid) an endpoint that is not an https URL (http too
// with AllowHTTP) or keys that are not a P-256 public key and a 16-byte secret, and
// (protocol.ErrLimit) a device past MaxDevices.
func (n *Notifier) Subscribe(ctx context.Context, userID, device string, sub Subscription) error {
	if !deviceID.MatchString(device) {
		return protocol.Refuse(protocol.ErrInvalid, "a device id is 1 to 64 letters, digits, - or _")
	}
	u, err := url.Parse(sub.Endpoint)
	if err != nil || len(sub.Endpoint) > maxEndpoint || u.Host == "" || !(u.Scheme == "https" || (n.cfg.AllowHTTP && u.Scheme == "http")) {
		return protocol.Refuse(protocol.ErrInvalid, "the endpoint must be an https URL")
	}
	if p, err := base64.RawURLEncoding.DecodeString(sub.Keys.P256dh); err != nil || len(p) != 65 || p[0] != 4 {
		return protocol.Refuse(protocol.ErrInvalid, "keys.p256dh must be an uncompressed P-256 public key, base64url")
	}
	if a, err := base64.RawURLEncoding.DecodeString(sub.Keys.Auth); err != nil || len(a) != 16 {
		return protocol.Refuse(protocol.ErrInvalid, "keys.auth must be 16 bytes, base64url")
	}
	have, err := n.store.PushSubscriptionsOf(ctx, []string{userID})
	if err != nil {
		return err
	}
	mine := have[userID]
	if len(mine) >= MaxDevices && !slices.ContainsFunc(mine, func(s storage.PushSubscription) bool { return s.DeviceID == device }) {
		return protocol.Refuse(protocol.ErrLimit, "at most %d devices receive notifications", MaxDevices)
	}
	if err := n.store.SavePushSubscription(ctx, storage.PushSubscription{UserID: userID, DeviceID: device,
		Endpoint: sub.Endpoint, P256dh: sub.Keys.P256dh, Auth: sub.Keys.Auth, CreatedAt: time.Now().UTC()}); err != nil {
		return err
	}
	n.devicesChanged(userID)
	return nil
}

// Unsubscribe removes a device's subscription; one that does not exist is no error.
func (n *Notifier) Unsubscribe(ctx context.Context, userID, device string) error {
	if !deviceID.MatchString(device) {
		return protocol.Refuse(protocol.ErrInvalid, "a device id is 1 to 64 letters, digits, - or _")
	}
	if err := n.store.DeletePushSubscription(ctx, userID, device, ""); err != nil {
		return err
	}
	n.devicesChanged(userID)
	return nil
}

// Settings are a user's notification settings as the API shows them. Which conversations
// notify at all is each conversation's notify setting (set_notify), not a push setting; a body
// that still carries the "muted" list of earlier versions has it ignored, as any unknown field.
type Settings struct {
	// Preview shows the message's text in a notification; false shows only "New message".
	Preview bool `json:"preview"`
}

// Settings returns a user's notification settings.
func (n *Notifier) Settings(ctx context.Context, userID string) (Settings, error) {
	set, err := n.store.PushSettingsOf(ctx, userID)
	if err != nil {
		return Settings{}, err
	}
	return Settings{Preview: set.Preview}, nil
}

// SetSettings replaces a user's notification settings.
func (n *Notifier) SetSettings(ctx context.Context, userID string, set Settings) error {
	return n.store.SetPushSettings(ctx, userID, storage.PushSettings{Preview: set.Preview})
}
