package storage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/chatd/chatd/protocol"
)

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
	// Groups lost the user as a member.
	Groups []Conversation
}

// DeleteAccount removes a user: their DMs and the DMs' messages, their membership in groups
// (whose owners have made the user's messages tombstones first, TombstoneSender), their
// cursors, the blocks they made and those of them, their presence, their memberships (and each
// removed DM's in its peer's), their notification settings, their push subscriptions, settings
// and notices, their bot token, and the account itself. Every step is idempotent, so a failed
// deletion is finished by running it again.
func (s *Store) DeleteAccount(ctx context.Context, userID string) (_ DeletedAccount, err error) {
	defer s.metrics.observe(opDeleteAccount, time.Now(), &err)
	var out DeletedAccount
	convs, err := s.conversationsWithMember(ctx, userID)
	if err != nil {
		return out, err
	}
	// First, while the conversations still name the user: a run that fails later finds the same
	// conversations, and so the same notices, again.
	ids := make([]string, len(convs))
	for i, c := range convs {
		ids[i] = c.ID
	}
	if err := s.deletePushStateOf(ctx, userID, ids); err != nil {
		return out, err
	}
	if err := s.deleteBotOf(ctx, userID); err != nil {
		return out, err
	}
	for _, c := range convs {
		if c.Kind == KindDM {
			if err := s.deleteMessagesOf(ctx, c); err != nil {
				return out, err
			}
			if _, err := s.cursors.DeleteMany(ctx, bson.D{{Key: "conversationId", Value: c.ID}}); err != nil {
				return out, fmt.Errorf("delete cursors of dm %s: %w", c.ID, err)
			}
			if _, err := s.counters.DeleteOne(ctx, byID(c.ID)); err != nil {
				return out, fmt.Errorf("delete counters of dm %s: %w", c.ID, err)
			}
			if _, err := s.conversations.DeleteOne(ctx, byID(c.ID)); err != nil {
				return out, fmt.Errorf("delete dm %s: %w", c.ID, err)
			}
			peers := slices.DeleteFunc(slices.Clone(c.Members), func(m string) bool { return m == userID })
			if err := s.removeMemberships(ctx, c.ID, peers...); err != nil {
				return out, err
			}
			out.DMs = append(out.DMs, c)
			continue
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
			{Key: "$unset", Value: bson.D{{Key: "lastMessage.body", Value: ""}, {Key: "lastMessage.attachment", Value: ""}}},
		}); err != nil {
			return out, fmt.Errorf("delete previews of %s in %s: %w", userID, coll.Name(), err)
		}
	}
	if _, err := s.notifySettings().DeleteOne(ctx, byID(userID)); err != nil {
		return out, fmt.Errorf("delete notification settings of %s: %w", userID, err)
	}
	// The account stays as a tombstone, so its tokens never create an empty account again.
	if err := s.markUserDeleted(ctx, userID); err != nil {
		return out, err
	}
	return out, nil
}

// TombstoneSender makes every message userID sent in a conversation (up to lastSeq) a tombstone
// without a sender (its conversationId, seq, createdAt, clientMsgId and version stay, so the sequence stays
// gapless and a retried send still finds it), and returns the seqs that were live. Those are
// recorded as deleted first, as in a deletion: a run that fails after that finds the same live
// messages again and records nothing twice. It reads every message of the conversation by _id
// (its buckets and newest claims) and rewrites those of the user: only the conversation's owner
// calls it (sequencer.EraseSender), since the embedded store's updates rewrite whole documents.
func (s *Store) TombstoneSender(ctx context.Context, conversationID string, lastSeq int64, userID string) (_ []int64, err error) {
	defer s.metrics.observe(opTombstoneSender, time.Now(), &err)
	msgs, err := s.MessageRange(ctx, conversationID, 1, lastSeq)
	if err != nil {
		return nil, err
	}
	var live []int64
	var tombstones []Message
	for _, m := range msgs {
		if m.SenderID != userID {
			continue
		}
		if m.Kind != protocol.KindDeleted {
			live = append(live, m.Seq)
		}
		tombstones = append(tombstones, Message{ConversationID: m.ConversationID, Seq: m.Seq, Kind: protocol.KindDeleted,
			CreatedAt: m.CreatedAt, ClientMsgID: m.ClientMsgID, Version: m.Version})
	}
	if err := s.RecordDeleted(ctx, conversationID, live); err != nil {
		return nil, err
	}
	if err := s.writeStates(ctx, tombstones); err != nil {
		return nil, fmt.Errorf("tombstone messages of %s in %s: %w", userID, conversationID, err)
	}
	return live, nil
}

// deleteMessagesOf removes every message of conversation c with its claims and its change log,
// each document by _id.
func (s *Store) deleteMessagesOf(ctx context.Context, c Conversation) error {
	msgs, err := s.bucketMessages(ctx, c.ID, 1, c.LastSeq)
	if err != nil {
		return err
	}
	var claims, buckets, changes []mongo.WriteModel
	for _, m := range msgs {
		claims = append(claims, deleteByID(seqClaimID(c.ID, m.Seq)), deleteByID(clientClaimID(c.ID, m.ClientMsgID)))
	}
	for _, id := range bucketIDs(c.ID, 1, c.LastSeq) {
		buckets = append(buckets, deleteByID(id))
	}
	for _, id := range bucketIDs(c.ID, 1, c.LastVersion) {
		changes = append(changes, deleteByID(id))
	}
	// Buckets first: a run that fails after them finds the messages in the claims again.
	for _, step := range []struct {
		coll   *mongo.Collection
		models []mongo.WriteModel
	}{{s.buckets, buckets}, {s.claims, claims}, {s.changes, changes}} {
		if len(step.models) == 0 {
			continue
		}
		if err := bulkWrite(ctx, step.coll, step.models, false); err != nil {
			return fmt.Errorf("delete %s of %s: %w", step.coll.Name(), c.ID, err)
		}
	}
	return nil
}

func deleteByID(id string) mongo.WriteModel { return mongo.NewDeleteOneModel().SetFilter(byID(id)) }
