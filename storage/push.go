package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// What Web Push keeps: each device's subscription, the list of a user's devices, each user's
// notification settings, and the notification each (user, conversation) was last shown. All of
// it is read by _id (the embedded store answers nothing else from an index).
const (
	pushSubscriptionsCollection = "pushSubscriptions"
	pushDevicesCollection       = "pushDevices" // a userIndex: _id user, devices [device ids]
	pushSettingsCollection      = "pushSettings"
	pushNoticesCollection       = "pushNotices"
)

// PushSubscription is one device's Web Push subscription (the browser's PushSubscription): where
// to POST and the keys a payload is encrypted to.
type PushSubscription struct {
	UserID    string    `bson:"userId"`
	DeviceID  string    `bson:"deviceId"`
	Endpoint  string    `bson:"endpoint"`
	P256dh    string    `bson:"p256dh"`
	Auth      string    `bson:"auth"`
	CreatedAt time.Time `bson:"createdAt"`
}

// PushSettings are a user's Web Push settings: whether a notification shows the message's text.
// (Which conversations notify is their notify setting, notifySettings. A "muted" list stored by
// earlier versions is not decoded, and goes with the next write of the settings.)
type PushSettings struct {
	Preview bool `bson:"preview"`
}

// DefaultPushSettings are the settings of a user who never changed them: text shown (what the
// common chat products do).
var DefaultPushSettings = PushSettings{Preview: true}

// PushNotice says a notification of a conversation is showing on a user's devices, up to which
// seq: a read at or past ToSeq withdraws it, and the next notification shows only later seqs.
type PushNotice struct {
	UserID         string    `bson:"userId"`
	ConversationID string    `bson:"conversationId"`
	ToSeq          int64     `bson:"toSeq"`
	SentAt         time.Time `bson:"sentAt"`
}

func pushKey(userID, other string) string { return userID + "|" + other }

func (s *Store) pushDevices() *userIndex {
	return newUserIndex(s.users.Database(), pushDevicesCollection, "devices")
}

func (s *Store) pushCollection(name string) *mongo.Collection {
	return s.users.Database().Collection(name)
}

// SavePushSubscription stores sub as its device's subscription, replacing the one it had. The
// device is named in the user's list before its subscription is written (see userIndex).
func (s *Store) SavePushSubscription(ctx context.Context, sub PushSubscription) (err error) {
	defer s.metrics.observe(opSavePushSubscription, time.Now(), &err)
	if _, err := s.pushDevices().add(ctx, map[string][]string{sub.UserID: {sub.DeviceID}}); err != nil {
		return fmt.Errorf("name device %s of %s: %w", sub.DeviceID, sub.UserID, err)
	}
	doc := bson.D{{Key: "_id", Value: pushKey(sub.UserID, sub.DeviceID)}, {Key: "userId", Value: sub.UserID},
		{Key: "deviceId", Value: sub.DeviceID}, {Key: "endpoint", Value: sub.Endpoint}, {Key: "p256dh", Value: sub.P256dh},
		{Key: "auth", Value: sub.Auth}, {Key: "createdAt", Value: sub.CreatedAt}}
	if _, err := s.pushCollection(pushSubscriptionsCollection).ReplaceOne(ctx, bson.D{{Key: "_id", Value: pushKey(sub.UserID, sub.DeviceID)}},
		doc, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store push subscription of %s on %s: %w", sub.UserID, sub.DeviceID, err)
	}
	return nil
}

// DeletePushSubscription removes a device's subscription; removing one that is gone is no error.
// endpoint, if not empty, must be the stored one: a push service's 410 for an old endpoint does
// not remove the device's newer subscription. (Read, then deleted by _id: a filter with more than
// _id scans the collection on the embedded store.)
func (s *Store) DeletePushSubscription(ctx context.Context, userID, deviceID, endpoint string) (err error) {
	defer s.metrics.observe(opDeletePushSubscription, time.Now(), &err)
	subs := s.pushCollection(pushSubscriptionsCollection)
	id := pushKey(userID, deviceID)
	if endpoint != "" {
		stored, err := findByID[PushSubscription](ctx, subs, id)
		if errors.Is(err, ErrNotFound) || (err == nil && stored.Endpoint != endpoint) {
			return nil // gone, or replaced since: the device stays named
		}
		if err != nil {
			return fmt.Errorf("read push subscription of %s on %s: %w", userID, deviceID, err)
		}
	}
	if _, err := subs.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return fmt.Errorf("delete push subscription of %s on %s: %w", userID, deviceID, err)
	}
	if _, err := s.pushDevices().remove(ctx, map[string][]string{userID: {deviceID}}); err != nil {
		return fmt.Errorf("unname device %s of %s: %w", deviceID, userID, err)
	}
	return nil
}

