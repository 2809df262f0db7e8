package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Message kinds as stored.
const (
	KindText    = "text"
	KindDeleted = "deleted"
	KindSystem  = "system"
)

// Message is one stored message. Seq is gapless per conversation, starting at 1.
type Message struct {
	ConversationID string    `bson:"conversationId"`
	Seq            int64     `bson:"seq"`
	SenderID       string    `bson:"senderId"`
	Kind           string    `bson:"kind"`
	Body           string    `bson:"body"`
	CreatedAt      time.Time `bson:"createdAt"`
	ClientMsgID    string    `bson:"clientMsgId"`
	ReplyTo        int64     `bson:"replyTo,omitempty"`
}

// InsertMessages stores msgs in order with one insertMany. When a unique index refuses one of them
// it returns a *DuplicateError: the messages before its Index were stored, the rest were not.
func (s *Store) InsertMessages(ctx context.Context, msgs []Message) (err error) {
	defer s.metrics.observe(opInsertMessages, time.Now(), &err)
	if len(msgs) == 0 {
		return nil
	}
	docs := make([]any, len(msgs))
	for i := range msgs {
		docs[i] = msgs[i]
	}
	_, err = s.messages.InsertMany(ctx, docs, options.InsertMany().SetOrdered(true))
	if err == nil {
		return nil
	}
	if i, ok := duplicateIndex(err); ok {
		return &DuplicateError{Index: i, Err: err}
	}
	return fmt.Errorf("insert %d messages: %w", len(msgs), err)
}

// MessageByClientID finds the message a client sent with clientMsgID, or ErrNotFound.
func (s *Store) MessageByClientID(ctx context.Context, conversationID, clientMsgID string) (_ Message, err error) {
	defer s.metrics.observe(opMessageByClientID, time.Now(), &err)
	var m Message
	err = s.messages.FindOne(ctx, bson.D{
		{Key: "conversationId", Value: conversationID},
		{Key: "clientMsgId", Value: clientMsgID},
	}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("find message %s in %s: %w", clientMsgID, conversationID, err)
	}
	return m, nil
}

// HighestSeq returns the largest stored seq of a conversation, 0 when it has no messages.
func (s *Store) HighestSeq(ctx context.Context, conversationID string) (_ int64, err error) {
	defer s.metrics.observe(opHighestSeq, time.Now(), &err)
	var m struct {
		Seq int64 `bson:"seq"`
	}
	err = s.messages.FindOne(ctx,
		bson.D{{Key: "conversationId", Value: conversationID}},
		options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}}).SetProjection(bson.D{{Key: "seq", Value: 1}}),
	).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find highest seq of %s: %w", conversationID, err)
	}
	return m.Seq, nil
}

// MessageRange returns the messages with from <= seq <= to in seq order: one bounded range scan
// on the {conversationId, seq} index, whatever the depth.
func (s *Store) MessageRange(ctx context.Context, conversationID string, from, to int64) (_ []Message, err error) {
	defer s.metrics.observe(opMessageRange, time.Now(), &err)
	if to < from {
		return nil, nil
	}
	filter, opts := rangeQuery(conversationID, from, to)
	cur, err := s.messages.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("find messages %d..%d of %s: %w", from, to, conversationID, err)
	}
	var out []Message
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read messages %d..%d of %s: %w", from, to, conversationID, err)
	}
	return out, nil
}

func rangeQuery(conversationID string, from, to int64) (bson.D, *options.FindOptionsBuilder) {
	filter := bson.D{
		{Key: "conversationId", Value: conversationID},
		{Key: "seq", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lte", Value: to}}},
	}
	return filter, options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}).SetLimit(to - from + 1)
}

// ExplainMessageRange asks the server how it runs the MessageRange query, with execution
// statistics, so operators and tests can check that a page is an index scan of about its size.
func (s *Store) ExplainMessageRange(ctx context.Context, conversationID string, from, to int64) (_ bson.Raw, err error) {
	defer s.metrics.observe(opExplainMessageRange, time.Now(), &err)
	filter, _ := rangeQuery(conversationID, from, to)
	cmd := bson.D{
		{Key: "explain", Value: bson.D{
			{Key: "find", Value: s.messages.Name()},
			{Key: "filter", Value: filter},
			{Key: "sort", Value: bson.D{{Key: "seq", Value: 1}}},
			{Key: "limit", Value: to - from + 1},
		}},
		{Key: "verbosity", Value: "executionStats"},
	}
	res, err := s.messages.Database().RunCommand(ctx, cmd).Raw()
	if err != nil {
		return nil, fmt.Errorf("explain messages %d..%d of %s: %w", from, to, conversationID, err)
	}
	return res, nil
}
