package storage_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// idsOf returns the conversation ids of convs, sorted.
func idsOf(convs []storage.Conversation) []string {
	ids := make([]string, len(convs))
	for i, c := range convs {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	return ids
}

// conversationsOf returns the sorted ids of userID's conversations.
func conversationsOf(t *testing.T, ctx context.Context, s *storage.Store, userID string) []string {
	t.Helper()
	convs, err := s.ConversationsOf(ctx, userID)
	if err != nil {
		t.Fatalf("conversations of %s: %v", userID, err)
	}
	return idsOf(convs)
}

// cursorConversations returns the sorted conversation ids of userID's read cursors.
func cursorConversations(t *testing.T, ctx context.Context, s *storage.Store, userID string) []string {
	t.Helper()
	cursors, err := s.CursorsOf(ctx, userID)
	if err != nil {
		t.Fatalf("cursors of %s: %v", userID, err)
	}
	ids := make([]string, len(cursors))
	for i, c := range cursors {
		if c.UserID != userID {
			t.Fatalf("cursor of %s among %s's", c.UserID, userID)
		}
		ids[i] = c.ConversationID
	}
	slices.Sort(ids)
	return ids
}

// membershipsDoc returns the conversations a user's memberships document holds as stored, and
// whether it exists.
func membershipsDoc(t *testing.T, ctx context.Context, db *mongo.Database, userID string) ([]string, bool) {
	t.Helper()
	var doc struct {
		Conversations []string `bson:"conversations"`
	}
	err := db.Collection("memberships").FindOne(ctx, bson.D{{Key: "_id", Value: userID}}).Decode(&doc)
	if err == mongo.ErrNoDocuments {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(doc.Conversations)
	return doc.Conversations, true
}

// ensure stores a conversation of members, created by the first of them.
func ensure(t *testing.T, ctx context.Context, s *storage.Store, id, kind string, members ...string) {
	t.Helper()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: id, Kind: kind, Members: members,
		CreatedBy: members[0], CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatalf("ensure %s: %v", id, err)
	}
}

// ensureUsers stores an account for each of users, named as their id.
func ensureUsers(t *testing.T, ctx context.Context, s *storage.Store, users ...string) {
	t.Helper()
	for _, u := range users {
		if _, err := s.EnsureUser(ctx, storage.User{ID: u, Name: u, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatalf("ensure user %s: %v", u, err)
		}
	}
}

// TestMembershipsFollowMembers: a user's conversations and cursors, read through their
// memberships document, follow every change of who is in what: creating, adding, removing, and
// deleting an account, which takes its DMs out of the peers' memberships and drops its own.
func TestMembershipsFollowMembers(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensureUsers(t, ctx, s, "ann", "bea", "cal", "dan")
	ensure(t, ctx, s, "g", storage.KindGroup, "ann", "bea", "cal")
	ensure(t, ctx, s, "dm-ann-bea", storage.KindDM, "ann", "bea")
	ensure(t, ctx, s, "dm-ann-bea", storage.KindDM, "ann", "bea") // opened again: one conversation
	if got := conversationsOf(t, ctx, s, "ann"); !slices.Equal(got, []string{"dm-ann-bea", "g"}) {
		t.Fatalf("ann is in %v; want [dm-ann-bea g]", got)
	}
	if got := cursorConversations(t, ctx, s, "ann"); !slices.Equal(got, []string{"dm-ann-bea", "g"}) {
		t.Fatalf("ann has cursors in %v; want [dm-ann-bea g]", got)
	}
	if got := conversationsOf(t, ctx, s, "dan"); len(got) != 0 {
		t.Fatalf("dan, in nothing, is in %v", got)
	}
	if err := s.AddMembers(ctx, "g", []string{"dan"}); err != nil {
		t.Fatal(err)
	}
	if got := conversationsOf(t, ctx, s, "dan"); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("dan, added to g, is in %v", got)
	}
	if got := cursorConversations(t, ctx, s, "dan"); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("dan, added to g, has cursors in %v", got)
	}
	if err := s.RemoveMember(ctx, "g", "cal"); err != nil {
		t.Fatal(err)
	}
	if got := conversationsOf(t, ctx, s, "cal"); len(got) != 0 {
		t.Fatalf("cal, removed from g, is in %v", got)
	}
	if got, _ := membershipsDoc(t, ctx, db, "cal"); len(got) != 0 {
		t.Fatalf("cal's memberships still name %v", got)
	}
	if _, err := s.DeleteAccount(ctx, "bea"); err != nil {
		t.Fatal(err)
	}
	if got := conversationsOf(t, ctx, s, "ann"); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("after bea's deletion ann is in %v; want [g]", got)
	}
	if got, _ := membershipsDoc(t, ctx, db, "ann"); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("after bea's deletion ann's memberships name %v; want [g] (the DM pulled)", got)
	}
	if got, ok := membershipsDoc(t, ctx, db, "bea"); ok {
		t.Fatalf("the deleted account keeps a memberships document: %v", got)
	}
}

