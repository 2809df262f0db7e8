package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/chatd/chatd/protocol"
)

// Message is one stored message: the one definition of a message's state (the wire view,
// protocol.Message, is made from it by message.View). Seq is gapless per conversation, starting
// at 1. Kind is one of protocol's message kinds (protocol.KindText, KindDeleted, KindSystem),
// stored as the same string. Its seq, sender, creation time and clientMsgId never change; its
// text, reactions and kind (a tombstone) change only through its conversation's owner, by the
// rules of package message, each change numbered by Version.
type Message struct {
	ConversationID string    `bson:"conversationId"`
	Seq            int64     `bson:"seq"`
	SenderID       string    `bson:"senderId"`
	Kind           string    `bson:"kind"`
	Body           string    `bson:"body"`
	CreatedAt      time.Time `bson:"createdAt"`
	ClientMsgID    string    `bson:"clientMsgId"`
	ReplyTo        int64     `bson:"replyTo,omitempty"`
	// Quote is the start of the ReplyTo message when this one was sent.
	Quote *Quote `bson:"quote,omitempty"`
	// Version is the conversation's change number of the message's last change; 0 when never
	// changed. The owner guards every change with it.
	Version  int64      `bson:"version,omitempty"`
	EditedAt *time.Time `bson:"editedAt,omitempty"`
	// Reactions hold every member's reactions, per emoji in the order of first use; bounded by
	// protocol.MaxReactionKinds emoji and protocol.MaxReactionsPerUser per member.
	Reactions []Reaction `bson:"reactions,omitempty"`
}

// Quote is the start of a replied-to message, copied into the reply.
type Quote struct {
	SenderID string `bson:"senderId"`
	Body     string `bson:"body,omitempty"`
	Deleted  bool   `bson:"deleted,omitempty"`
}

// Reaction is one emoji on a message and the members who used it, in the order they did.
type Reaction struct {
	Emoji string   `bson:"emoji"`
	Users []string `bson:"users"`
}

// MessageUpdate is a message's new state, written only if the stored one still has PrevVersion
// and is not a tombstone: a writer that is no longer the owner, or a change made meanwhile, makes
// it match nothing.
type MessageUpdate struct {
	Message     Message
	PrevVersion int64
}

// ErrConflict means a guarded update matched nothing: another writer changed the message first.
var ErrConflict = errors.New("message changed by another writer")

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
	err = decode(s.messages.FindOne(ctx, bson.D{
		{Key: "conversationId", Value: conversationID},
		{Key: "clientMsgId", Value: clientMsgID},
	}), &m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("find message %s in %s: %w", clientMsgID, conversationID, err)
	}
	return m, nil
}

// UpdateMessages writes the new states of changed messages (edits, reactions, tombstones) with
// one bulk write of guarded updates. It returns ErrConflict when any of them matched nothing;
// the others may have been written.
func (s *Store) UpdateMessages(ctx context.Context, updates []MessageUpdate) (err error) {
	defer s.metrics.observe(opUpdateMessages, time.Now(), &err)
	if len(updates) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, len(updates))
	for i, u := range updates {
		models[i] = mongo.NewUpdateOneModel().SetFilter(guardedMessage(u)).SetUpdate(messageState(u.Message))
	}
	matched, err := bulkWriteMatched(ctx, s.messages, models)
	if err != nil {
		return fmt.Errorf("update %d messages: %w", len(updates), err)
	}
	if matched < int64(len(updates)) {
		return fmt.Errorf("update %d messages, %d matched: %w", len(updates), matched, ErrConflict)
	}
	return nil
}

// guardedMessage matches the message of u if it still has u's previous version and is not a
// tombstone. A message never changed may have no version field at all.
func guardedMessage(u MessageUpdate) bson.D {
	version := any(u.PrevVersion)
	if u.PrevVersion == 0 {
		version = bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}
	}
	return bson.D{
		{Key: "conversationId", Value: u.Message.ConversationID},
		{Key: "seq", Value: u.Message.Seq},
		{Key: "version", Value: version},
		{Key: "kind", Value: bson.D{{Key: "$ne", Value: protocol.KindDeleted}}},
	}
}

// messageState is the update that gives a stored message m's changeable fields. A tombstone keeps
// conversationId, seq, senderId, createdAt and clientMsgId (the sequence stays gapless and a
// retried send still dedupes) and loses everything else.
func messageState(m Message) bson.D {
	set := bson.D{{Key: "kind", Value: m.Kind}, {Key: "body", Value: m.Body}, {Key: "version", Value: m.Version}}
	var unset bson.D
	keep := func(field string, value any, present bool) {
		if present {
			set = append(set, bson.E{Key: field, Value: value})
		} else {
			unset = append(unset, bson.E{Key: field, Value: ""})
		}
	}
	keep("editedAt", m.EditedAt, m.EditedAt != nil)
	keep("reactions", m.Reactions, len(m.Reactions) > 0)
	keep("quote", m.Quote, m.Quote != nil)
	keep("replyTo", m.ReplyTo, m.ReplyTo != 0)
	update := bson.D{{Key: "$set", Value: set}}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	return update
}

// ChangedMessages returns up to limit messages of a conversation changed after version
// afterVersion, with seq at most maxSeq, in version order: what a reconnecting client that holds
// the messages up to maxSeq has missed. One range scan on {conversationId, version}.
func (s *Store) ChangedMessages(ctx context.Context, conversationID string, afterVersion, maxSeq int64, limit int) (_ []Message, err error) {
	defer s.metrics.observe(opChangedMessages, time.Now(), &err)
	filter := bson.D{
		{Key: "conversationId", Value: conversationID},
		{Key: "version", Value: bson.D{{Key: "$gt", Value: afterVersion}}},
		{Key: "seq", Value: bson.D{{Key: "$lte", Value: maxSeq}}},
	}
	cur, err := s.messages.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "version", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("find messages of %s changed after %d: %w", conversationID, afterVersion, err)
	}
	var out []Message
	if err := readAll(ctx, cur, &out); err != nil {
		return nil, fmt.Errorf("read messages of %s changed after %d: %w", conversationID, afterVersion, err)
	}
	return out, nil
}

// HighestSeq returns the largest stored seq of a conversation, 0 when it has no messages.
func (s *Store) HighestSeq(ctx context.Context, conversationID string) (_ int64, err error) {
	defer s.metrics.observe(opHighestSeq, time.Now(), &err)
	var m struct {
		Seq int64 `bson:"seq"`
	}
	err = decode(s.messages.FindOne(ctx,
		bson.D{{Key: "conversationId", Value: conversationID}},
		options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}}).SetProjection(bson.D{{Key: "seq", Value: 1}}),
	), &m)
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
	if err := readAll(ctx, cur, &out); err != nil {
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
