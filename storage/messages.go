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
	// RemovedBy is the admin who deleted this message of another member (a tombstone).
	RemovedBy string `bson:"removedBy,omitempty"`
	// Mentions are the members the body mentions (message.Mentions), found by the owner.
	Mentions []string `bson:"mentions,omitempty"`
	// Attachments are the message's files (uploads.go), stored with it by the owner, in the
	// same write as its seq.
	Attachments []Attachment `bson:"attachments,omitempty"`
}

// Preview is what a conversation list shows of m.
func (m Message) Preview() MessagePreview {
	p := MessagePreview{Seq: m.Seq, SenderID: m.SenderID, Kind: m.Kind, Body: protocol.QuoteText(m.Body), CreatedAt: m.CreatedAt}
	if len(m.Attachments) > 0 {
		p.Attachment = &AttachmentRef{Name: m.Attachments[0].Name, Image: m.Attachments[0].Width > 0}
	}
	return p
}

// Quote is the start of a replied-to message, copied into the reply.
type Quote struct {
	SenderID string `bson:"senderId"`
	Body     string `bson:"body,omitempty"`
	Deleted  bool   `bson:"deleted,omitempty"`
	// Attachment names the replied-to message's first file.
	Attachment *AttachmentRef `bson:"attachment,omitempty"`
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

// InsertMessages stores msgs in order with ordered inserts of their claims (insertOrdered): for
// each message the claim of its client message id, then the claim of its seq, which holds the
// message (buckets.go). That insert is the message's one write. When a claim already exists it
// returns a *DuplicateError: the messages before its Index were stored, the rest were not;
// MessageByClientID then tells a retried send (its client claim existed) from a seq another
// writer took. A bucket is written when it is full: here when msgs fill it, else by SealBuckets.
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
	i, err := insertOrdered(ctx, s.claims, claims)
	if err == nil {
		return s.sealWhole(ctx, msgs)
	}
	if i < 0 {
		return fmt.Errorf("claim %d messages: %w", len(msgs), err)
	}
	if i%2 == 1 {
		// The seq is taken but the client claim just made is not: release it, so the send can be
		// stored later under another seq.
		m := msgs[i/2]
		if _, err := s.claims.DeleteOne(ctx, byID(clientClaimID(m.ConversationID, m.ClientMsgID))); err != nil {
			return fmt.Errorf("release claim of %s in %s: %w", m.ClientMsgID, m.ConversationID, err)
		}
	}
	if err := s.sealWhole(ctx, msgs[:i/2]); err != nil {
		return err
	}
	return &DuplicateError{Index: i / 2, Err: err}
}

// maxClaimsPerInsert bounds the documents of one ordered insert. FerretDB v1.24, the embedded
// store, inserts a command's documents 100 at a time and, after a duplicate, goes on with the
// next hundred (msg_insert.go leaves only its inner loop): a longer insert would store claims
// after its first duplicate, which the owner gives other seqs. It is even, so a message's two
// claims are never split. On MongoDB the bound costs one round trip per 50 messages.
const maxClaimsPerInsert = 100

// insertOrdered inserts docs in order, in commands of at most maxClaimsPerInsert, and stops at the
// first duplicate key: it returns the duplicate's index in docs with the error, or -1 with any
// other error.
func insertOrdered(ctx context.Context, coll *mongo.Collection, docs []any) (int, error) {
	for start := 0; start < len(docs); start += maxClaimsPerInsert {
		end := min(start+maxClaimsPerInsert, len(docs))
		if _, err := coll.InsertMany(ctx, docs[start:end], options.InsertMany().SetOrdered(true)); err != nil {
			if i, ok := duplicateIndex(err); ok {
				return start + i, err
			}
			return -1, err
		}
	}
	return 0, nil
}

// SealBucket seals the bucket msgs fill (all BucketSize messages of it, as stored now) with one
// insert and no read: the conversation's owner keeps the messages of its open bucket. A bucket
// sealed already is left as it is.
func (s *Store) SealBucket(ctx context.Context, msgs []Message) (err error) {
	defer s.metrics.observe(opSealBuckets, time.Now(), &err)
	return s.sealWhole(ctx, msgs)
}

