package storage

import (
	"context"
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

// Block stores that blocker blocks blocked, and names blocked in blocker's blockLists document
// first (see userIndex). Blocking again changes nothing (the first createdAt stays).
func (s *Store) Block(ctx context.Context, blocker, blocked string, at time.Time) (err error) {
	defer s.metrics.observe(opBlock, time.Now(), &err)
	if _, err := s.blockLists.add(ctx, map[string][]string{blocker: {blocked}}); err != nil {
		return fmt.Errorf("list %s as blocked by %s: %w", blocked, blocker, err)
	}
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

// Unblock removes blocker's block of blocked, then its name from blocker's blockLists document;
// removing one that does not exist changes nothing.
func (s *Store) Unblock(ctx context.Context, blocker, blocked string) (err error) {
	defer s.metrics.observe(opUnblock, time.Now(), &err)
	if _, err := s.blocks.DeleteOne(ctx, bson.D{{Key: "_id", Value: blockID(blocker, blocked)}}); err != nil {
		return fmt.Errorf("unblock %s for %s: %w", blocked, blocker, err)
	}
	if _, err := s.blockLists.remove(ctx, map[string][]string{blocker: {blocked}}); err != nil {
		return fmt.Errorf("unlist %s as blocked by %s: %w", blocked, blocker, err)
	}
	return nil
}

// BlocksOf returns the users blocker blocks, sorted: those blocker's blockLists document names
// whose block exists, all read by _id (on the embedded store a filter on blocker read every
// block, and a connect lists them).
func (s *Store) BlocksOf(ctx context.Context, blocker string) (_ []string, err error) {
	defer s.metrics.observe(opBlocksOf, time.Now(), &err)
	named, err := s.blockLists.of(ctx, blocker)
	if err != nil {
		return nil, fmt.Errorf("read block list of %s: %w", blocker, err)
	}
	ids := make([]string, len(named))
	for i, b := range named {
		ids[i] = blockID(blocker, b)
	}
	found, err := findByIDs[Block](ctx, s.blocks, ids)
	if err != nil {
		return nil, fmt.Errorf("read blocks of %s: %w", blocker, err)
	}
	out := make([]string, 0, len(found))
	for _, b := range found {
		out = append(out, b.Blocked)
	}
	slices.Sort(out)
	return out, nil
}

// Blocked reports whether a block stands between a and b, in either direction: two exact _id
// lookups.
func (s *Store) Blocked(ctx context.Context, a, b string) (_ bool, err error) {
	defer s.metrics.observe(opBlocked, time.Now(), &err)
	with, err := s.blocksBetween(ctx, a, []string{b})
	if err != nil {
		return false, fmt.Errorf("look up blocks between %s and %s: %w", a, b, err)
	}
	return len(with) > 0, nil
}

// BlockedWith returns those of others with a block between them and userID, in either direction,
// in the order of others: two exact _id lookups per other, for a group created or extended.
func (s *Store) BlockedWith(ctx context.Context, userID string, others []string) (_ []string, err error) {
	defer s.metrics.observe(opBlockedWith, time.Now(), &err)
	with, err := s.blocksBetween(ctx, userID, others)
	if err != nil {
		return nil, fmt.Errorf("look up blocks between %s and %d users: %w", userID, len(others), err)
	}
	var out []string
	for _, o := range others {
		if o != userID && with[o] && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// blocksBetween returns those of others with a block between them and userID, in either
// direction, reading both possible blocks of each by _id.
func (s *Store) blocksBetween(ctx context.Context, userID string, others []string) (map[string]bool, error) {
	ids := make([]string, 0, 2*len(others))
	for _, o := range others {
		ids = append(ids, blockID(userID, o), blockID(o, userID))
	}
	found, err := findByIDs[Block](ctx, s.blocks, ids)
	if err != nil {
		return nil, err
	}
	with := make(map[string]bool, len(found))
	for _, b := range found {
		with[b.Blocker], with[b.Blocked] = true, true
	}
	return with, nil
}

// deleteBlocksOf removes every block userID made or is the target of, with their account: the
// blocks found by their fields (a scan on the embedded store, once per deleted account; the
// blockLists documents are an index, and this must find every block), then userID's block list
// and userID's name in the lists of those who blocked them.
func (s *Store) deleteBlocksOf(ctx context.Context, userID string) error {
	cur, err := s.blocks.Find(ctx, bson.D{{Key: "blocked", Value: userID}}, options.Find().SetProjection(bson.D{{Key: "blocker", Value: 1}}))
	if err != nil {
		return fmt.Errorf("find blocks of %s: %w", userID, err)
	}
	var by []Block
	if err := readAll(ctx, cur, &by); err != nil {
		return fmt.Errorf("read blocks of %s: %w", userID, err)
	}
	for _, field := range []string{"blocker", "blocked"} {
		if _, err := s.blocks.DeleteMany(ctx, bson.D{{Key: field, Value: userID}}); err != nil {
			return fmt.Errorf("delete blocks with %s %s: %w", field, userID, err)
		}
	}
	if err := s.blockLists.drop(ctx, userID); err != nil {
		return err
	}
	blockers := make(map[string][]string, len(by))
	for _, b := range by {
		blockers[b.Blocker] = []string{userID}
	}
	if _, err := s.blockLists.remove(ctx, blockers); err != nil {
		return fmt.Errorf("unlist %s from %d block lists: %w", userID, len(blockers), err)
	}
	return nil
}

// RebuildBlockLists names every block in its blocker's blockLists document, in one pass over
// the blocks: the migration of a store written before blockLists existed. It only adds, so it is
// safe to rerun and beside live traffic.
func (s *Store) RebuildBlockLists(ctx context.Context) (err error) {
	defer s.metrics.observe(opRebuildBlockLists, time.Now(), &err)
	return rebuildIndex(ctx, s.blockLists, s.blocks, bson.D{},
		bson.D{{Key: "blocker", Value: 1}, {Key: "blocked", Value: 1}},
		func(b Block) ([]string, string) { return []string{b.Blocker}, b.Blocked })
}
