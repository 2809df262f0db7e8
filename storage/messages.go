package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// InsertMessages stores msgs in order: first their claims (for each message its client message
// id, then its seq) with one ordered insertMany, then the messages into their buckets with one
// bulk of appends. When a claim already exists it returns a *DuplicateError: the messages before
// its Index were stored, the rest were not; MessageByClientID then tells a retried send (its
// client claim existed) from a seq another writer took. Messages of one bucket should come
// together (the sequencer sorts its batch by conversation), so that they are one append.
func (s *Store) InsertMessages(ctx context.Context, msgs []Message) (err error) {
	defer s.metrics.observe(opInsertMessages, time.Now(), &err)
	if len(msgs) == 0 {
		return nil
	}
	claims := make([]any, 0, 2*len(msgs))
	for _, m := range msgs {
		claims = append(claims,
			claimDoc{ID: clientClaimID(m.ConversationID, m.ClientMsgID), ConversationID: m.ConversationID, Seq: m.Seq},
			claimDoc{ID: seqClaimID(m.ConversationID, m.Seq), ConversationID: m.ConversationID, Seq: m.Seq, Message: &m})
	}
	stored := len(msgs)
	var dup error
	if _, err := s.claims.InsertMany(ctx, claims, options.InsertMany().SetOrdered(true)); err != nil {
		i, ok := duplicateIndex(err)
		if !ok {
			return fmt.Errorf("claim %d messages: %w", len(msgs), err)
		}
		stored, dup = i/2, err
		if i%2 == 1 {
			// The seq is taken but the client claim just made is not: release it, so the send can
			// be stored later under another seq.
			m := msgs[stored]
			if _, err := s.claims.DeleteOne(ctx, byID(clientClaimID(m.ConversationID, m.ClientMsgID))); err != nil {
				return fmt.Errorf("release claim of %s in %s: %w", m.ClientMsgID, m.ConversationID, err)
			}
		}
	}
	if err := s.appendToBuckets(ctx, msgs[:stored]); err != nil {
		return err
	}
	if dup != nil {
		return &DuplicateError{Index: stored, Err: dup}
	}
	return nil
}

// appendToBuckets appends msgs to their buckets, one append per run of messages of one bucket.
// Only the writer that claimed a seq appends it, so an append needs no guard of its own.
func (s *Store) appendToBuckets(ctx context.Context, msgs []Message) error {
	var models []mongo.WriteModel
	for start := 0; start < len(msgs); {
		id := bucketID(msgs[start].ConversationID, bucketNumber(msgs[start].Seq))
		end := start + 1
		for end < len(msgs) && bucketID(msgs[end].ConversationID, bucketNumber(msgs[end].Seq)) == id {
			end++
		}
		models = append(models, mongo.NewUpdateOneModel().SetFilter(byID(id)).SetUpsert(true).SetUpdate(bson.D{
			{Key: "$push", Value: bson.D{{Key: "messages", Value: bson.D{{Key: "$each", Value: msgs[start:end]}}}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "conversationId", Value: msgs[start].ConversationID}}},
		}))
		start = end
	}
	if len(models) == 0 {
		return nil
	}
	if err := bulkWrite(ctx, s.buckets, models, true); err != nil {
		return fmt.Errorf("append %d messages: %w", len(msgs), err)
	}
	return nil
}