// sealWhole seals the buckets whose every message is in msgs, from msgs, with one insert: a
// large batch (a bulk load, a migration, a busy conversation's flush) fills whole buckets, and
// needs no read to seal them. Sealed buckets are left as they are.
func (s *Store) sealWhole(ctx context.Context, msgs []Message) error {
	var whole []any
	for id, inBucket := range groupBy(msgs, func(m Message) string { return bucketID(m.ConversationID, bucketNumber(m.Seq)) }) {
		if len(inBucket) != BucketSize {
			continue
		}
		sorted := slices.SortedFunc(slices.Values(inBucket), func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
		whole = append(whole, bucketDoc{ID: id, ConversationID: sorted[0].ConversationID, Messages: sorted})
	}
	if len(whole) == 0 {
		return nil
	}
	if _, err := s.buckets.InsertMany(ctx, whole, options.InsertMany().SetOrdered(false)); err != nil && !onlyDuplicates(err) {
		return fmt.Errorf("seal %d full buckets: %w", len(whole), err)
	}
	return nil
}

// SealBuckets writes each bucket of a conversation whose last seq is in from..to, from the
// claims of its seqs, with one insert: from then on its messages are read, and changed, there.
// A bucket sealed already is left as it is, and one not wholly claimed is not sealed. Only the
// conversation's owner calls it, between its batches, so no change of those messages is made
// while it reads them.
func (s *Store) SealBuckets(ctx context.Context, conversationID string, from, to int64) (err error) {
	defer s.metrics.observe(opSealBuckets, time.Now(), &err)
	var full []int64 // the buckets whose last seq is in from..to
	for n := bucketNumber(max(from, 1)); (n+1)*BucketSize <= to; n++ {
		full = append(full, n)
	}
	ids := make([]string, len(full))
	for i, n := range full {
		ids[i] = bucketID(conversationID, n)
	}
	sealed, err := findByIDs[bucketDoc](ctx, s.buckets, ids)
	if err != nil {
		return fmt.Errorf("find sealed buckets of %s: %w", conversationID, err)
	}
	for i, n := range full {
		if _, ok := sealed[ids[i]]; ok {
			continue
		}
		msgs, err := s.claimedMessages(ctx, conversationID, n*BucketSize+1, (n+1)*BucketSize)
		if err != nil {
			return err
		}
		if err := s.sealWhole(ctx, msgs); err != nil {
			return err
		}
	}
	return nil
}

// MessageByClientID finds the message a client sent with clientMsgID, or ErrNotFound. A client
// claim whose seq holds another message (its writer lost the seq, or failed between its two
// claims) is released here, so that the client's next retry stores the message.
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
	if _, err := s.claims.DeleteOne(ctx, byID(claim.ID)); err != nil {
		return Message{}, fmt.Errorf("release claim of %s in %s: %w", clientMsgID, conversationID, err)
	}
	return Message{}, ErrNotFound
}

// MessageRange returns the messages with from <= seq <= to in seq order, whatever the depth:
// the sealed buckets of the range, each read by _id, and the claims of its seqs in buckets not
// sealed yet (the conversation's newest, fewer than BucketSize), by _id too.
func (s *Store) MessageRange(ctx context.Context, conversationID string, from, to int64) (_ []Message, err error) {
	defer s.metrics.observe(opMessageRange, time.Now(), &err)
	msgs, err := s.bucketMessages(ctx, conversationID, from, to)
	// A seq is stored once; should a bucket hold a copy (a store edited by hand), the first stands.
	return slices.CompactFunc(msgs, func(a, b Message) bool { return a.Seq == b.Seq }), err
}

