package storage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/chatd/chatd/protocol"
)

// deletedSenderTombstone is the update that turns a message of a deleted account into a
// tombstone with no sender: it keeps conversationId, seq, createdAt and clientMsgId, so the
// sequence stays gapless. Its version stays: the account's deletion is told to clients by the
// system message that follows, not as a change (see docs/PROTOCOL.md).
func deletedSenderTombstone() bson.D {
	unset := bson.D{}
	for _, f := range []string{"replyTo", "quote", "editedAt", "reactions"} {
		unset = append(unset, bson.E{Key: f, Value: ""})
	}
	return bson.D{
		{Key: "$set", Value: bson.D{{Key: "kind", Value: protocol.KindDeleted}, {Key: "body", Value: ""}, {Key: "senderId", Value: ""}}},
		{Key: "$unset", Value: unset},
	}
}

// seqsOf returns the seqs of the messages filter matches.
func (s *Store) seqsOf(ctx context.Context, filter bson.D) ([]int64, error) {
	cur, err := s.messages.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "seq", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		Seq int64 `bson:"seq"`
	}
	if err := readAll(ctx, cur, &docs); err != nil {
		return nil, err
	}
	seqs := make([]int64, len(docs))
	for i, d := range docs {
		seqs[i] = d.Seq
	}
	return seqs, nil
}

// RecordDeleted adds seqs to a conversation's deletedSeqs, counting each in deletedCount once:
// every seq's update is guarded by its absence, so a repeat (a retried delete, a resumed account
// deletion, two devices deleting at once) changes nothing. Whoever tombstones a message records
// its seq first: a failure between the two leaves a live message, and deleting it again finishes
// the job without counting it twice.
func (s *Store) RecordDeleted(ctx context.Context, conversationID string, seqs []int64) (err error) {
	defer s.metrics.observe(opRecordDeleted, time.Now(), &err)
	models := make([]mongo.WriteModel, len(seqs))
	for i, seq := range seqs {
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: conversationID}, {Key: "deletedSeqs", Value: bson.D{{Key: "$ne", Value: seq}}}}).
			SetUpdate(bson.D{
				{Key: "$addToSet", Value: bson.D{{Key: "deletedSeqs", Value: seq}}},
				{Key: "$inc", Value: bson.D{{Key: "deletedCount", Value: 1}}},
			})
	}
	if err := bulkWrite(ctx, s.conversations, models, false); err != nil {
		return fmt.Errorf("record %d tombstones in %s: %w", len(seqs), conversationID, err)
	}
	return nil
}

// HideConversation hides a conversation from one user's list until a message after lastSeq
// arrives, and marks everything up to lastSeq read, so only newer messages count as unread.
func (s *Store) HideConversation(ctx context.Context, userID, conversationID string, lastSeq int64) (err error) {
	defer s.metrics.observe(opHideConversation, time.Now(), &err)
	_, err = s.cursors.UpdateOne(ctx, bson.D{{Key: "_id", Value: cursorID(userID, conversationID)}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "readSeq", Value: lastSeq}, {Key: "hiddenSeq", Value: lastSeq}}}})
	if err != nil {
		return fmt.Errorf("hide %s for %s: %w", conversationID, userID, err)
	}
	return nil
}

// DeletedAccount says what deleting an account changed, so live sessions can be told.
type DeletedAccount struct {
	// DMs were removed with all their messages.
	DMs []Conversation
	// Groups lost the user as a member; the user's messages in them are tombstones now.
	Groups []Conversation
	// Tombstoned holds, by group id, the seqs of the user's messages this deletion made
	// tombstones (recorded in the group's deletedSeqs too).
	Tombstoned map[string][]int64
}

