// Package storage is the only code that knows MongoDB's shape: the collections, their indexes and
// the queries on them. Every query on messages carries conversationId equality, so a cluster
// sharded on {conversationId: "hashed"} routes it to one shard.
package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Collection names.
const (
	bucketsCollection        = "messageBuckets"
	claimsCollection         = "messageClaims"
	changesCollection        = "messageChanges"
	legacyMessagesCollection = "messages"
	conversationsCollection  = "conversations"
	countersCollection       = "conversationCounters"
	cursorsCollection        = "readCursors"
	usersCollection          = "users"
	blocksCollection         = "blocks"
	presenceCollection       = "presence"
	// The user-keyed indexes (userIndex): each document's _id is a user id.
	membershipsCollection   = "memberships"
	blockListsCollection    = "blockLists"
	presenceNodesCollection = "presenceNodes"
)

// DefaultOperationTimeout bounds one store round trip when the caller's context has no earlier
// deadline: long enough for a replica-set election, short enough that a send fails fast.
const DefaultOperationTimeout = 10 * time.Second

// ErrNotFound is returned when the document asked for does not exist.
var ErrNotFound = errors.New("not found")

// DuplicateError reports that the write at Index in an ordered batch hit a unique index; the
// writes before Index were stored and the ones after it were not attempted.
type DuplicateError struct {
	Index int
	Err   error
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("duplicate key at batch index %d: %v", e.Index, e.Err)
}

func (e *DuplicateError) Unwrap() error { return e.Err }

// Config says how to reach the database.
type Config struct {
	// URI is a MongoDB connection string. Write concern and retryable writes can be set in it;
	// when it sets no write concern, majority is used.
	URI string
	// Database is the database name; default "chat".
	Database string
	// Monitor, if set, sees every command the driver sends (tests count and inspect them).
	Monitor *event.CommandMonitor
	// OperationTimeout bounds one round trip when the caller's context allows longer; 0 means
	// DefaultOperationTimeout.
	OperationTimeout time.Duration
	// SkipIndexes opens without building indexes: for a backfill of a legacy messages collection,
	// whose missing seqs would violate the unique indexes until Backfill has numbered them.
	SkipIndexes bool
	// Metrics records the duration and failures of every operation; nil records nothing.
	Metrics *Metrics
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.URI == "" {
		return errors.New("storage: URI is required")
	}
	if c.Database == "" {
		return errors.New("storage: database name is required")
	}
	return nil
}

// Store is the chat data in MongoDB.
type Store struct {
	client  *mongo.Client
	buckets *mongo.Collection
	claims  *mongo.Collection
	changes *mongo.Collection
	// legacyMessages is the layout before buckets, one document per message: read only by
	// Backfill and Migrate (legacy.go).
	legacyMessages *mongo.Collection
	conversations  *mongo.Collection
	counters       *mongo.Collection
	cursors        *mongo.Collection
	users          *mongo.Collection
	blocks         *mongo.Collection
	presence       *mongo.Collection
	// memberships lists each user's conversations (truth: the conversations' members),
	// blockLists whom each user blocks (truth: blocks), presenceNodes the nodes that hold each
	// user's connections (truth: presence), so that a connect reads them by the user's _id.
	memberships   *userIndex
	blockLists    *userIndex
	presenceNodes *userIndex
	// uploads and uploadSweeps keep attachments' records (uploads.go).
	uploads, uploadSweeps *mongo.Collection
	metrics               *Metrics
}

// Open connects, checks the connection and makes sure the indexes exist.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := options.Client().ApplyURI(cfg.URI).SetTimeout(cmp.Or(cfg.OperationTimeout, DefaultOperationTimeout))
	if opts.WriteConcern == nil {
		// Acked writes must survive a primary failover; majority is what makes an ack a promise.
		opts.SetWriteConcern(writeconcern.Majority())
	}
	if cfg.Monitor != nil {
		opts.SetMonitor(cfg.Monitor)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to mongodb: %w", err)
	}
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("ping mongodb: %w", err)
	}
	db := client.Database(cfg.Database)
	s := &Store{
		client:         client,
		buckets:        db.Collection(bucketsCollection),
		claims:         db.Collection(claimsCollection),
		changes:        db.Collection(changesCollection),
		legacyMessages: db.Collection(legacyMessagesCollection),
		conversations:  db.Collection(conversationsCollection),
		counters:       db.Collection(countersCollection),
		cursors:        db.Collection(cursorsCollection),
		users:          db.Collection(usersCollection),
		blocks:         db.Collection(blocksCollection),
		presence:       db.Collection(presenceCollection),
		memberships:    newUserIndex(db, membershipsCollection, "conversations"),
		blockLists:     newUserIndex(db, blockListsCollection, "blocked"),
		presenceNodes:  newUserIndex(db, presenceNodesCollection, "nodes"),
		uploads:        db.Collection(uploadsCollection),
		uploadSweeps:   db.Collection(uploadSweepsCollection),
		metrics:        cfg.Metrics,
	}
	if cfg.SkipIndexes {
		return s, nil
	}
	if err := s.ensureIndexes(ctx); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	return s, nil
}

// Close disconnects from the database.
func (s *Store) Close(ctx context.Context) error {
	if err := s.client.Disconnect(ctx); err != nil {
		return fmt.Errorf("disconnect from mongodb: %w", err)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer s.metrics.observe(opPing, time.Now(), &err)
	if err := s.client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping mongodb: %w", err)
	}
	return nil
}