// MessageByClientID finds the message a client sent with clientMsgID, or ErrNotFound. A claim
// whose message was never stored (its writer failed between the claim and the append, or lost
// the seq) is released here, so that the client's next retry stores the message.
func (s *Store) MessageByClientID(ctx context.Context, conversationID, clientMsgID string) (_ Message, err error) {
	defer s.metrics.observe(opMessageByClientID, time.Now(), &err)
	claim, err := findByID[claimDoc](ctx, s.claims, clientClaimID(conversationID, clientMsgID))
	if err != nil {
		return Message{}, err
	}
	msgs, err := s.MessageRange(ctx, conversationID, claim.Seq, claim.Seq)
	if err != nil {
		return Message{}, err
	}
	if len(msgs) == 1 && msgs[0].ClientMsgID == clientMsgID {
		return msgs[0], nil
	}
	// Not in its bucket: its writer may have failed after the claims; the seq's claim holds the
	// message, which RecoverSeq appends.
	if len(msgs) == 0 {
		taken, err := findByID[claimDoc](ctx, s.claims, seqClaimID(conversationID, claim.Seq))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Message{}, err
		}
		if taken.Message != nil && taken.Message.ClientMsgID == clientMsgID {
			return *taken.Message, nil
		}
	}
	if _, err := s.claims.DeleteOne(ctx, byID(claim.ID)); err != nil {
		return Message{}, fmt.Errorf("release claim of %s in %s: %w", clientMsgID, conversationID, err)
	}
	return Message{}, ErrNotFound
}

// MessageRange returns the messages with from <= seq <= to in seq order: the buckets holding
// them, each read by _id, whatever the depth.
func (s *Store) MessageRange(ctx context.Context, conversationID string, from, to int64) (_ []Message, err error) {
	defer s.metrics.observe(opMessageRange, time.Now(), &err)
	msgs, err := s.bucketMessages(ctx, conversationID, from, to)
	// A seq is stored once; should a failed writer's late append meet the tombstone that filled
	// its hole, the first one written stands.
	return slices.CompactFunc(msgs, func(a, b Message) bool { return a.Seq == b.Seq }), err
}

