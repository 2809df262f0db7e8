package storage

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrDeleted is returned for an account that was deleted: its document stays as a tombstone (no
// name, no data), so a token of the deleted account never creates an empty account again.
var ErrDeleted = errors.New("account deleted")

// User is an account. HideReceipts keeps the user's read position out of other members' receipts,
// HidePresence their online state and last seen time out of everyone's sight.
type User struct {
	ID   string `bson:"_id"`
	Name string `bson:"name"`
	// NameKeys are what FindUsers matches a query's start against: the lower-case name and each
	// of its ends that starts a word ("mary jane", "jane"). The store sets them with the name.
	NameKeys     []string  `bson:"nameKeys,omitempty"`
	HideReceipts bool      `bson:"hideReceipts"`
	HidePresence bool      `bson:"hidePresence,omitempty"`
	CreatedAt    time.Time `bson:"createdAt"`
	// LastSeen is when the user's last connection anywhere closed, as accounts stored it before
	// it moved to the presence collection (SetLastSeen); PresenceOf still reads it.
	LastSeen *time.Time `bson:"lastSeen,omitempty"`
	// TokensValidAfter, if set, refuses the user's tokens issued before it (a revocation).
	TokensValidAfter *time.Time `bson:"tokensValidAfter,omitempty"`
	// DeletedAt marks a tombstone: the account was deleted then.
	DeletedAt *time.Time `bson:"deletedAt,omitempty"`
}

// notDeleted filters out tombstones.
var notDeleted = bson.E{Key: "deletedAt", Value: bson.D{{Key: "$exists", Value: false}}}

// EnsureUser creates the user unless it exists and returns the stored one; ErrDeleted for a
// tombstone. Concurrent calls for one new user all succeed: the unique _id lets one insert win,
// and the others read what it stored.
func (s *Store) EnsureUser(ctx context.Context, u User) (_ User, err error) {
	defer s.metrics.observe(opEnsureUser, time.Now(), &err)
	u.DeletedAt, u.TokensValidAfter = nil, nil // never set by the one who creates it
	u.NameKeys = nameKeys(u.Name)
	var stored User
	err = decode(s.users.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: u.ID}},
		bson.D{{Key: "$setOnInsert", Value: u}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
	), &stored)
	if mongo.IsDuplicateKeyError(err) {
		// Two upserts of a new _id race: both miss, both insert, one gets E11000. The winner's
		// document is there now.
		stored, err = findByID[User](ctx, s.users, u.ID)
	}
	if err != nil {
		return User{}, fmt.Errorf("ensure user %s: %w", u.ID, err)
	}
	if stored.DeletedAt != nil {
		return stored, ErrDeleted
	}
	return stored, nil
}

// ReviveUser makes a new account of a deleted one's id (dev-mode sign-in with the same name).
// The old account's tokens stay refused: the new account's tokens are valid only after the
// deletion. It returns ErrNotFound unless the id is a tombstone.
func (s *Store) ReviveUser(ctx context.Context, u User) (_ User, err error) {
	defer s.metrics.observe(opReviveUser, time.Now(), &err)
	old, err := findByID[User](ctx, s.users, u.ID)
	if err != nil {
		return User{}, fmt.Errorf("revive user %s: %w", u.ID, err)
	}
	if old.DeletedAt == nil {
		return User{}, fmt.Errorf("revive user %s: %w", u.ID, ErrNotFound)
	}
	u.DeletedAt, u.TokensValidAfter = nil, old.DeletedAt
	u.NameKeys = nameKeys(u.Name)
	if old.TokensValidAfter != nil && old.TokensValidAfter.After(*old.DeletedAt) {
		u.TokensValidAfter = old.TokensValidAfter
	}
	res, err := s.users.ReplaceOne(ctx, bson.D{{Key: "_id", Value: u.ID}, {Key: "deletedAt", Value: bson.D{{Key: "$exists", Value: true}}}}, u)
	if err != nil {
		return User{}, fmt.Errorf("revive user %s: %w", u.ID, err)
	}
	if res.MatchedCount == 0 { // revived by a concurrent sign-in
		return s.EnsureUser(ctx, u)
	}
	return u, nil
}

// markUserDeleted turns the account into a tombstone: name and settings gone, deletedAt set. Tokens
// issued up to the end of this second are refused from now on, as after a revocation.
func (s *Store) markUserDeleted(ctx context.Context, userID string) error {
	at := ValidAfter(time.Now())
	_, err := s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "deletedAt", Value: at}, {Key: "tokensValidAfter", Value: at},
				{Key: "name", Value: ""}, {Key: "nameKeys", Value: bson.A{}}, {Key: "hideReceipts", Value: false}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "createdAt", Value: at}}},
		}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("mark user %s deleted: %w", userID, err)
	}
	return nil
}

// ValidAfter is the "tokens valid after" time of a revocation at t. Tokens carry iat in whole
// seconds, so a token issued in the same second as t, before it, has iat = t truncated: only the
// next second refuses every token issued up to t (and those of the rest of that second).
func ValidAfter(t time.Time) time.Time {
	return t.UTC().Truncate(time.Second).Add(time.Second)
}