// TestStaleMembershipIsNotReturned: a memberships document may name a conversation the user is no
// longer in (a removal whose memberships write failed) or one that is gone; the conversation is
// the truth, so neither is returned.
func TestStaleMembershipIsNotReturned(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensure(t, ctx, s, "g", storage.KindGroup, "ann", "bea")
	ensure(t, ctx, s, "h", storage.KindGroup, "ann", "bea")
	// bea leaves g behind the store's back, and a conversation that never existed is named.
	if _, err := db.Collection("conversations").UpdateOne(ctx, bson.D{{Key: "_id", Value: "g"}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "members", Value: "bea"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("memberships").UpdateOne(ctx, bson.D{{Key: "_id", Value: "bea"}},
		bson.D{{Key: "$addToSet", Value: bson.D{{Key: "conversations", Value: "ghost"}}}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := membershipsDoc(t, ctx, db, "bea"); !slices.Equal(got, []string{"g", "ghost", "h"}) {
		t.Fatalf("the setup did not leave stale memberships: %v", got)
	}
	if got := conversationsOf(t, ctx, s, "bea"); !slices.Equal(got, []string{"h"}) {
		t.Fatalf("bea is in %v; want [h] only", got)
	}
	if got := conversationsOf(t, ctx, s, "ann"); !slices.Equal(got, []string{"g", "h"}) {
		t.Fatalf("ann is in %v; want [g h]", got)
	}
}

// TestLostMembershipWriteIsRepaired: when another write of the same memberships document undoes
// this one between its write and its read back (a lost update on the embedded store, made here
// by the test), the read back finds it and writes it again: an add and a removal alike.
func TestLostMembershipWriteIsRepaired(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensure(t, ctx, s, "old", storage.KindGroup, "ann", "bea")

	var lost atomic.Int32
	lose := func(update bson.D) func() {
		return func() {
			if lost.Add(1) != 1 { // only the first write is lost; its repair goes through
				return
			}
			if _, err := db.Collection("memberships").UpdateOne(ctx, bson.D{{Key: "_id", Value: "bea"}}, update); err != nil {
				t.Error(err)
			}
		}
	}
	// An add lost: bea's document written back as it was before the add.
	storage.SetAfterMembershipsWrite(s, lose(bson.D{{Key: "$set", Value: bson.D{{Key: "conversations", Value: bson.A{"old"}}}}}))
	ensure(t, ctx, s, "new", storage.KindGroup, "ann", "bea")
	if lost.Load() < 2 {
		t.Fatalf("the lost add was not read back and written again (%d writes)", lost.Load())
	}
	if got := conversationsOf(t, ctx, s, "bea"); !slices.Equal(got, []string{"new", "old"}) {
		t.Fatalf("after a lost add bea is in %v; want [new old]", got)
	}

	// A removal lost: the id put back.
	lost.Store(0)
	storage.SetAfterMembershipsWrite(s, lose(bson.D{{Key: "$addToSet", Value: bson.D{{Key: "conversations", Value: "old"}}}}))
	if err := s.RemoveMember(ctx, "old", "bea"); err != nil {
		t.Fatal(err)
	}
	if lost.Load() < 2 {
		t.Fatalf("the lost removal was not read back and written again (%d writes)", lost.Load())
	}
	if got, _ := membershipsDoc(t, ctx, db, "bea"); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("after a lost removal bea's memberships name %v; want [new]", got)
	}
}

// TestRebuildMemberships: conversations stored before memberships existed are nobody's until the
// rebuild, which gives each member theirs; a second run changes nothing.
func TestRebuildMemberships(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// More conversations than one rebuild batch holds, in the shape main stores them.
	var docs []any
	want := map[string][]string{}
	for i := range 1205 {
		id := fmt.Sprintf("c%04d", i)
		members := bson.A{"ann", fmt.Sprintf("u%d", i%7)}
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: storage.KindGroup},
			{Key: "members", Value: members}, {Key: "lastSeq", Value: int64(0)}, {Key: "deletedCount", Value: int64(0)}})
		want["ann"] = append(want["ann"], id)
		want[members[1].(string)] = append(want[members[1].(string)], id)
	}
	if _, err := db.Collection("conversations").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if got := conversationsOf(t, ctx, s, "ann"); len(got) != 0 {
		t.Fatalf("before the rebuild ann is in %d conversations", len(got))
	}
	for run := range 2 {
		if err := s.RebuildMemberships(ctx); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for user, ids := range want {
			if got := conversationsOf(t, ctx, s, user); !slices.Equal(got, ids) {
				t.Fatalf("run %d: %s is in %d conversations; want %d", run, user, len(got), len(ids))
			}
			if got, _ := membershipsDoc(t, ctx, db, user); !slices.Equal(got, ids) {
				t.Fatalf("run %d: %s's memberships name %d conversations; want %d", run, user, len(got), len(ids))
			}
		}
	}
}

