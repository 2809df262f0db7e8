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

// Cursor is one user's read position in one conversation. It only moves forward. Hidden mirrors
// the user's HideReceipts so receipt counts need no join. HiddenSeq is where the user deleted the
// conversation for themselves: it is out of their list, and their history starts after it, until a
// newer message arrives. DeliveredSeq is the highest seq any of the user's devices has said it
// received; a read seq counts as delivered too.
type Cursor struct {
	UserID         string    `bson:"userId"`
	ConversationID string    `bson:"conversationId"`
	ReadSeq        int64     `bson:"readSeq"`
	DeliveredSeq   int64     `bson:"deliveredSeq,omitempty"`
	HiddenSeq      int64     `bson:"hiddenSeq,omitempty"`
	Hidden         bool      `bson:"hidden"`
	UpdatedAt      time.Time `bson:"updatedAt"`
}

func cursorID(userID, conversationID string) string {
	return userID + "|" + conversationID
}

// createCursors gives members a cursor at 0 in a conversation. A cursor exists exactly while its
// user is a member, so a late cursor write for a removed member or a deleted account cannot bring
// one back. Cursors that exist already are left as they are.
func (s *Store) createCursors(ctx context.Context, conversationID string, members []string) error {
	if len(members) == 0 {
		return nil
	}
	docs := make([]any, len(members))
	for i, m := range members {
		docs[i] = bson.D{
			{Key: "_id", Value: cursorID(m, conversationID)},
			{Key: "userId", Value: m},
			{Key: "conversationId", Value: conversationID},
			{Key: "readSeq", Value: int64(0)},
			{Key: "hidden", Value: false},
			{Key: "updatedAt", Value: time.Now().UTC()},
		}
	}
	_, err := s.cursors.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil && !onlyDuplicates(err) {
		return fmt.Errorf("create %d cursors in %s: %w", len(docs), conversationID, err)
	}
	return nil
}

// AdvanceCursors raises each cursor to at least its ReadSeq and DeliveredSeq with one unordered
// bulk of $max updates, so out-of-order reports never move a cursor back. Cursors of users who are
// no longer members do not exist and are not recreated.
func (s *Store) AdvanceCursors(ctx context.Context, cursors []Cursor) (err error) {
	defer s.metrics.observe(opAdvanceCursors, time.Now(), &err)
	if len(cursors) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, 0, len(cursors))
	for _, c := range cursors {
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: cursorID(c.UserID, c.ConversationID)}}).
			SetUpdate(bson.D{
				{Key: "$max", Value: bson.D{{Key: "readSeq", Value: c.ReadSeq}, {Key: "deliveredSeq", Value: max(c.DeliveredSeq, c.ReadSeq)}}},
				{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: c.UpdatedAt}, {Key: "hidden", Value: c.Hidden}}},
			}))
	}
	if err := bulkWrite(ctx, s.cursors, models, false); err != nil {
		return fmt.Errorf("advance %d read cursors: %w", len(models), err)
	}
	return nil
}

