package storage

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Presence is what the store knows of whether a user is online: the nodes that hold a connection
// of theirs (some may have died since: the caller knows which nodes live), when their last
// connection anywhere closed, and whether they hide all of it.
type Presence struct {
	Nodes    []string
	LastSeen *time.Time
	Hidden   bool
}

// presenceDoc says that Node holds at least one connection of UserID. There is one per (user,
// node), each written only by its node: a connect and a disconnect on two nodes at once touch
// two documents, so neither undoes the other (a shared list of nodes would be a read-modify-write,
// which FerretDB does not make atomic).
type presenceDoc struct {
	ID     string    `bson:"_id"`
	UserID string    `bson:"userId"`
	Node   string    `bson:"node"`
	Since  time.Time `bson:"since"`
}

func presenceID(userID, node string) string { return userID + "|" + node }

// lastSeenNode is the Node of the one record per user that is no connection: its Since is when the
// user's last connection anywhere closed. It lives here, not on the account, because it is written
// in the background, and FerretDB makes an update a read-modify-write of the whole document: a
// lastSeen written on the account could undo a rename or a privacy change made at the same moment.
const lastSeenNode = ""

// MarkOnline records that node holds a connection of userID (its first one there) and returns
// every node that does now. Repeating it changes nothing.
func (s *Store) MarkOnline(ctx context.Context, userID, node string, at time.Time) (_ []string, err error) {
	defer s.metrics.observe(opMarkOnline, time.Now(), &err)
	doc := presenceDoc{ID: presenceID(userID, node), UserID: userID, Node: node, Since: at}
	if _, err := s.presence.UpdateOne(ctx, bson.D{{Key: "_id", Value: doc.ID}},
		bson.D{{Key: "$setOnInsert", Value: doc}}, options.UpdateOne().SetUpsert(true)); err != nil {
		return nil, fmt.Errorf("mark %s online on %s: %w", userID, node, err)
	}
	return s.onlineNodes(ctx, userID)
}

// MarkOffline records that node no longer holds a connection of userID (its last one there
// closed) and returns the nodes that still do. Of two nodes whose last connections of a user
// close at once, at least one finds the other gone: each deletes its own record before it looks.
func (s *Store) MarkOffline(ctx context.Context, userID, node string) (_ []string, err error) {
	defer s.metrics.observe(opMarkOffline, time.Now(), &err)
	if _, err := s.presence.DeleteOne(ctx, bson.D{{Key: "_id", Value: presenceID(userID, node)}}); err != nil {
		return nil, fmt.Errorf("mark %s offline on %s: %w", userID, node, err)
	}
	return s.onlineNodes(ctx, userID)
}

func (s *Store) onlineNodes(ctx context.Context, userID string) ([]string, error) {
	docs, err := s.presenceDocs(ctx, bson.D{{Key: "userId", Value: userID}, {Key: "node", Value: bson.D{{Key: "$ne", Value: lastSeenNode}}}})
	if err != nil {
		return nil, err
	}
	nodes := make([]string, len(docs))
	for i, d := range docs {
		nodes[i] = d.Node
	}
	return nodes, nil
}

func (s *Store) presenceDocs(ctx context.Context, filter bson.D) ([]presenceDoc, error) {
	cur, err := s.presence.Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("find connected nodes: %w", err)
	}
	var docs []presenceDoc
	if err := readAll(ctx, cur, &docs); err != nil {
		return nil, fmt.Errorf("read connected nodes: %w", err)
	}
	return docs, nil
}

// SetLastSeen records when a user's last connection anywhere closed; it only moves forward.
func (s *Store) SetLastSeen(ctx context.Context, userID string, at time.Time) (err error) {
	defer s.metrics.observe(opSetLastSeen, time.Now(), &err)
	_, err = s.presence.UpdateOne(ctx, bson.D{{Key: "_id", Value: presenceID(userID, lastSeenNode)}},
		bson.D{
			{Key: "$max", Value: bson.D{{Key: "since", Value: at}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "userId", Value: userID}, {Key: "node", Value: lastSeenNode}}},
		}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("set last seen of %s: %w", userID, err)
	}
	return nil
}

// PresenceOf returns the presence of each user of userIDs whose account exists: two reads,
// whatever the number of users (the accounts, for hidePresence, and the presence records).
func (s *Store) PresenceOf(ctx context.Context, userIDs []string) (_ map[string]Presence, err error) {
	defer s.metrics.observe(opPresenceOf, time.Now(), &err)
	cur, err := s.users.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: userIDs}}}, notDeleted},
		options.Find().SetProjection(bson.D{{Key: "lastSeen", Value: 1}, {Key: "hidePresence", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find presence of %d users: %w", len(userIDs), err)
	}
	var users []User
	if err := readAll(ctx, cur, &users); err != nil {
		return nil, fmt.Errorf("read presence of %d users: %w", len(userIDs), err)
	}
	out := make(map[string]Presence, len(users))
	for _, u := range users {
		out[u.ID] = Presence{LastSeen: u.LastSeen, Hidden: u.HidePresence}
	}
	docs, err := s.presenceDocs(ctx, bson.D{{Key: "userId", Value: bson.D{{Key: "$in", Value: userIDs}}}})
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		p, ok := out[d.UserID]
		if !ok {
			continue // no account
		}
		switch {
		case d.Node == lastSeenNode:
			if p.LastSeen == nil || d.Since.After(*p.LastSeen) {
				p.LastSeen = &d.Since
			}
		default:
			p.Nodes = append(p.Nodes, d.Node)
		}
		out[d.UserID] = p
	}
	return out, nil
}

// ForgetNodePresence drops what a node recorded of its connections: a node starting under the id
// of one that died holds none of them.
func (s *Store) ForgetNodePresence(ctx context.Context, node string) (err error) {
	defer s.metrics.observe(opForgetNodePresence, time.Now(), &err)
	if _, err := s.presence.DeleteMany(ctx, bson.D{{Key: "node", Value: node}}); err != nil {
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