// bucketMessages returns every stored message with from <= seq <= to in seq order, copies of a
// seq in a bucket included.
func (s *Store) bucketMessages(ctx context.Context, conversationID string, from, to int64) ([]Message, error) {
	from = max(from, 1)
	if to < from {
		return nil, nil
	}
	ids := bucketIDs(conversationID, from, to)
	buckets, err := findByIDs[bucketDoc](ctx, s.buckets, ids)
	if err != nil {
		return nil, fmt.Errorf("read messages %d..%d of %s: %w", from, to, conversationID, err)
	}
	var out []Message
	for i, id := range ids {
		b, sealed := buckets[id]
		if !sealed {
			// The newest bucket, or one whose seal failed: its messages are in their claims. Fewer
			// than asked means the newest seq is passed, and nothing after it is stored.
			n := bucketNumber(from) + int64(i)
			first, last := max(from, n*BucketSize+1), min(to, (n+1)*BucketSize)
			claimed, err := s.claimedMessages(ctx, conversationID, first, last)
			if err != nil {
				return nil, err
			}
			out = append(out, claimed...)
			if int64(len(claimed)) < last-first+1 {
				break
			}
			continue
		}
		for _, m := range b.Messages {
			if m.Seq >= from && m.Seq <= to {
				out = append(out, m)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// claimedMessages returns the messages held by the claims of seqs from..to, read by _id
// maxConcurrentReads at a time until a read finds none of its seqs claimed: past the newest seq.
func (s *Store) claimedMessages(ctx context.Context, conversationID string, from, to int64) ([]Message, error) {
	var out []Message
	for start := from; start <= to; start += maxConcurrentReads {
		var ids []string
		for seq := start; seq <= min(to, start+maxConcurrentReads-1); seq++ {
			ids = append(ids, seqClaimID(conversationID, seq))
		}
		claims, err := findByIDs[claimDoc](ctx, s.claims, ids)
		if err != nil {
			return nil, fmt.Errorf("read claimed messages %d..%d of %s: %w", from, to, conversationID, err)
		}
		if len(claims) == 0 {
			break
		}
		for _, id := range ids {
			if c, ok := claims[id]; ok && c.Message != nil {
				out = append(out, *c.Message)
			}
		}
	}
	return out, nil
}

// RecoverSeq returns the highest seq of a conversation that any writer has claimed, 0 when it
// has none: what a new owner continues after. A claim holds its message, so whatever was
// claimed is stored. It seals the full buckets near the counters' lastSeq that a writer which
// failed after its claims left unsealed. Only the conversation's owner calls it.
func (s *Store) RecoverSeq(ctx context.Context, conversationID string) (_ int64, err error) {
	defer s.metrics.observe(opRecoverSeq, time.Now(), &err)
	counters, err := findByID[counterDoc](ctx, s.counters, conversationID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	high, err := s.highestClaimed(ctx, conversationID, counters.LastSeq)
	if err != nil {
		return 0, err
	}
	return high, s.SealBuckets(ctx, conversationID, counters.LastSeq-BucketSize+1, high)
}

// highestClaimed returns the highest claimed seq of a conversation, probing the claims after
// from (a seq known to be claimed, or 0) maxConcurrentReads at a time: the counters trail the
// claims by a batch or two at most.
func (s *Store) highestClaimed(ctx context.Context, conversationID string, from int64) (int64, error) {
	high := from
	for {
		ids := make([]string, maxConcurrentReads)
		for i := range ids {
			ids[i] = seqClaimID(conversationID, high+1+int64(i))
		}
		found, err := findByIDs[claimDoc](ctx, s.claims, ids)
		if err != nil {
			return 0, fmt.Errorf("find claimed seqs of %s: %w", conversationID, err)
		}
		for _, id := range ids {
			if _, ok := found[id]; !ok {
				return high, nil
			}
			high++
		}
	}
}

// UpdateMessages writes the new states of changed messages (edits, reactions, tombstones): it
// logs each change's version first (so a catch-up finds every stored change), then sets each
// message whose stored version is still the update's PrevVersion and that is not a tombstone. It
// returns ErrConflict when any of them did not match; the others may have been written. Only the
// conversation's owner changes its messages, one batch after another, so nothing else writes
// them between the read and the write.
func (s *Store) UpdateMessages(ctx context.Context, updates []MessageUpdate) (err error) {
	defer s.metrics.observe(opUpdateMessages, time.Now(), &err)
	if len(updates) == 0 {
		return nil
	}
	if err := s.logChanges(ctx, updates); err != nil {
		return err
	}
	states := make([]Message, 0, len(updates))
	conflicts := 0
	for conv, group := range groupBy(updates, func(u MessageUpdate) string { return u.Message.ConversationID }) {
		seqs := make([]int64, len(group))
		for i, u := range group {
			seqs[i] = u.Message.Seq
		}
		stored, err := s.messagesAt(ctx, conv, seqs)
		if err != nil {
			return err
		}
		for _, u := range group {
			m, ok := stored[u.Message.Seq]
			if !ok || m.Version != u.PrevVersion || m.Kind == protocol.KindDeleted {
				conflicts++
				continue
			}
			states = append(states, u.Message)
		}
	}
	if err := s.writeStates(ctx, states); err != nil {
		return fmt.Errorf("update %d messages: %w", len(updates), err)
	}
	if conflicts > 0 {
		return fmt.Errorf("update %d messages, %d did not match: %w", len(updates), conflicts, ErrConflict)
	}
	return nil
}

// writeStates writes each message's new state where it is stored: its element of a sealed
// bucket, or its seq's claim. Each bucket and each claim is one update by _id.
func (s *Store) writeStates(ctx context.Context, msgs []Message) error {
	var bucketModels, claimModels []mongo.WriteModel
	for conv, group := range groupBy(msgs, func(m Message) string { return m.ConversationID }) {
		for id, inBucket := range groupBy(group, func(m Message) string { return bucketID(conv, bucketNumber(m.Seq)) }) {
			b, err := findByID[bucketDoc](ctx, s.buckets, id)
			if errors.Is(err, ErrNotFound) {
				for _, m := range inBucket {
					claimModels = append(claimModels, mongo.NewUpdateOneModel().SetFilter(byID(seqClaimID(conv, m.Seq))).
						SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "message", Value: m}}}}))
				}
				continue
			}
			if err != nil {
				return err
			}
			set := bson.D{}
			for _, m := range inBucket {
				if i := slices.IndexFunc(b.Messages, func(stored Message) bool { return stored.Seq == m.Seq }); i >= 0 {
					set = append(set, bson.E{Key: fmt.Sprintf("messages.%d", i), Value: m})
				}
			}
			if len(set) > 0 {
				bucketModels = append(bucketModels, mongo.NewUpdateOneModel().SetFilter(byID(id)).SetUpdate(bson.D{{Key: "$set", Value: set}}))
			}
		}
	}
	for _, step := range []struct {
		coll   *mongo.Collection
		models []mongo.WriteModel
	}{{s.buckets, bucketModels}, {s.claims, claimModels}} {
		if len(step.models) > 0 {
			if err := bulkWrite(ctx, step.coll, step.models, false); err != nil {
				return fmt.Errorf("write %d messages into %s: %w", len(step.models), step.coll.Name(), err)
			}
		}
	}
	return nil
}

// groupBy groups items by key, each group in the order of items.
func groupBy[T any](items []T, key func(T) string) map[string][]T {
	out := make(map[string][]T)
	for _, it := range items {
		out[key(it)] = append(out[key(it)], it)
	}
	return out
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
		seqs := make([]int64, len(changes))
		for i, c := range changes {
			seqs[i] = c.Seq
		}
		current, err := s.messagesAt(ctx, conversationID, seqs)
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

// messagesAt reads the messages of a conversation with the given seqs, by seq: the buckets (or
// claims) that hold them.
func (s *Store) messagesAt(ctx context.Context, conversationID string, seqs []int64) (map[int64]Message, error) {
	out := make(map[int64]Message, len(seqs))
	for _, group := range groupBy(seqs, func(seq int64) string { return bucketID(conversationID, bucketNumber(seq)) }) {
		msgs, err := s.bucketMessages(ctx, conversationID, slices.Min(group), slices.Max(group))
		if err != nil {
			return nil, fmt.Errorf("read changed messages of %s: %w", conversationID, err)
		}
		for _, m := range msgs {
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