// CursorsOf returns the read cursor of a user in each conversation of their memberships: each
// read by its _id, user|conversation (on the embedded store a filter on userId read every
// cursor). A cursor exists exactly while its user is a member, so a membership left behind finds
// none.
func (s *Store) CursorsOf(ctx context.Context, userID string) (_ []Cursor, err error) {
	defer s.metrics.observe(opCursorsOf, time.Now(), &err)
	convs, err := s.memberships.of(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("read memberships of %s: %w", userID, err)
	}
	ids := make([]string, len(convs))
	for i, c := range convs {
		ids[i] = cursorID(userID, c)
	}
	byID, err := findByIDs[Cursor](ctx, s.cursors, ids)
	if err != nil {
		return nil, fmt.Errorf("read cursors of %s: %w", userID, err)
	}
	out := make([]Cursor, 0, len(byID))
	for _, id := range ids {
		if c, ok := byID[id]; ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// Receipts count a member's own sends as reads (Conversation.ReadSeq): a member whose cursor is
// behind seq has read it if they have sent a message at or after it. So each receipt query first
// reads the conversation's senders, then matches cursors by position or by name.

// sendersFrom returns the members other than senderID whose newest message in the conversation
// is at or past seq, with those seqs.
func (s *Store) sendersFrom(ctx context.Context, conversationID string, seq int64, senderID string) (map[string]int64, error) {
	// Not Conversation: its member list may be 200 KB, and only the senders are needed.
	var conv Conversation
	err := decode(s.conversations.FindOne(ctx, bson.D{{Key: "_id", Value: conversationID}},
		options.FindOne().SetProjection(bson.D{{Key: "senders", Value: 1}})), &conv)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read senders of %s: %w", conversationID, err)
	}
	if conv, err = s.conversationWithCounters(ctx, conv); err != nil {
		return nil, err
	}
	out := make(map[string]int64)
	for u, sent := range conv.Senders {
		if sent >= seq && u != senderID {
			out[u] = sent
		}
	}
	return out, nil
}

// receiptFilter matches the cursors of the conversation's members other than senderID with any
// of positions at or past seq, or whose user is in senders. visibleOnly leaves out the users who
// hide their receipts.
func receiptFilter(conversationID string, seq int64, senderID string, senders map[string]int64, visibleOnly bool, positions ...string) bson.D {
	var either bson.A
	for _, field := range positions {
		either = append(either, bson.D{{Key: field, Value: bson.D{{Key: "$gte", Value: seq}}}})
	}
	if len(senders) > 0 {
		names := make([]string, 0, len(senders))
		for u := range senders {
			names = append(names, u)
		}
		either = append(either, bson.D{{Key: "userId", Value: bson.D{{Key: "$in", Value: names}}}})
	}
	filter := bson.D{
		{Key: "conversationId", Value: conversationID},
		{Key: "userId", Value: bson.D{{Key: "$ne", Value: senderID}}},
		{Key: "$or", Value: either},
	}
	if visibleOnly {
		filter = append(filter, bson.E{Key: "hidden", Value: bson.D{{Key: "$ne", Value: true}}})
	}
	return filter
}

// CountReaders counts the members other than senderID who have read seq, without listing them.
func (s *Store) CountReaders(ctx context.Context, conversationID string, seq int64, senderID string) (_ int64, err error) {
	defer s.metrics.observe(opCountReaders, time.Now(), &err)
	senders, err := s.sendersFrom(ctx, conversationID, seq, senderID)
	if err != nil {
		return 0, err
	}
	n, err := s.cursors.CountDocuments(ctx, receiptFilter(conversationID, seq, senderID, senders, true, "readSeq"))
	if err != nil {
		return 0, fmt.Errorf("count readers of %s/%d: %w", conversationID, seq, err)
	}
	return n, nil
}

// CountDelivered counts the members other than senderID who have received seq on some device:
// said so (deliveredSeq), or read it. Hiding receipts does not hide this, as in the messengers
// people know: a sender may always see that a message arrived.
func (s *Store) CountDelivered(ctx context.Context, conversationID string, seq int64, senderID string) (_ int64, err error) {
	defer s.metrics.observe(opCountDelivered, time.Now(), &err)
	senders, err := s.sendersFrom(ctx, conversationID, seq, senderID)
	if err != nil {
		return 0, err
	}
	// Cursors written before deliveredSeq existed have only readSeq.
	n, err := s.cursors.CountDocuments(ctx, receiptFilter(conversationID, seq, senderID, senders, false, "deliveredSeq", "readSeq"))
	if err != nil {
		return 0, fmt.Errorf("count deliveries of %s/%d: %w", conversationID, seq, err)
	}
	return n, nil
}

// Readers lists up to limit members other than senderID who have read seq, each with their read
// position (Conversation.ReadSeq).
func (s *Store) Readers(ctx context.Context, conversationID string, seq int64, senderID string, limit int64) (_ []Cursor, err error) {
	defer s.metrics.observe(opReaders, time.Now(), &err)
	senders, err := s.sendersFrom(ctx, conversationID, seq, senderID)
	if err != nil {
		return nil, err
	}
	cur, err := s.cursors.Find(ctx, receiptFilter(conversationID, seq, senderID, senders, true, "readSeq"), options.Find().SetLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("find readers of %s/%d: %w", conversationID, seq, err)
	}
	var out []Cursor
	if err := readAll(ctx, cur, &out); err != nil {
		return nil, fmt.Errorf("read readers of %s/%d: %w", conversationID, seq, err)
	}
	for i := range out {
		out[i].ReadSeq = max(out[i].ReadSeq, senders[out[i].UserID])
	}
	return out, nil
}