// TestRebuildBlockListsAndPresenceNodes: blocks and presence records stored before their
// user-keyed lists existed are listed after the rebuilds (each run twice), and stay checked
// against the records: a listed block or node whose record is gone is not answered.
func TestRebuildBlockListsAndPresenceNodes(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensureUsers(t, ctx, s, "ann", "bea")
	now := time.Now().UTC()
	if _, err := db.Collection("blocks").InsertMany(ctx, []any{
		storage.Block{ID: "ann|bea", Blocker: "ann", Blocked: "bea", CreatedAt: now},
		storage.Block{ID: "ann|cal", Blocker: "ann", Blocked: "cal", CreatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("presence").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "bea|n1"}, {Key: "userId", Value: "bea"}, {Key: "node", Value: "n1"}, {Key: "since", Value: now}},
		bson.D{{Key: "_id", Value: "bea|n2"}, {Key: "userId", Value: "bea"}, {Key: "node", Value: "n2"}, {Key: "since", Value: now}},
		bson.D{{Key: "_id", Value: "bea|"}, {Key: "userId", Value: "bea"}, {Key: "node", Value: ""}, {Key: "since", Value: now}},
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.RebuildBlockLists(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.RebuildPresenceNodes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.BlocksOf(ctx, "ann"); err != nil || !slices.Equal(got, []string{"bea", "cal"}) {
		t.Fatalf("ann blocks %v, %v; want [bea cal]", got, err)
	}
	p, err := s.PresenceOf(ctx, []string{"bea"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sorted(p["bea"].Nodes); !slices.Equal(got, []string{"n1", "n2"}) || p["bea"].LastSeen == nil {
		t.Fatalf("bea's presence %+v; want nodes [n1 n2] and a last seen time", p["bea"])
	}
	// The records go behind the lists' backs: the lists still name them, the answers do not.
	if _, err := db.Collection("blocks").DeleteOne(ctx, bson.D{{Key: "_id", Value: "ann|cal"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("presence").DeleteOne(ctx, bson.D{{Key: "_id", Value: "bea|n2"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.BlocksOf(ctx, "ann"); err != nil || !slices.Equal(got, []string{"bea"}) {
		t.Fatalf("ann blocks %v, %v; want [bea]", got, err)
	}
	if p, err := s.PresenceOf(ctx, []string{"bea"}); err != nil || !slices.Equal(p["bea"].Nodes, []string{"n1"}) {
		t.Fatalf("bea's presence %+v, %v; want on n1 only", p["bea"], err)
	}
	// A restarted n1 forgets its records and its names in the lists.
	if err := s.ForgetNodePresence(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nodes []string `bson:"nodes"`
	}
	if err := db.Collection("presenceNodes").FindOne(ctx, bson.D{{Key: "_id", Value: "bea"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(doc.Nodes, "n1") {
		t.Fatalf("bea's nodes still name the forgotten n1: %v", doc.Nodes)
	}
}

// TestConnectReadsAreIDLookups: everything a connect and a first connect read (the account, the
// conversations, the cursors, the blocks, the presence of peers and its records, profiles, the
// check that group members exist), and the presence writes beside them, reaches the store as
// finds (and updates, deletes) whose filter is exactly {_id: value}: the one filter the embedded
// store answers from an index. Any other filter reads the whole collection there.
func TestConnectReadsAreIDLookups(t *testing.T) {
	var rec testenv.CommandRecorder
	cfg := testenv.StoreConfig(t)
	cfg.Monitor = rec.Monitor()
	s := testenv.OpenStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const user = "ann"
	var peers []string
	for i := range 20 {
		peer := fmt.Sprintf("peer%02d", i)
		peers = append(peers, peer)
		if _, err := s.EnsureUser(ctx, storage.User{ID: peer, Name: peer, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		kind := storage.KindDM
		if i%2 == 1 {
			kind = storage.KindGroup
		}
		ensure(t, ctx, s, fmt.Sprintf("c%02d", i), kind, user, peer)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"c00": {LastSeq: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Block(ctx, user, "peer03", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPresence(ctx, "n2", peers[:5], nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec.Reset()

	// A returning user's connect.
	if _, err := s.EnsureUser(ctx, storage.User{ID: user, Name: user, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.User(ctx, user); err != nil {
		t.Fatal(err)
	}
	convs, err := s.ConversationsOf(ctx, user)
	if err != nil || len(convs) != 20 {
		t.Fatalf("ann is in %d conversations, %v; want 20", len(convs), err)
	}
	if cursors, err := s.CursorsOf(ctx, user); err != nil || len(cursors) != 20 {
		t.Fatalf("ann has %d cursors, %v; want 20", len(cursors), err)
	}
	if blocks, err := s.BlocksOf(ctx, user); err != nil || !slices.Equal(blocks, []string{"peer03"}) {
		t.Fatalf("ann blocks %v, %v", blocks, err)
	}
	if nodes, err := s.RecordPresence(ctx, "n1", []string{user}, nil, time.Now()); err != nil || !slices.Equal(nodes[user], []string{"n1"}) {
		t.Fatalf("ann's nodes %v, %v", nodes, err)
	}
	if p, err := s.PresenceOf(ctx, peers); err != nil || len(p) != 20 || len(p["peer00"].Nodes) != 1 {
		t.Fatalf("peers' presence %v, %v", p, err)
	}
	if got, err := s.Profiles(ctx, peers); err != nil || len(got) != 20 {
		t.Fatalf("%d profiles, %v", len(got), err)
	}
	if missing, err := s.MissingUsers(ctx, append(slices.Clone(peers), "nobody")); err != nil || !slices.Equal(missing, []string{"nobody"}) {
		t.Fatalf("missing %v, %v", missing, err)
	}
	if _, err := s.RecordPresence(ctx, "n1", nil, []string{user}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastSeen(ctx, []string{user}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A first connect.
	if _, err := s.EnsureUser(ctx, storage.User{ID: "newcomer", Name: "newcomer", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	for _, read := range []func() error{
		func() error { _, err := s.ConversationsOf(ctx, "newcomer"); return err },
		func() error { _, err := s.CursorsOf(ctx, "newcomer"); return err },
		func() error { _, err := s.BlocksOf(ctx, "newcomer"); return err },
	} {
		if err := read(); err != nil {
			t.Fatal(err)
		}
	}

	var filters int
	check := func(what string, filter bson.Raw) {
		t.Helper()
		filters++
		elems, err := filter.Elements()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(elems) != 1 || elems[0].Key() != "_id" || elems[0].Value().Type != bson.TypeString {
			t.Errorf("%s has filter %s; want exactly {_id: <string>}", what, filter)
		}
	}
	for _, c := range rec.Commands("", "") {
		switch c.Name {
		case "find":
			check("find on "+c.Collection, c.Body.Lookup("filter").Document())
		case "findAndModify":
			check("findAndModify on "+c.Collection, c.Body.Lookup("query").Document())
		case "update", "delete":
			statements, err := c.Body.Lookup(c.Name + "s").Array().Values()
			if err != nil || len(statements) == 0 {
				t.Fatalf("%s on %s shows no statements: %v", c.Name, c.Collection, err)
			}
			for _, st := range statements {
				check(c.Name+" on "+c.Collection, st.Document().Lookup("q").Document())
			}
		case "aggregate", "count", "distinct":
			t.Errorf("the connect path sent %s on %s: %s", c.Name, c.Collection, c.Body)
		}
	}
	if finds := len(rec.Commands("find", "")); finds < 60 || filters < finds {
		t.Fatalf("checked %d filters of %d finds: the recorder saw less than the connect reads", filters, finds)
	}
}