// RevokeTokens refuses every token of the user issued before ValidAfter(at) and returns that
// time. A user not seen yet gets an account (a production user's tokens may be revoked before
// their first connection); a tombstone stays one.
func (s *Store) RevokeTokens(ctx context.Context, userID string, at time.Time) (_ time.Time, err error) {
	defer s.metrics.observe(opRevokeTokens, time.Now(), &err)
	after := ValidAfter(at)
	_, err = s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "tokensValidAfter", Value: after}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "name", Value: userID}, {Key: "nameKeys", Value: nameKeys(userID)}, {Key: "hideReceipts", Value: false},
				{Key: "createdAt", Value: at.UTC()}}},
		}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // a concurrent first connection created it: update that
		_, err = s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "tokensValidAfter", Value: after}}}})
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("revoke tokens of %s: %w", userID, err)
	}
	return after, nil
}

// User returns one user, or ErrNotFound (also for a deleted account).
func (s *Store) User(ctx context.Context, id string) (_ User, err error) {
	defer s.metrics.observe(opUser, time.Now(), &err)
	u, err := findByID[User](ctx, s.users, id)
	if err == nil && u.DeletedAt != nil {
		return User{}, ErrNotFound
	}
	return u, err
}

// MissingUsers returns those of ids that have no account (deleted accounts included), each
// account read by _id.
func (s *Store) MissingUsers(ctx context.Context, ids []string) (_ []string, err error) {
	defer s.metrics.observe(opMissingUsers, time.Now(), &err)
	found, err := findByIDs[User](ctx, s.users, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d users: %w", len(ids), err)
	}
	var missing []string
	for _, id := range ids {
		if u, ok := found[id]; !ok || u.DeletedAt != nil {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// SetHideReceipts stores the user's receipt privacy and applies it to their existing cursors.
func (s *Store) SetHideReceipts(ctx context.Context, userID string, hide bool) (err error) {
	defer s.metrics.observe(opSetHideReceipts, time.Now(), &err)
	if _, err := s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "hideReceipts", Value: hide}}}}); err != nil {
		return fmt.Errorf("set hideReceipts of %s: %w", userID, err)
	}
	if _, err := s.cursors.UpdateMany(ctx, bson.D{{Key: "userId", Value: userID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "hidden", Value: hide}}}}); err != nil {
		return fmt.Errorf("set hidden on cursors of %s: %w", userID, err)
	}
	return nil
}

// nameKeys are the keys FindUsers matches against (see User.NameKeys).
func nameKeys(name string) []string {
	words := strings.Fields(strings.ToLower(name))
	keys := make([]string, 0, len(words))
	for i := range words {
		keys = append(keys, strings.Join(words[i:], " "))
	}
	return keys
}

// SetName stores a user's display name (checked by the caller); ErrNotFound for no account or a
// deleted one.
func (s *Store) SetName(ctx context.Context, userID, name string) (err error) {
	defer s.metrics.observe(opSetName, time.Now(), &err)
	res, err := s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}, notDeleted},
		bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: name}, {Key: "nameKeys", Value: nameKeys(name)}}}})
	if err != nil {
		return fmt.Errorf("set name of %s: %w", userID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("set name of %s: %w", userID, ErrNotFound)
	}
	return nil
}

// Profiles returns the accounts of ids that exist or existed (a deleted one as its tombstone:
// DeletedAt set, no name), in the order of ids, each read by _id, with only their ids, names and
// deletion times.
func (s *Store) Profiles(ctx context.Context, ids []string) (_ []User, err error) {
	defer s.metrics.observe(opProfiles, time.Now(), &err)
	found, err := findByIDs[User](ctx, s.users, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d users: %w", len(ids), err)
	}
	users := make([]User, 0, len(found))
	for _, id := range ids {
		if u, ok := found[id]; ok {
			users = append(users, User{ID: u.ID, Name: u.Name, DeletedAt: u.DeletedAt})
			delete(found, id) // a repeated id once
		}
	}
	return users, nil
}

// FindUsers returns up to limit accounts, not deleted and other than except, whose name or a word
// of it starts with prefix (any case), sorted by name. On MongoDB it is a range scan of the
// nameKeys index.
func (s *Store) FindUsers(ctx context.Context, prefix, except string, limit int64) (_ []User, err error) {
	defer s.metrics.observe(opFindUsers, time.Now(), &err)
	lower := strings.ToLower(strings.Join(strings.Fields(prefix), " "))
	filter := bson.D{
		{Key: "nameKeys", Value: bson.D{{Key: "$regex", Value: "^" + regexp.QuoteMeta(lower)}}},
		{Key: "_id", Value: bson.D{{Key: "$ne", Value: except}}},
		notDeleted,
	}
	cur, err := s.users.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(limit).
		SetProjection(bson.D{{Key: "name", Value: 1}, {Key: "deletedAt", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find users: %w", err)
	}
	users := []User{}
	if err := readAll(ctx, cur, &users); err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	return users, nil
}
