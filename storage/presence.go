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

// RecordPresence records a node's changes of its users' presence: each user of online has a
// first connection there now, each of offline has lost their last one there. It returns, for
// every one of them who is anywhere, the nodes that hold a connection of theirs after it. It
// costs three round trips whatever the number of users (the records written, those deleted, one
// read of all of theirs), so a node records a reconnect storm in a few batches: two round trips a
// user took minutes for 5,000 users on the embedded store, where each read scans the records.
// Every record is written or deleted before the read, so of two nodes whose last connections of
// a user close at once, at least one finds the other gone. Repeating it changes nothing.
func (s *Store) RecordPresence(ctx context.Context, node string, online, offline []string, at time.Time) (_ map[string][]string, err error) {
	defer s.metrics.observe(opRecordPresence, time.Now(), &err)
	if len(online) > 0 {
		models := make([]mongo.WriteModel, len(online))
		for i, uid := range online {
			doc := presenceDoc{ID: presenceID(uid, node), UserID: uid, Node: node, Since: at}
			models[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: doc.ID}}).
				SetUpdate(bson.D{{Key: "$setOnInsert", Value: doc}}).SetUpsert(true)
		}
		if _, err := s.presence.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
			return nil, fmt.Errorf("mark %d users online on %s: %w", len(online), node, err)
		}
	}
	if len(offline) > 0 {
		ids := make([]string, len(offline))
		for i, uid := range offline {
			ids[i] = presenceID(uid, node)
		}
		if _, err := s.presence.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
			return nil, fmt.Errorf("mark %d users offline on %s: %w", len(offline), node, err)
		}
	}
	users := append(slices.Clone(online), offline...)
	if len(users) == 0 {
		return map[string][]string{}, nil
	}
	docs, err := s.presenceDocs(ctx, bson.D{{Key: "userId", Value: bson.D{{Key: "$in", Value: users}}},
		{Key: "node", Value: bson.D{{Key: "$ne", Value: lastSeenNode}}}})
	if err != nil {
		return nil, err
	}
	nodes := make(map[string][]string, len(users))
	for _, d := range docs {
		nodes[d.UserID] = append(nodes[d.UserID], d.Node)
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

// SetLastSeen records, for each of userIDs, that their last connection anywhere closed at at; it
// only moves forward. One round trip whatever the number of users.
func (s *Store) SetLastSeen(ctx context.Context, userIDs []string, at time.Time) (err error) {
	defer s.metrics.observe(opSetLastSeen, time.Now(), &err)
	models := make([]mongo.WriteModel, len(userIDs))
	for i, uid := range userIDs {
		models[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: presenceID(uid, lastSeenNode)}}).
			SetUpdate(bson.D{
				{Key: "$max", Value: bson.D{{Key: "since", Value: at}}},
				{Key: "$setOnInsert", Value: bson.D{{Key: "userId", Value: uid}, {Key: "node", Value: lastSeenNode}}},
			}).SetUpsert(true)
	}
	if len(models) == 0 {
		return nil
	}
	if _, err := s.presence.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("set last seen of %d users: %w", len(userIDs), err)
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
