package storage

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// userIndex is a collection of documents keyed by a user id (_id), each listing in one array
// field the ids of things whose truth lives in other documents: the conversations a user is in
// (memberships; the truth is each conversation's members), whom they block (blockLists; the
// truth is each block's own document), the nodes that hold a connection of theirs
// (presenceNodes; the truth is each node's presence record). It exists for the embedded store,
// which answers only an exact {_id: value} from an index: listing a user's conversations by
// filtering every conversation on members read the whole collection there for each connect. On
// MongoDB one _id read is as cheap as the multikey index it replaces.
//
// Writers put an id in before they write its truth and take it out after they remove the truth,
// so a failure between the two leaves an id the truth no longer backs, never a truth the index
// does not name. Readers check every id against its truth, by _id: an id left behind costs one
// read and is never answered.
type userIndex struct {
	coll  *mongo.Collection
	field string
	// afterWrite, if set, runs between each write and its verification: tests lose an update there.
	afterWrite func()
}

// indexWriteAttempts bounds the writes of one change to an index: the first and its repairs. A
// repair is needed only when another write of the same user's document raced this one on the
// embedded store; more than a few in a row means something keeps rewriting it, and the caller
// should hear of it.
const indexWriteAttempts = 5

func newUserIndex(db *mongo.Database, name, field string) *userIndex {
	return &userIndex{coll: db.Collection(name), field: field}
}

// of returns the ids in user's document: none when it has none.
func (x *userIndex) of(ctx context.Context, user string) ([]string, error) {
	docs, err := x.ofEach(ctx, []string{user})
	if err != nil {
		return nil, err
	}
	return docs[user], nil
}

// ofEach returns the ids in each of users' documents, for those who have one.
func (x *userIndex) ofEach(ctx context.Context, users []string) (map[string][]string, error) {
	docs, err := findByIDs[bson.Raw](ctx, x.coll, users)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(docs))
	for user, doc := range docs {
		var ids []string
		if v := doc.Lookup(x.field); !v.IsZero() {
			if err := v.Unmarshal(&ids); err != nil {
				return nil, fmt.Errorf("decode %s of %s in %s: %w", x.field, user, x.coll.Name(), err)
			}
		}
		out[user] = ids
	}
	return out, nil
}

// add puts each user's ids in their document, creating it if need be, and returns every touched
// document's ids as last read.
func (x *userIndex) add(ctx context.Context, ids map[string][]string) (map[string][]string, error) {
	return x.change(ctx, ids, true)
}

// remove takes each user's ids out of their document, and returns every touched document's ids
// as last read.
func (x *userIndex) remove(ctx context.Context, ids map[string][]string) (map[string][]string, error) {
	return x.change(ctx, ids, false)
}

// change writes want (present: put in, otherwise taken out), then reads the touched documents
// back by _id and writes again what is not as wanted, up to indexWriteAttempts writes in all.
// FerretDB v1 makes every update a read-modify-write of the whole document, not atomic: of two
// updates of one user's document at once (two groups made with the same member, two nodes
// recording the user's presence) the later write can drop what the earlier added or bring back
// what it removed. Reading back after the write finds that in all but the rare race whose read
// and write straddle this whole write and read; readers check the truth, so what such a race
// leaves is at worst a missing id until the next change of it or RebuildMemberships. On MongoDB
// updates are atomic and the read back only confirms.
func (x *userIndex) change(ctx context.Context, want map[string][]string, present bool) (map[string][]string, error) {
	users := slices.Collect(maps.Keys(want))
	pending := want
	for range indexWriteAttempts {
		if err := x.write(ctx, pending, present); err != nil {
			return nil, err
		}
		if x.afterWrite != nil {
			x.afterWrite()
		}
		stored, err := x.ofEach(ctx, users)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", x.coll.Name(), err)
		}
		if pending = unsettled(want, stored, present); len(pending) == 0 {
			return stored, nil
		}
	}
	return nil, fmt.Errorf("%s of %d users still not as written after %d writes", x.coll.Name(), len(pending), indexWriteAttempts)
}

// unsettled returns, by user, the ids of want that stored does not hold (present) or still holds.
func unsettled(want, stored map[string][]string, present bool) map[string][]string {
	out := make(map[string][]string)
	for user, ids := range want {
		for _, id := range ids {
			if slices.Contains(stored[user], id) != present {
				out[user] = append(out[user], id)
			}
		}
	}
	return out
}

// write sends one update per user: $addToSet with upsert, or $pullAll.
func (x *userIndex) write(ctx context.Context, ids map[string][]string, present bool) error {
	models := make([]mongo.WriteModel, 0, len(ids))
	for user, list := range ids {
		if len(list) == 0 {
			continue
		}
		model := mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: user}})
		if present {
			model.SetUpdate(bson.D{{Key: "$addToSet", Value: bson.D{{Key: x.field, Value: bson.D{{Key: "$each", Value: list}}}}}}).
				SetUpsert(true)
		} else {
			model.SetUpdate(bson.D{{Key: "$pullAll", Value: bson.D{{Key: x.field, Value: list}}}})
		}
		models = append(models, model)
	}
	// Two upserts of a new _id at once may both insert on MongoDB; the loser's duplicate key is
	// repaired by the read back like any lost update.
	if err := bulkWrite(ctx, x.coll, models, false); err != nil && !onlyDuplicates(err) {
		return fmt.Errorf("write %s of %d users: %w", x.coll.Name(), len(models), err)
	}
	return nil
}

// drop deletes user's document.
func (x *userIndex) drop(ctx context.Context, user string) error {
	if _, err := x.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: user}}); err != nil {
		return fmt.Errorf("delete %s of %s: %w", x.coll.Name(), user, err)
	}
	return nil
}

// rebuildBatch is how many source documents a rebuild reads before it writes what they say: one
// verified bulk per batch keeps memory bounded on any size of store.
const rebuildBatch = 1000

// rebuildIndex adds to x what every document of src matching filter says, in one pass over src:
// entries gives, for one document, the users whose documents get id. It only adds, so it is
// idempotent, safe to rerun, and safe beside live writes (an id it adds that the truth no longer
// backs is one that readers skip).
func rebuildIndex[T any](ctx context.Context, x *userIndex, src *mongo.Collection, filter, projection bson.D,
	entries func(T) (users []string, id string)) error {
	cur, err := src.Find(ctx, filter, options.Find().SetProjection(projection))
	if err != nil {
		return fmt.Errorf("rebuild %s: find %s: %w", x.coll.Name(), src.Name(), err)
	}
	defer func() { _ = cur.Close(context.Background()) }() // read to its end below; this frees it on an error
	batch := make(map[string][]string)
	flush := func() error {
		if _, err := x.add(ctx, batch); err != nil {
			return fmt.Errorf("rebuild %s: %w", x.coll.Name(), err)
		}
		clear(batch)
		return nil
	}
	for n := 1; cur.Next(ctx); n++ {
		var doc T
		if err := bson.Unmarshal(cur.Current, &doc); err != nil {
			return fmt.Errorf("rebuild %s: decode %s: %w", x.coll.Name(), src.Name(), err)
		}
		users, id := entries(doc)
		for _, u := range users {
			batch[u] = append(batch[u], id)
		}
		if n%rebuildBatch == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("rebuild %s: read %s: %w", x.coll.Name(), src.Name(), err)
	}
	return flush()
}
