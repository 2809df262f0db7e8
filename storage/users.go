package storage

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// User is an account. HideReceipts keeps the user's read position out of other members' receipts.
type User struct {
	ID           string    `bson:"_id"`
	Name         string    `bson:"name"`
	HideReceipts bool      `bson:"hideReceipts"`
	CreatedAt    time.Time `bson:"createdAt"`
}

// EnsureUser creates the user unless it exists and returns the stored one.
func (s *Store) EnsureUser(ctx context.Context, u User) (User, error) {
	var stored User
	err := s.users.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: u.ID}},
		bson.D{{Key: "$setOnInsert", Value: u}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
	).Decode(&stored)
	if err != nil {
		return User{}, fmt.Errorf("ensure user %s: %w", u.ID, err)
	}
	return stored, nil
}

// User returns one user, or ErrNotFound.
func (s *Store) User(ctx context.Context, id string) (User, error) {
	return findByID[User](ctx, s.users, id)
}

// MissingUsers returns those of ids that have no account.
func (s *Store) MissingUsers(ctx context.Context, ids []string) ([]string, error) {
	cur, err := s.users.Find(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find %d users: %w", len(ids), err)
	}
	var found []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return nil, fmt.Errorf("read %d users: %w", len(ids), err)
	}
	exists := make(map[string]bool, len(found))
	for _, f := range found {
		exists[f.ID] = true
	}
	var missing []string
	for _, id := range ids {
		if !exists[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// SetHideReceipts stores the user's receipt privacy and applies it to their existing cursors.
func (s *Store) SetHideReceipts(ctx context.Context, userID string, hide bool) error {
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