// PushSubscriptionsOf returns the subscriptions of each of users who has any: their device
// lists, then each subscription, by _id.
func (s *Store) PushSubscriptionsOf(ctx context.Context, users []string) (_ map[string][]PushSubscription, err error) {
	defer s.metrics.observe(opPushSubscriptionsOf, time.Now(), &err)
	named, err := s.pushDevices().ofEach(ctx, users)
	if err != nil {
		return nil, fmt.Errorf("read push devices of %d users: %w", len(users), err)
	}
	var ids []string
	for uid, devices := range named {
		for _, d := range devices {
			ids = append(ids, pushKey(uid, d))
		}
	}
	found, err := findByIDs[PushSubscription](ctx, s.pushCollection(pushSubscriptionsCollection), ids)
	if err != nil {
		return nil, fmt.Errorf("read push subscriptions of %d users: %w", len(users), err)
	}
	out := make(map[string][]PushSubscription, len(named))
	for _, id := range slices.Sorted(maps.Keys(found)) {
		sub := found[id]
		out[sub.UserID] = append(out[sub.UserID], sub)
	}
	return out, nil
}

// PushSettingsOf returns a user's notification settings, DefaultPushSettings if they set none.
func (s *Store) PushSettingsOf(ctx context.Context, userID string) (_ PushSettings, err error) {
	defer s.metrics.observe(opPushSettingsOf, time.Now(), &err)
	set, err := findByID[PushSettings](ctx, s.pushCollection(pushSettingsCollection), userID)
	if errors.Is(err, ErrNotFound) {
		return DefaultPushSettings, nil
	}
	return set, err
}

// SetPushSettings stores a user's notification settings whole. Only the user's own requests
// write it.
func (s *Store) SetPushSettings(ctx context.Context, userID string, set PushSettings) (err error) {
	defer s.metrics.observe(opSetPushSettings, time.Now(), &err)
	if _, err := s.pushCollection(pushSettingsCollection).ReplaceOne(ctx, bson.D{{Key: "_id", Value: userID}},
		set, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store push settings of %s: %w", userID, err)
	}
	return nil
}

// PushNoticeOf returns what the last notification of a conversation showed a user, or
// ErrNotFound when none is showing.
func (s *Store) PushNoticeOf(ctx context.Context, userID, conversationID string) (_ PushNotice, err error) {
	defer s.metrics.observe(opPushNoticeOf, time.Now(), &err)
	return findByID[PushNotice](ctx, s.pushCollection(pushNoticesCollection), pushKey(userID, conversationID))
}

// SavePushNotice records the notification a user was last shown of a conversation.
func (s *Store) SavePushNotice(ctx context.Context, n PushNotice) (err error) {
	defer s.metrics.observe(opSavePushNotice, time.Now(), &err)
	if _, err := s.pushCollection(pushNoticesCollection).ReplaceOne(ctx, bson.D{{Key: "_id", Value: pushKey(n.UserID, n.ConversationID)}},
		n, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store push notice of %s in %s: %w", n.UserID, n.ConversationID, err)
	}
	return nil
}

// DeletePushNotice forgets a withdrawn notification.
func (s *Store) DeletePushNotice(ctx context.Context, userID, conversationID string) (err error) {
	defer s.metrics.observe(opDeletePushNotice, time.Now(), &err)
	if _, err := s.pushCollection(pushNoticesCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: pushKey(userID, conversationID)}}); err != nil {
		return fmt.Errorf("delete push notice of %s in %s: %w", userID, conversationID, err)
	}
	return nil
}

// CursorOf returns a user's read cursor in a conversation, read by _id; ErrNotFound when they are
// not a member.
func (s *Store) CursorOf(ctx context.Context, userID, conversationID string) (_ Cursor, err error) {
	defer s.metrics.observe(opCursorOf, time.Now(), &err)
	return findByID[Cursor](ctx, s.cursors, cursorID(userID, conversationID))
}

// deletePushStateOf removes what push keeps of a user: each device's subscription and the list
// naming them, their push settings, and the notices last shown in conversationIDs (their
// conversations), each by _id.
func (s *Store) deletePushStateOf(ctx context.Context, userID string, conversationIDs []string) error {
	devices := s.pushDevices()
	named, err := devices.ofEach(ctx, []string{userID})
	if err != nil {
		return fmt.Errorf("read push devices of %s: %w", userID, err)
	}
	var subs []mongo.WriteModel
	for _, d := range named[userID] {
		subs = append(subs, mongo.NewDeleteOneModel().SetFilter(byID(pushKey(userID, d))))
	}
	if err := bulkWrite(ctx, s.pushCollection(pushSubscriptionsCollection), subs, false); err != nil {
		return fmt.Errorf("delete push subscriptions of %s: %w", userID, err)
	}
	if err := devices.drop(ctx, userID); err != nil {
		return err
	}
	if _, err := s.pushCollection(pushSettingsCollection).DeleteOne(ctx, byID(userID)); err != nil {
		return fmt.Errorf("delete push settings of %s: %w", userID, err)
	}
	notices := make([]mongo.WriteModel, len(conversationIDs))
	for i, id := range conversationIDs {
		notices[i] = mongo.NewDeleteOneModel().SetFilter(byID(pushKey(userID, id)))
	}
	if err := bulkWrite(ctx, s.pushCollection(pushNoticesCollection), notices, false); err != nil {
		return fmt.Errorf("delete push notices of %s: %w", userID, err)
	}
	return nil
}
