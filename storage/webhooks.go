package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// What outgoing webhooks keep: each conversation's webhooks in one document keyed by the
// conversation, and each webhook's delivery cursor keyed by <conversation>|<webhook>. Both are
// read by _id.
const (
	webhooksCollection       = "webhooks"
	webhookCursorsCollection = "webhookCursors"
)

// Webhook is one outgoing webhook of a conversation: where its events are POSTed, and the secret
// their signatures are made with.
type Webhook struct {
	ID        string    `bson:"id"`
	URL       string    `bson:"url"`
	Secret    string    `bson:"secret"`
	CreatedBy string    `bson:"createdBy"`
	CreatedAt time.Time `bson:"createdAt"`
}

// WebhookCursor is how far a webhook's receiver has accepted a conversation's events: the
// messages up to Seq and the changes up to Version.
type WebhookCursor struct {
	Seq     int64 `bson:"seq"`
	Version int64 `bson:"version"`
}

type webhooksDoc struct {
	Hooks []Webhook `bson:"hooks"`
}

// WebhooksOf returns the webhooks of a conversation, none when it has none.
func (s *Store) WebhooksOf(ctx context.Context, conversationID string) (_ []Webhook, err error) {
	defer s.metrics.observe(opWebhooksOf, time.Now(), &err)
	doc, err := findByID[webhooksDoc](ctx, s.pushCollection(webhooksCollection), conversationID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return doc.Hooks, err
}

// SetWebhooks stores a conversation's webhooks whole. Only the admin API and the group's owner
// change them, rarely; the last write wins.
func (s *Store) SetWebhooks(ctx context.Context, conversationID string, hooks []Webhook) (err error) {
	defer s.metrics.observe(opSetWebhooks, time.Now(), &err)
	coll := s.pushCollection(webhooksCollection)
	if len(hooks) == 0 {
		_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: conversationID}})
	} else {
		_, err = coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: conversationID}}, webhooksDoc{Hooks: slices.Clone(hooks)}, options.Replace().SetUpsert(true))
	}
	if err != nil {
		return fmt.Errorf("store webhooks of %s: %w", conversationID, err)
	}
	return nil
}

// WebhookCursorOf returns how far a webhook's receiver has accepted, zero before anything.
func (s *Store) WebhookCursorOf(ctx context.Context, conversationID, webhookID string) (_ WebhookCursor, err error) {
	defer s.metrics.observe(opWebhookCursorOf, time.Now(), &err)
	cur, err := findByID[WebhookCursor](ctx, s.pushCollection(webhookCursorsCollection), pushKey(conversationID, webhookID))
	if errors.Is(err, ErrNotFound) {
		return WebhookCursor{}, nil
	}
	return cur, err
}

// SaveWebhookCursor records how far a webhook's receiver has accepted. Only the conversation's
// owner writes it, after each accepted event.
func (s *Store) SaveWebhookCursor(ctx context.Context, conversationID, webhookID string, cur WebhookCursor) (err error) {
	defer s.metrics.observe(opSaveWebhookCursor, time.Now(), &err)
	if _, err := s.pushCollection(webhookCursorsCollection).ReplaceOne(ctx, bson.D{{Key: "_id", Value: pushKey(conversationID, webhookID)}},
		cur, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store cursor of webhook %s in %s: %w", webhookID, conversationID, err)
	}
	return nil
}
