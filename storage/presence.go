package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Presence is what the store knows of whether a user is online: the nodes that hold a connection
// of theirs (some may have died since: the caller knows which nodes live), when their last
// connection anywhere closed, and whether they hide all of it. It lives on the user's document,
// so a connect or a disconnect is one round trip on the user's _id.
type Presence struct {
	Nodes    []string
	LastSeen *time.Time
	Hidden   bool
}

func presenceOf(u User) Presence {
	return Presence{Nodes: u.OnlineNodes, LastSeen: u.LastSeen, Hidden: u.HidePresence}
}

// MarkOnline records that node holds a connection of userID (its first one there) and returns
// the user's presence after it. Repeating it changes nothing. ErrNotFound for no such account.
func (s *Store) MarkOnline(ctx context.Context, userID, node string) (_ Presence, err error) {
	defer s.metrics.observe(opMarkOnline, time.Now(), &err)
	return s.changeOnlineNodes(ctx, userID, bson.D{{Key: "$addToSet", Value: bson.D{{Key: "onlineNodes", Value: node}}}})
}

// MarkOffline records that node no longer holds a connection of userID (its last one there
// closed) and returns the user's presence after it.
func (s *Store) MarkOffline(ctx context.Context, userID, node string) (_ Presence, err error) {
	defer s.metrics.observe(opMarkOffline, time.Now(), &err)
	return s.changeOnlineNodes(ctx, userID, bson.D{{Key: "$pull", Value: bson.D{{Key: "onlineNodes", Value: node}}}})
}

func (s *Store) changeOnlineNodes(ctx context.Context, userID string, update bson.D) (Presence, error) {
	var u User
	err := s.users.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: userID}}, update,
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&u)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Presence{}, ErrNotFound
	}
	if err != nil {
		return Presence{}, fmt.Errorf("change the online nodes of %s: %w", userID, err)
	}
	return presenceOf(u), nil
}

// SetLastSeen records when a user's last connection anywhere closed; it only moves forward.
func (s *Store) SetLastSeen(ctx context.Context, userID string, at time.Time) (err error) {
	defer s.metrics.observe(opSetLastSeen, time.Now(), &err)
	_, err = s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "lastSeen", Value: at}}}})
	if err != nil {
		return fmt.Errorf("set last seen of %s: %w", userID, err)
	}
	return nil
}

// PresenceOf returns the presence of each user of userIDs whose account exists: one read.
func (s *Store) PresenceOf(ctx context.Context, userIDs []string) (_ map[string]Presence, err error) {
	defer s.metrics.observe(opPresenceOf, time.Now(), &err)
	cur, err := s.users.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: userIDs}}}, notDeleted},
		options.Find().SetProjection(bson.D{{Key: "lastSeen", Value: 1}, {Key: "hidePresence", Value: 1}, {Key: "onlineNodes", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find presence of %d users: %w", len(userIDs), err)
	}
	var users []User
	if err := cur.All(ctx, &users); err != nil {
		return nil, fmt.Errorf("read presence of %d users: %w", len(userIDs), err)
	}
	out := make(map[string]Presence, len(users))
	for _, u := range users {
		out[u.ID] = presenceOf(u)
	}
	return out, nil
}

// ForgetNodePresence drops a node from every user's online nodes: a node starting under the id
// of one that died holds none of their connections.
func (s *Store) ForgetNodePresence(ctx context.Context, node string) (err error) {
	defer s.metrics.observe(opForgetNodePresence, time.Now(), &err)
	if _, err := s.users.UpdateMany(ctx, bson.D{{Key: "onlineNodes", Value: node}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "onlineNodes", Value: node}}}}); err != nil {
		return fmt.Errorf("forget presence on %s: %w", node, err)
	}
	return nil
}

// SetHidePresence stores whether a user hides their online state and last seen time.
func (s *Store) SetHidePresence(ctx context.Context, userID string, hide bool) (err error) {
	defer s.metrics.observe(opSetHidePresence, time.Now(), &err)
	if _, err := s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "hidePresence", Value: hide}}}}); err != nil {
		return fmt.Errorf("store presence privacy of %s: %w", userID, err)
	}
	return nil
}