// DeleteAccount removes a user: their DMs and the DMs' messages, their membership in groups
// (where their messages become tombstones without a sender, so the others' sequence stays
// gapless), their cursors, the blocks they made and those of them, their presence, their
// memberships (and each removed DM's in its peer's), and the account itself. Every step is
// idempotent, so a failed deletion is finished by running it again.
func (s *Store) DeleteAccount(ctx context.Context, userID string) (_ DeletedAccount, err error) {
	defer s.metrics.observe(opDeleteAccount, time.Now(), &err)
	var out DeletedAccount
	convs, err := s.conversationsWithMember(ctx, userID)
	if err != nil {
		return out, err
	}
	for _, c := range convs {
		if c.Kind == KindDM {
			if _, err := s.messages.DeleteMany(ctx, bson.D{{Key: "conversationId", Value: c.ID}}); err != nil {
				return out, fmt.Errorf("delete messages of dm %s: %w", c.ID, err)
			}
			if _, err := s.cursors.DeleteMany(ctx, bson.D{{Key: "conversationId", Value: c.ID}}); err != nil {
				return out, fmt.Errorf("delete cursors of dm %s: %w", c.ID, err)
			}
			if _, err := s.counters.DeleteOne(ctx, bson.D{{Key: "_id", Value: c.ID}}); err != nil {
				return out, fmt.Errorf("delete counters of dm %s: %w", c.ID, err)
			}
			if _, err := s.conversations.DeleteOne(ctx, bson.D{{Key: "_id", Value: c.ID}}); err != nil {
				return out, fmt.Errorf("delete dm %s: %w", c.ID, err)
			}
			peers := slices.DeleteFunc(slices.Clone(c.Members), func(m string) bool { return m == userID })
			if err := s.removeMemberships(ctx, c.ID, peers...); err != nil {
				return out, err
			}
			out.DMs = append(out.DMs, c)
			continue
		}
		// Recorded first, as in DeleteMessage: a run that fails after this finds the same live
		// messages again, and records nothing twice.
		mine := bson.D{{Key: "conversationId", Value: c.ID}, {Key: "senderId", Value: userID}}
		seqs, err := s.seqsOf(ctx, bson.D{{Key: "conversationId", Value: c.ID}, {Key: "senderId", Value: userID},
			{Key: "kind", Value: bson.D{{Key: "$ne", Value: protocol.KindDeleted}}}})
		if err != nil {
			return out, fmt.Errorf("find messages of %s in %s: %w", userID, c.ID, err)
		}
		if err := s.RecordDeleted(ctx, c.ID, seqs); err != nil {
			return out, err
		}
		// Earlier tombstones of the user lose their sender too.
		if _, err := s.messages.UpdateMany(ctx, mine, deletedSenderTombstone()); err != nil {
			return out, fmt.Errorf("tombstone messages of %s in %s: %w", userID, c.ID, err)
		}
		if len(seqs) > 0 {
			if out.Tombstoned == nil {
				out.Tombstoned = make(map[string][]int64)
			}
			out.Tombstoned[c.ID] = seqs
		}
		if err := s.RemoveMember(ctx, c.ID, userID); err != nil {
			return out, err
		}
		out.Groups = append(out.Groups, c)
	}
	if _, err := s.cursors.DeleteMany(ctx, bson.D{{Key: "userId", Value: userID}}); err != nil {
		return out, fmt.Errorf("delete cursors of %s: %w", userID, err)
	}
	if err := s.deleteBlocksOf(ctx, userID); err != nil {
		return out, err
	}
	if _, err := s.presence.DeleteMany(ctx, bson.D{{Key: "userId", Value: userID}}); err != nil {
		return out, fmt.Errorf("delete presence of %s: %w", userID, err)
	}
	// After the conversations and the presence records they index are gone.
	for _, x := range []*userIndex{s.memberships, s.presenceNodes} {
		if err := x.drop(ctx, userID); err != nil {
			return out, err
		}
	}
	// Previews of the account's messages go with them, in the counter documents and in the
	// conversations that predate those.
	for _, coll := range []*mongo.Collection{s.counters, s.conversations} {
		if _, err := coll.UpdateMany(ctx, bson.D{{Key: "lastMessage.senderId", Value: userID}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: "lastMessage.kind", Value: protocol.KindDeleted}, {Key: "lastMessage.senderId", Value: ""}}},
			{Key: "$unset", Value: bson.D{{Key: "lastMessage.body", Value: ""}}},
		}); err != nil {
			return out, fmt.Errorf("delete previews of %s in %s: %w", userID, coll.Name(), err)
		}
	}
	// The account stays as a tombstone, so its tokens never create an empty account again.
	if err := s.markUserDeleted(ctx, userID); err != nil {
		return out, err
	}
	return out, nil
}

