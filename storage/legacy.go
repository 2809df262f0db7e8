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
)

// Layouts of the past, and the commands that bring a store from them to today's: Backfill gives
// seqs to messages stored before there were seqs, and Migrate moves messages stored one document
// each (the messages collection) into buckets. Both resume where an interrupted run stopped.

const migrationsCollection = "migrations"

// bucketsMigration is the _id of Migrate's progress document.
const bucketsMigration = "message-buckets"

// DefaultMigrateGroup is how many conversations one Migrate step moves: the embedded store reads
// the whole old collection for each step, so a step takes many conversations, and holds their
// messages in memory.
const DefaultMigrateGroup = 200

// MigrateProgress reports a Migrate step.
type MigrateProgress struct {
	// After is the last conversation moved, in _id order; Conversations and Messages count
	// what this run moved.
	After         string `json:"after"`
	Conversations int    `json:"conversations"`
	Messages      int64  `json:"messages"`
	Done          bool   `json:"done"`
}

// migrationDoc records how far Migrate got.
type migrationDoc struct {
	ID    string `bson:"_id"`
	After string `bson:"after"`
	Done  bool   `bson:"done"`
}

// Migrate moves the messages of the layout before buckets (one document per message, in the
// messages collection) into buckets, claims and the change log, group conversations at a time
// in _id order (0 means DefaultMigrateGroup), and raises each conversation's counters to what
// it moved. Every write is by _id and idempotent (a bucket or a change-log document is replaced
// whole, a claim that exists is kept), and the last conversation of each finished step is
// recorded, so an interrupted run resumes after it and a finished one moves nothing. Then it
// builds the user-keyed lists a connect reads (memberships, block lists, presence nodes). The old
// collection is left as it was: drop it once `chatctl audit` passes. progress may be nil.
func (s *Store) Migrate(ctx context.Context, group int, progress func(MigrateProgress)) (err error) {
	defer s.metrics.observe(opMigrate, time.Now(), &err)
	if group <= 0 {
		group = DefaultMigrateGroup
	}
	migrations := s.conversations.Database().Collection(migrationsCollection)
	state, err := findByID[migrationDoc](ctx, migrations, bucketsMigration)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	report := MigrateProgress{After: state.After, Done: state.Done}
	for !state.Done {
		ids, err := s.conversationIDsAfter(ctx, state.After, group)
		if err != nil {
			return err
		}
		n, err := s.migrateConversations(ctx, ids)
		if err != nil {
			return err
		}
		report.Messages += n
		report.Conversations += len(ids)
		if len(ids) > 0 {
			state.After = ids[len(ids)-1]
		}
		state.Done = len(ids) < group
		if _, err := migrations.ReplaceOne(ctx, byID(bucketsMigration),
			migrationDoc{ID: bucketsMigration, After: state.After, Done: state.Done}, options.Replace().SetUpsert(true)); err != nil {
			return fmt.Errorf("record migration after %q: %w", state.After, err)
		}
		report.After, report.Done = state.After, state.Done
		if progress != nil {
			progress(report)
		}
	}
	// The user-keyed lists a connect reads (userindex.go) are built from their truths; each
	// rebuild only adds, so running it again, or on a live store, is safe.
	for _, rebuild := range []func(context.Context) error{s.RebuildMemberships, s.RebuildBlockLists, s.RebuildPresenceNodes} {
		if err := rebuild(ctx); err != nil {
			return err
		}
	}
	return nil
}

