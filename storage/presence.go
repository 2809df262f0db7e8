package storage

import (
	"context"
	"fmt"
	"maps"
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
// every one of them who is anywhere, the nodes that hold a connection of theirs after it. Each
// user's presenceNodes document names the nodes that may hold them, and each node's record of
// them says it does: a node is named before its record is written and unnamed after its record is
// deleted, and the answer reads the named nodes' records, all by _id (on the embedded store a
// filter on userId read every record, and 5,000 connects took minutes to record). Every record
// is written or deleted before it is read, so of two nodes whose last connections of a user close
// at once, at least one finds the other gone. Repeating it changes nothing.
func (s *Store) RecordPresence(ctx context.Context, node string, online, offline []string, at time.Time) (_ map[string][]string, err error) {
	defer s.metrics.observe(opRecordPresence, time.Now(), &err)
	named := make(map[string][]string, len(online)+len(offline)) // as each index write read it back
	if len(online) > 0 {
		read, err := s.presenceNodes.add(ctx, eachWith(online, node))
		if err != nil {
			return nil, fmt.Errorf("name %s for %d users: %w", node, len(online), err)
		}
		maps.Copy(named, read)
		models := make([]mongo.WriteModel, len(online))
		for i, uid := range online {
			doc := presenceDoc{ID: presenceID(uid, node), UserID: uid, Node: node, Since: at}
			models[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: doc.ID}}).
				SetUpdate(bson.D{{Key: "$setOnInsert", Value: doc}}).SetUpsert(true)
		}
		if err := bulkWrite(ctx, s.presence, models, false); err != nil {
			return nil, fmt.Errorf("mark %d users online on %s: %w", len(online), node, err)
		}
	}
	if len(offline) > 0 {
		models := make([]mongo.WriteModel, len(offline))
		for i, uid := range offline {
			// One delete by _id each: a filter on {_id: {$in: ...}} scans the records on FerretDB.
			models[i] = mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: presenceID(uid, node)}})
		}
		if err := bulkWrite(ctx, s.presence, models, false); err != nil {
			return nil, fmt.Errorf("mark %d users offline on %s: %w", len(offline), node, err)
		}
		read, err := s.presenceNodes.remove(ctx, eachWith(offline, node))
		if err != nil {
			return nil, fmt.Errorf("unname %s for %d users: %w", node, len(offline), err)
		}
		maps.Copy(named, read)
	}
	nodes := make(map[string][]string, len(named))
	for _, uid := range online {
		// This node's own records of them were just written, and only this node's writer
		// writes them: no need to read them back.
		nodes[uid] = []string{node}
		named[uid] = slices.DeleteFunc(named[uid], func(n string) bool { return n == node })
	}
	docs, err := s.presenceRecords(ctx, named)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		nodes[d.UserID] = append(nodes[d.UserID], d.Node)
	}
	return nodes, nil
}

// eachWith maps each of users to the one id.
func eachWith(users []string, id string) map[string][]string {
	out := make(map[string][]string, len(users))
	for _, u := range users {
		out[u] = []string{id}
	}
	return out
}

// presenceRecords reads, by _id, the record of each user on each of their nodes, and returns
// those that exist.
func (s *Store) presenceRecords(ctx context.Context, nodes map[string][]string) ([]presenceDoc, error) {
	var ids []string
	for uid, ns := range nodes {
		for _, n := range ns {
			ids = append(ids, presenceID(uid, n))
		}
	}
	found, err := findByIDs[presenceDoc](ctx, s.presence, ids)
	if err != nil {
		return nil, fmt.Errorf("read presence records of %d users: %w", len(nodes), err)
	}
	return slices.Collect(maps.Values(found)), nil
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

// PresenceOf returns the presence of each user of userIDs whose account exists: the accounts
// (for hidePresence), then their presenceNodes documents, then the records of the nodes named
// and of their last-seen time, all read by _id.
func (s *Store) PresenceOf(ctx context.Context, userIDs []string) (_ map[string]Presence, err error) {
	defer s.metrics.observe(opPresenceOf, time.Now(), &err)
	users, err := findByIDs[User](ctx, s.users, userIDs)
	if err != nil {
		return nil, fmt.Errorf("read presence of %d users: %w", len(userIDs), err)
	}
	out := make(map[string]Presence, len(users))
	for id, u := range users {
		if u.DeletedAt == nil {
			out[id] = Presence{LastSeen: u.LastSeen, Hidden: u.HidePresence}
		}
	}
	named, err := s.presenceNodes.ofEach(ctx, slices.Collect(maps.Keys(out)))
	if err != nil {
		return nil, fmt.Errorf("read nodes of %d users: %w", len(out), err)
	}
	for uid := range out {
		named[uid] = append(named[uid], lastSeenNode)
	}
	docs, err := s.presenceRecords(ctx, named)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		p := out[d.UserID]
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
// of one that died holds none of them. It runs once per start, so its filters on node may scan.
func (s *Store) ForgetNodePresence(ctx context.Context, node string) (err error) {
	defer s.metrics.observe(opForgetNodePresence, time.Now(), &err)
	cur, err := s.presence.Find(ctx, bson.D{{Key: "node", Value: node}}, options.Find().SetProjection(bson.D{{Key: "userId", Value: 1}}))
	if err != nil {
		return fmt.Errorf("find presence on %s: %w", node, err)
	}
	var docs []presenceDoc
	if err := readAll(ctx, cur, &docs); err != nil {
		return fmt.Errorf("read presence on %s: %w", node, err)
	}
	if _, err := s.presence.DeleteMany(ctx, bson.D{{Key: "node", Value: node}}); err != nil {
		return fmt.Errorf("forget presence on %s: %w", node, err)
	}
	users := make([]string, len(docs))
	for i, d := range docs {
		users[i] = d.UserID
	}
	if _, err := s.presenceNodes.remove(ctx, eachWith(users, node)); err != nil {
		return fmt.Errorf("unname %s for %d users: %w", node, len(users), err)
	}
	return nil
}

// RebuildPresenceNodes names, in each user's presenceNodes document, every node that has a
// presence record of theirs, in one pass over the records: the migration of a store written
// before presenceNodes existed. It only adds, so it is safe to rerun and beside live traffic.
func (s *Store) RebuildPresenceNodes(ctx context.Context) (err error) {
	defer s.metrics.observe(opRebuildPresenceNodes, time.Now(), &err)
	return rebuildIndex(ctx, s.presenceNodes, s.presence, bson.D{{Key: "node", Value: bson.D{{Key: "$ne", Value: lastSeenNode}}}},
		bson.D{{Key: "userId", Value: 1}, {Key: "node", Value: 1}},
		func(d presenceDoc) ([]string, string) { return []string{d.UserID}, d.Node })
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