// DefaultBackfillBatch is how many legacy messages one backfill step numbers with one bulk
// write: big enough that round trips do not dominate, small enough that a step is quick to redo.
const DefaultBackfillBatch = 1000

// BackfillProgress reports a backfill step: a conversation and how many of its messages have a
// seq now.
type BackfillProgress struct {
	ConversationID string `json:"conversationId"`
	Numbered       int64  `json:"numbered"`
	Done           bool   `json:"done"`
}

// Backfill gives seqs to a legacy messages collection that has none: per conversation, in _id
// order, continuing after the highest seq already given, so an interrupted run resumes where it
// stopped and a finished one changes nothing. Messages without a clientMsgId get one derived from
// their _id, and members without a read cursor get one at 0. It builds the indexes when every
// conversation is numbered.
// batch is the messages per step (0 means DefaultBackfillBatch); progress may be nil.
func (s *Store) Backfill(ctx context.Context, batch int, progress func(BackfillProgress)) (err error) {
	defer s.metrics.observe(opBackfill, time.Now(), &err)
	if batch <= 0 {
		batch = DefaultBackfillBatch
	}
	cur, err := s.conversations.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "members", Value: 1}}))
	if err != nil {
		return fmt.Errorf("list conversations to backfill: %w", err)
	}
	var convs []struct {
		ID      string   `bson:"_id"`
		Members []string `bson:"members"`
	}
	if err := readAll(ctx, cur, &convs); err != nil {
		return fmt.Errorf("read conversations to backfill: %w", err)
	}
	for _, c := range convs {
		if err := s.backfillConversation(ctx, c.ID, batch, progress); err != nil {
			return err
		}
		if err := s.createCursors(ctx, c.ID, c.Members); err != nil {
			return err
		}
	}
	return s.ensureIndexes(ctx)
}

func (s *Store) backfillConversation(ctx context.Context, convID string, size int, progress func(BackfillProgress)) error {
	next, err := s.HighestSeq(ctx, convID)
	if err != nil {
		return err
	}
	for {
		cur, err := s.messages.Find(ctx,
			bson.D{{Key: "conversationId", Value: convID}, {Key: "seq", Value: bson.D{{Key: "$exists", Value: false}}}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(size)).
				SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "clientMsgId", Value: 1}}))
		if err != nil {
			return fmt.Errorf("find unnumbered messages of %s: %w", convID, err)
		}
		var batch []struct {
			ID          bson.ObjectID `bson:"_id"`
			ClientMsgID string        `bson:"clientMsgId"`
		}
		if err := readAll(ctx, cur, &batch); err != nil {
			return fmt.Errorf("read unnumbered messages of %s: %w", convID, err)
		}
		if len(batch) == 0 {
			break
		}
		models := make([]mongo.WriteModel, len(batch))
		for i, m := range batch {
			next++
			set := bson.D{{Key: "seq", Value: next}}
			if m.ClientMsgID == "" {
				set = append(set, bson.E{Key: "clientMsgId", Value: "legacy-" + m.ID.Hex()})
			}
			// The filter repeats seq-missing, so a message numbered by an earlier run is never renumbered.
			models[i] = mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "conversationId", Value: convID}, {Key: "_id", Value: m.ID}, {Key: "seq", Value: bson.D{{Key: "$exists", Value: false}}}}).
				SetUpdate(bson.D{{Key: "$set", Value: set}})
		}
		// Ordered, so a crash leaves a numbered prefix in _id order and the resume continues it.
		if err := bulkWrite(ctx, s.messages, models, true); err != nil {
			return fmt.Errorf("number %d messages of %s: %w", len(models), convID, err)
		}
		if err := s.AdvanceCounters(ctx, map[string]Counters{convID: {LastSeq: next}}); err != nil {
			return err
		}
		if progress != nil {
			progress(BackfillProgress{ConversationID: convID, Numbered: next})
		}
	}
	if err := s.AdvanceCounters(ctx, map[string]Counters{convID: {LastSeq: next}}); err != nil {
		return err
	}
	if progress != nil {
		progress(BackfillProgress{ConversationID: convID, Numbered: next, Done: true})
	}
	return nil
}