// bucketMessages returns every stored message with from <= seq <= to in seq order, copies of a
// seq included, in the order they were written.
func (s *Store) bucketMessages(ctx context.Context, conversationID string, from, to int64) ([]Message, error) {
	from = max(from, 1)
	if to < from {
		return nil, nil
	}
	buckets, err := findByIDs[bucketDoc](ctx, s.buckets, bucketIDs(conversationID, from, to))
	if err != nil {
		return nil, fmt.Errorf("read messages %d..%d of %s: %w", from, to, conversationID, err)
	}
	var out []Message
	for _, b := range buckets {
		for _, m := range b.Messages {
			if m.Seq >= from && m.Seq <= to {
				out = append(out, m)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// RecoverSeq returns the highest seq of a conversation that any writer has claimed, 0 when it
// has none: what a new owner continues after. A message whose seq is claimed but that is not in
// its bucket (its writer failed between the claim and the append) is appended here from its
// claim, which holds it: it is stored, and a retry of its send finds it under that seq. Only the
// conversation's owner calls it.
func (s *Store) RecoverSeq(ctx context.Context, conversationID string) (_ int64, err error) {
	defer s.metrics.observe(opRecoverSeq, time.Now(), &err)
	counters, err := findByID[counterDoc](ctx, s.counters, conversationID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	high, claims, err := s.claimsAfter(ctx, conversationID, counters.LastSeq)
	if err != nil {
		return 0, err
	}
	return high, s.restoreClaimed(ctx, conversationID, counters.LastSeq, claims)
}

// highestClaimed returns the highest claimed seq of a conversation at or after from (a seq known
// to be claimed, or 0).
func (s *Store) highestClaimed(ctx context.Context, conversationID string, from int64) (int64, error) {
	high, _, err := s.claimsAfter(ctx, conversationID, from)
	return high, err
}

// claimsAfter reads the seq claims of a conversation after from (a seq known to be claimed, or
// 0), maxConcurrentReads at a time, up to the first seq not claimed: the counters trail the
// claims by a batch or two at most. It returns the highest claimed seq and those claims.
func (s *Store) claimsAfter(ctx context.Context, conversationID string, from int64) (int64, []claimDoc, error) {
	high := from
	var claims []claimDoc
	for {
		ids := make([]string, maxConcurrentReads)
		for i := range ids {
			ids[i] = seqClaimID(conversationID, high+1+int64(i))
		}
		found, err := findByIDs[claimDoc](ctx, s.claims, ids)
		if err != nil {
			return 0, nil, fmt.Errorf("find claimed seqs of %s: %w", conversationID, err)
		}
		for _, id := range ids {
			c, ok := found[id]
			if !ok {
				return high, claims, nil
			}
			claims = append(claims, c)
			high++
		}
	}
}

// restoreClaimed appends every claimed message after seq from that is not in its bucket, from
// its claim. A claim without its message (none is written so; a store edited by hand) leaves a
// tombstone, recorded as deleted, so the sequence stays gapless.
func (s *Store) restoreClaimed(ctx context.Context, conversationID string, from int64, claims []claimDoc) error {
	if len(claims) == 0 {
		return nil
	}
	stored, err := s.MessageRange(ctx, conversationID, from+1, claims[len(claims)-1].Seq)
	if err != nil {
		return err
	}
	present := make(map[int64]bool, len(stored))
	for _, m := range stored {
		present[m.Seq] = true
	}
	var missing []Message
	var tombstones []int64
	for _, c := range claims {
		switch {
		case present[c.Seq]:
		case c.Message != nil:
			missing = append(missing, *c.Message)
		default:
			missing = append(missing, Message{ConversationID: conversationID, Seq: c.Seq, Kind: protocol.KindDeleted, CreatedAt: time.Now().UTC()})
			tombstones = append(tombstones, c.Seq)
		}
	}
	if len(tombstones) > 0 {
		if err := s.RecordDeleted(ctx, conversationID, tombstones); err != nil {
			return err
		}
	}
	return s.appendToBuckets(ctx, missing)
}

// UpdateMessages writes the new states of changed messages (edits, reactions, tombstones): it
// logs each change's version first (so a catch-up finds every stored change), then per bucket
// reads it by _id and sets the messages whose stored version is still the update's PrevVersion
// and that are not tombstones. It returns ErrConflict when any of them did not match; the others
// may have been written. Only the conversation's owner changes its messages, one batch after
// another, so the read and the write of a bucket meet no other writer.
func (s *Store) UpdateMessages(ctx context.Context, updates []MessageUpdate) (err error) {
	defer s.metrics.observe(opUpdateMessages, time.Now(), &err)
	if len(updates) == 0 {
		return nil
	}
	if err := s.logChanges(ctx, updates); err != nil {
		return err
	}
	byBucket := make(map[string][]Message)
	var order []string
	for _, u := range updates {
		id := bucketID(u.Message.ConversationID, bucketNumber(u.Message.Seq))
		if _, ok := byBucket[id]; !ok {
			order = append(order, id)
		}
		byBucket[id] = append(byBucket[id], u.Message)
	}
	prev := make(map[string]int64, len(updates))
	for _, u := range updates {
		prev[seqClaimID(u.Message.ConversationID, u.Message.Seq)] = u.PrevVersion
	}
	buckets, err := findByIDs[bucketDoc](ctx, s.buckets, order)
	if err != nil {
		return fmt.Errorf("read buckets of %d changed messages: %w", len(updates), err)
	}
	conflicts := 0
	var models []mongo.WriteModel
	for _, id := range order {
		set := bson.D{}
		for _, m := range byBucket[id] {
			i := slices.IndexFunc(buckets[id].Messages, func(stored Message) bool { return stored.Seq == m.Seq })
			if i < 0 || buckets[id].Messages[i].Version != prev[seqClaimID(m.ConversationID, m.Seq)] ||
				buckets[id].Messages[i].Kind == protocol.KindDeleted {
				conflicts++
				continue
			}
			set = append(set, bson.E{Key: fmt.Sprintf("messages.%d", i), Value: m})
		}
		if len(set) > 0 {
			models = append(models, mongo.NewUpdateOneModel().SetFilter(byID(id)).SetUpdate(bson.D{{Key: "$set", Value: set}}))
		}
	}
	if len(models) > 0 {
		if err := bulkWrite(ctx, s.buckets, models, false); err != nil {
			return fmt.Errorf("update %d messages: %w", len(updates), err)
		}
	}
	if conflicts > 0 {
		return fmt.Errorf("update %d messages, %d did not match: %w", len(updates), conflicts, ErrConflict)
	}
	return nil
}

// logChanges appends each update's version and seq to its conversation's change log.
func (s *Store) logChanges(ctx context.Context, updates []MessageUpdate) error {
	var models []mongo.WriteModel
	for _, u := range updates {
		m := u.Message
		if m.Version == 0 {
			continue
		}
		models = append(models, mongo.NewUpdateOneModel().SetFilter(byID(bucketID(m.ConversationID, bucketNumber(m.Version)))).
			SetUpsert(true).
			SetUpdate(bson.D{{Key: "$push", Value: bson.D{{Key: "changes", Value: changeEntry{Version: m.Version, Seq: m.Seq}}}}}))
	}
	if len(models) == 0 {
		return nil
	}
	if err := bulkWrite(ctx, s.changes, models, true); err != nil {
		return fmt.Errorf("log %d changes: %w", len(models), err)
	}
	return nil
}

// ChangedMessages returns up to limit messages of a conversation changed after version
// afterVersion, with seq at most maxSeq, in version order: what a reconnecting client that holds
// the messages up to maxSeq has missed. It walks the change log from afterVersion by _id, one
// bucket of changes at a time, and keeps a message at the change that made its current state.
func (s *Store) ChangedMessages(ctx context.Context, conversationID string, afterVersion, maxSeq int64, limit int) (_ []Message, err error) {
	defer s.metrics.observe(opChangedMessages, time.Now(), &err)
	counters, err := findByID[counterDoc](ctx, s.counters, conversationID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	var out []Message
	for n := bucketNumber(afterVersion + 1); len(out) < limit; n++ {
		log, err := findByID[changeDoc](ctx, s.changes, bucketID(conversationID, n))
		if errors.Is(err, ErrNotFound) && n <= bucketNumber(counters.LastVersion) {
			continue // versions of changes whose write failed: none of them stored
		}
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		changes := slices.DeleteFunc(log.Changes, func(c changeEntry) bool { return c.Version <= afterVersion || c.Seq > maxSeq })
		slices.SortFunc(changes, func(a, b changeEntry) int { return cmp.Compare(a.Version, b.Version) })
		current, err := s.messagesAt(ctx, conversationID, changes)
		if err != nil {
			return nil, err
		}
		for _, c := range changes {
			if m, ok := current[c.Seq]; ok && m.Version == c.Version && len(out) < limit {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// messagesAt reads the messages the changes are of, by seq.
func (s *Store) messagesAt(ctx context.Context, conversationID string, changes []changeEntry) (map[int64]Message, error) {
	var ids []string
	seen := make(map[string]bool)
	for _, c := range changes {
		if id := bucketID(conversationID, bucketNumber(c.Seq)); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	buckets, err := findByIDs[bucketDoc](ctx, s.buckets, ids)
	if err != nil {
		return nil, fmt.Errorf("read changed messages of %s: %w", conversationID, err)
	}
	out := make(map[int64]Message)
	for _, b := range buckets {
		for _, m := range b.Messages {
			if _, ok := out[m.Seq]; !ok {
				out[m.Seq] = m
			}
		}
	}
	return out, nil
}

// ExplainMessagePage asks the server how it reads the first bucket of a page of messages, with
// execution statistics, so operators and tests can check that a page is an _id lookup.
func (s *Store) ExplainMessagePage(ctx context.Context, conversationID string, from int64) (_ bson.Raw, err error) {
	defer s.metrics.observe(opExplainMessagePage, time.Now(), &err)
	return explainFind(ctx, s.buckets, byID(bucketID(conversationID, bucketNumber(from))))
}

// explainFind explains a find of filter on coll with execution statistics.
func explainFind(ctx context.Context, coll *mongo.Collection, filter bson.D) (bson.Raw, error) {
	cmd := bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: filter}}},
		{Key: "verbosity", Value: "executionStats"},
	}
	res, err := coll.Database().RunCommand(ctx, cmd).Raw()
	if err != nil {
		return nil, fmt.Errorf("explain find on %s: %w", coll.Name(), err)
	}
	return res, nil
}
