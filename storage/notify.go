package storage

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// notifyCollection holds each user's notification settings per conversation: one document per
// user, {_id: user, conversations: {<conversation>: "mentions" | "nothing"}}, read by _id when
// the user's conversations are listed. A conversation not named is notified for every message.
const notifyCollection = "notifySettings"

type notifyDoc struct {
	ID            string            `bson:"_id"`
	Conversations map[string]string `bson:"conversations,omitempty"`
}

func (s *Store) notifySettings() *mongo.Collection {
	return s.counters.Database().Collection(notifyCollection)
}

// NotifySettings returns a user's notification settings by conversation; conversations with the
// default are left out.
func (s *Store) NotifySettings(ctx context.Context, userID string) (map[string]string, error) {
	doc, err := findByID[notifyDoc](ctx, s.notifySettings(), userID)
	if errors.Is(err, ErrNotFound) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read notification settings of %s: %w", userID, err)
	}
	return doc.Conversations, nil
}

// SetNotify stores a user's notification setting for a conversation; level "" is the default
// and removes the setting. Conversation ids have no '.' or '$': safe as field names. Two
// changes of one user's settings at the same moment may lose one on the embedded store, whose
// updates rewrite the whole document; a user changes them by hand, one at a time.
func (s *Store) SetNotify(ctx context.Context, userID, conversationID, level string) error {
	field := "conversations." + conversationID
	update := bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: level}}}}
	if level == "" {
		update = bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}}
	}
	if _, err := s.notifySettings().UpdateOne(ctx, byID(userID), update, options.UpdateOne().SetUpsert(true)); err != nil {
		return fmt.Errorf("store notification setting of %s in %s: %w", userID, conversationID, err)
	}
	return nil
}
