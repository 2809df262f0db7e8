package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Block is one user blocking another. Its _id is blocker|blocked, so a pair has at most one block
// in each direction, and whether one exists is an exact _id lookup: cheap on every engine,
// FerretDB's included, which pushes down no other filter.
type Block struct {
	ID        string    `bson:"_id"`
	Blocker   string    `bson:"blocker"`
	Blocked   string    `bson:"blocked"`
	CreatedAt time.Time `bson:"createdAt"`
}

func blockID(blocker, blocked string) string { return blocker + "|" + blocked }

// Block stores that blocker blocks blocked. Blocking again changes nothing (the first createdAt
// stays).
func (s *Store) Block(ctx context.Context, blocker, blocked string, at time.Time) (err error) {
	defer s.metrics.observe(opBlock, time.Now(), &err)
	id := blockID(blocker, blocked)
	_, err = s.blocks.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$setOnInsert", Value: Block{ID: id, Blocker: blocker, Blocked: blocked, CreatedAt: at}}},
		options.UpdateOne().SetUpsert(true))
	// Two concurrent upserts of one _id may both insert on MongoDB; the loser's duplicate key
	// means the block is there.
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("block %s for %s: %w", blocked, blocker, err)
	}
	return nil
}

// Unblock removes blocker's block of blocked; removing one that does not exist changes nothing.
func (s *Store) Unblock(ctx context.Context, blocker, blocked string) (err error) {
	defer s.metrics.observe(opUnblock, time.Now(), &err)
	if _, err := s.blocks.DeleteOne(ctx, bson.D{{Key: "_id", Value: blockID(blocker, blocked)}}); err != nil {
		return fmt.Errorf("unblock %s for %s: %w", blocked, blocker, err)
	}
	return nil
}

// BlocksOf returns the users blocker blocks, sorted.
func (s *Store) BlocksOf(ctx context.Context, blocker string) (_ []string, err error) {
	defer s.metrics.observe(opBlocksOf, time.Now(), &err)
	cur, err := s.blocks.Find(ctx, bson.D{{Key: "blocker", Value: blocker}},
		options.Find().SetProjection(bson.D{{Key: "blocked", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find blocks of %s: %w", blocker, err)
	}
	var docs []Block
	if err := readAll(ctx, cur, &docs); err != nil {
		return nil, fmt.Errorf("read blocks of %s: %w", blocker, err)
	}
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.Blocked
	}
	slices.Sort(out)
	return out, nil
}

// Blocked reports whether a block stands between a and b, in either direction: two exact _id
// lookups.
func (s *Store) Blocked(ctx context.Context, a, b string) (_ bool, err error) {
	defer s.metrics.observe(opBlocked, time.Now(), &err)
	for _, id := range []string{blockID(a, b), blockID(b, a)} {
		_, err := findByID[Block](ctx, s.blocks, id)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("look up blocks between %s and %s: %w", a, b, err)
		}
	}
	return false, nil
}

// BlockedWith returns those of others with a block between them and userID, in either direction,
// in the order of others: one query on _id, for a group created or extended.
func (s *Store) BlockedWith(ctx context.Context, userID string, others []string) (_ []string, err error) {
	defer s.metrics.observe(opBlockedWith, time.Now(), &err)
	if len(others) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, 2*len(others))
	for _, o := range others {
		ids = append(ids, blockID(userID, o), blockID(o, userID))
	}
	cur, err := s.blocks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, fmt.Errorf("find blocks between %s and %d users: %w", userID, len(others), err)
	}
	var docs []Block
	if err := readAll(ctx, cur, &docs); err != nil {
		return nil, fmt.Errorf("read blocks between %s and %d users: %w", userID, len(others), err)
	}
	with := make(map[string]bool, len(docs))
	for _, d := range docs {
		with[d.Blocker], with[d.Blocked] = true, true
	}
	var out []string
	for _, o := range others {
		if o != userID && with[o] && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// deleteBlocksOf removes every block userID made or is the target of, with their account.
func (s *Store) deleteBlocksOf(ctx context.Context, userID string) error {
	for _, field := range []string{"blocker", "blocked"} {
		if _, err := s.blocks.DeleteMany(ctx, bson.D{{Key: field, Value: userID}}); err != nil {
			return fmt.Errorf("delete blocks with %s %s: %w", field, userID, err)
		}
	}
	return nil
}