// migrateConversations moves the old messages of the conversations ids and returns how many.
func (s *Store) migrateConversations(ctx context.Context, ids []string) (int64, error) {
	cur, err := s.legacyMessages.Find(ctx, bson.D{{Key: "conversationId", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return 0, fmt.Errorf("find old messages of %d conversations: %w", len(ids), err)
	}
	var old []bson.Raw
	if err := readAll(ctx, cur, &old); err != nil {
		return 0, fmt.Errorf("read old messages of %d conversations: %w", len(ids), err)
	}
	byConv := make(map[string][]Message)
	for _, raw := range old {
		var m Message
		if err := bson.Unmarshal(raw, &m); err != nil {
			return 0, fmt.Errorf("decode old message: %w", err)
		}
		if _, err := raw.LookupErr("seq"); err != nil {
			return 0, fmt.Errorf("conversation %s has messages without a seq: run chatctl backfill first", m.ConversationID)
		}
		byConv[m.ConversationID] = append(byConv[m.ConversationID], m)
	}
	for _, id := range ids {
		if err := s.migrateConversation(ctx, id, byConv[id]); err != nil {
			return 0, err
		}
	}
	return int64(len(old)), nil
}

// migrateConversation writes one conversation's old messages in today's layout.
func (s *Store) migrateConversation(ctx context.Context, id string, msgs []Message) error {
	conv, err := s.Conversation(ctx, id)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", id, err)
	}
	slices.SortStableFunc(msgs, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	buckets := make(map[string]*bucketDoc)
	logs := make(map[string]*changeDoc)
	var claims []any
	counters := Counters{LastSeq: conv.LastSeq, LastVersion: conv.LastVersion}
	for _, m := range msgs {
		b := buckets[bucketID(id, bucketNumber(m.Seq))]
		if b == nil {
			b = &bucketDoc{ID: bucketID(id, bucketNumber(m.Seq)), ConversationID: id}
			buckets[b.ID] = b
		}
		b.Messages = append(b.Messages, m)
		if m.ClientMsgID != "" {
			claims = append(claims, claimDoc{ID: clientClaimID(id, m.ClientMsgID), ConversationID: id, Seq: m.Seq})
		}
		if m.Version > 0 {
			l := logs[bucketID(id, bucketNumber(m.Version))]
			if l == nil {
				l = &changeDoc{ID: bucketID(id, bucketNumber(m.Version))}
				logs[l.ID] = l
			}
			l.Changes = append(l.Changes, changeEntry{Version: m.Version, Seq: m.Seq})
		}
		counters.LastSeq, counters.LastVersion = max(counters.LastSeq, m.Seq), max(counters.LastVersion, m.Version)
	}
	// A full bucket is sealed; the messages of the others (the newest) stay in their seq claims,
	// as InsertMessages writes them.
	for bid, b := range buckets {
		full := len(b.Messages) == BucketSize
		for _, m := range b.Messages {
			claim := claimDoc{ID: seqClaimID(id, m.Seq), ConversationID: id, Seq: m.Seq}
			if !full {
				claim.Message = &m
			}
			claims = append(claims, claim)
		}
		if !full {
			delete(buckets, bid)
		}
	}
	if len(claims) > 0 {
		if _, err := s.claims.InsertMany(ctx, claims, options.InsertMany().SetOrdered(false)); err != nil && !onlyDuplicates(err) {
			return fmt.Errorf("claim the messages of %s: %w", id, err)
		}
	}
	var bucketModels, logModels []mongo.WriteModel
	for _, b := range buckets {
		bucketModels = append(bucketModels, mongo.NewReplaceOneModel().SetFilter(byID(b.ID)).SetReplacement(b).SetUpsert(true))
	}
	for _, l := range logs {
		slices.SortFunc(l.Changes, func(a, b changeEntry) int { return cmp.Compare(a.Version, b.Version) })
		logModels = append(logModels, mongo.NewReplaceOneModel().SetFilter(byID(l.ID)).SetReplacement(l).SetUpsert(true))
	}
	if len(bucketModels) > 0 {
		if err := bulkWrite(ctx, s.buckets, bucketModels, false); err != nil {
			return fmt.Errorf("write the buckets of %s: %w", id, err)
		}
	}
	if len(logModels) > 0 {
		if err := bulkWrite(ctx, s.changes, logModels, false); err != nil {
			return fmt.Errorf("write the change log of %s: %w", id, err)
		}
	}
	return s.AdvanceCounters(ctx, map[string]Counters{id: counters})
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
	next, err := s.legacyHighestSeq(ctx, convID)
	if err != nil {
		return err
	}
	for {
		cur, err := s.legacyMessages.Find(ctx,
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
		if err := bulkWrite(ctx, s.legacyMessages, models, true); err != nil {
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

// legacyHighestSeq returns the largest seq in the old messages collection of a conversation, 0
// when it has none.
func (s *Store) legacyHighestSeq(ctx context.Context, conversationID string) (int64, error) {
	var m struct {
		Seq int64 `bson:"seq"`
	}
	err := decode(s.legacyMessages.FindOne(ctx,
		bson.D{{Key: "conversationId", Value: conversationID}, {Key: "seq", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}}).SetProjection(bson.D{{Key: "seq", Value: 1}}),
	), &m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find highest old seq of %s: %w", conversationID, err)
	}
	return m.Seq, nil
}