func (s *Store) ensureIndexes(ctx context.Context) error {
	indexes := []struct {
		coll   *mongo.Collection
		name   string
		keys   bson.D
		unique bool
	}{
		// Messages, claims and the change log are read by _id only (buckets.go); these serve the
		// removal of a deleted DM's documents.
		{s.buckets, "conversation", bson.D{{Key: "conversationId", Value: 1}}, false},
		{s.claims, "conversation", bson.D{{Key: "conversationId", Value: 1}}, false},
		// An account deletion finds the conversations it leaves by their members, the truth,
		// rather than by the user's memberships document, which a rare lost update may have
		// left short (userIndex.change). Connects read memberships by _id.
		{s.conversations, "members", bson.D{{Key: "members", Value: 1}}, false},
		// A receipt privacy change and an account deletion reach all of a user's cursors.
		{s.cursors, "user_conversation", bson.D{{Key: "userId", Value: 1}, {Key: "conversationId", Value: 1}}, true},
		// Receipts count the cursors of one conversation at or past a seq.
		{s.cursors, "conversation_read_seq", bson.D{{Key: "conversationId", Value: 1}, {Key: "readSeq", Value: 1}}, false},
		// An account deletion's cleanup of blocks on either side (lists read blockLists by _id).
		{s.blocks, "blocker", bson.D{{Key: "blocker", Value: 1}}, false},
		{s.blocks, "blocked", bson.D{{Key: "blocked", Value: 1}}, false},
		// An account deletion's cleanup of a user's records, and a restarted node's leftovers
		// (who is online reads presenceNodes, then each record, by _id).
		{s.presence, "user", bson.D{{Key: "userId", Value: 1}}, false},
		{s.presence, "node", bson.D{{Key: "node", Value: 1}}, false},
		// Find a person: a prefix of a name or of a word in it (FindUsers).
		{s.users, "name_keys", bson.D{{Key: "nameKeys", Value: 1}}, false},
	}
	for _, ix := range indexes {
		model := mongo.IndexModel{Keys: ix.keys, Options: options.Index().SetName(ix.name).SetUnique(ix.unique)}
		if _, err := ix.coll.Indexes().CreateOne(ctx, model); err != nil {
			return fmt.Errorf("create index %s on %s: %w", ix.name, ix.coll.Name(), err)
		}
	}
	return s.uploadIndexes(ctx)
}

// findByID decodes the document with _id id, or returns ErrNotFound.
func findByID[T any](ctx context.Context, coll *mongo.Collection, id string) (T, error) {
	var doc T
	err := decode(coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}), &doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc, ErrNotFound
	}
	if err != nil {
		return doc, fmt.Errorf("find %s %s: %w", coll.Name(), id, err)
	}
	return doc, nil
}

// maxConcurrentReads bounds the reads by _id one operation has in flight at once: enough to
// overlap the round trips of a connect's few dozen reads, few enough that a reconnect storm of
// loads (each already holding one of the chat service's sync read slots) does not open hundreds
// of connections to the store.
const maxConcurrentReads = 16

// findByIDs reads the documents with the given ids, one exact {_id: value} find each, at most
// maxConcurrentReads at once, and returns those that exist by id (a repeated id is read once).
// An exact _id is the one filter FerretDB v1, the embedded store, answers from its primary key:
// {_id: {$in: ids}} scans the whole collection there, which made a connect with 5,000 users
// stored take seconds. On MongoDB each is an _id index lookup, and the round trips overlap.
func findByIDs[T any](ctx context.Context, coll *mongo.Collection, ids []string) (map[string]T, error) {
	out := make(map[string]T, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, maxConcurrentReads)
	started := make(map[string]bool, len(ids))
	for _, id := range ids {
		if started[id] {
			continue
		}
		started[id] = true
		select {
		case slots <- struct{}{}:
		case <-ctx.Done(): // a read failed, or the caller gave up: start no more
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			doc, err := findByID[T](ctx, coll, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out[id] = doc
			case errors.Is(err, ErrNotFound):
			case firstErr == nil:
				firstErr = err
				cancel()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read %d documents of %s: %w", len(ids), coll.Name(), err)
	}
	return out, nil
}

// maxWritesPerCommand bounds the statements in one update command. FerretDB v1.24, the embedded
// store, keeps each statement's read iterator open until the whole command ends (msg_update.go
// defers every close inside its loop), so a command of about 100 statements exhausts its SQLite
// connection pool and never answers (measured here: 99 answer in 0.2 s, 100 hang). On MongoDB the
// bound costs one round trip per 64 writes.
const maxWritesPerCommand = 64

// bulkWrite runs models in commands of at most maxWritesPerCommand statements, in order.
func bulkWrite(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel, ordered bool) error {
	for start := 0; start < len(models); start += maxWritesPerCommand {
		end := min(start+maxWritesPerCommand, len(models))
		if _, err := coll.BulkWrite(ctx, models[start:end], options.BulkWrite().SetOrdered(ordered)); err != nil {
			return err
		}
	}
	return nil
}

// bulkWriteMatched is bulkWrite, unordered, returning how many documents the models matched.
func bulkWriteMatched(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) (int64, error) {
	var matched int64
	for start := 0; start < len(models); start += maxWritesPerCommand {
		end := min(start+maxWritesPerCommand, len(models))
		res, err := coll.BulkWrite(ctx, models[start:end], options.BulkWrite().SetOrdered(false))
		if err != nil {
			return matched, err
		}
		matched += res.MatchedCount
	}
	return matched, nil
}

// onlyDuplicates reports whether every write error in err is a duplicate key.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// duplicateIndex returns the batch index of the first duplicate-key write error in err.
func duplicateIndex(err error) (int, bool) {
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		for _, we := range bwe.WriteErrors {
			if we.Code == 11000 {
				return we.Index, true
			}
		}
		return 0, false
	}
	if mongo.IsDuplicateKeyError(err) {
		return 0, true
	}
	return 0, false
}
