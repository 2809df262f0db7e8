package node_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// filtersOf returns the query filters in a command.
func filtersOf(t *testing.T, c testenv.Command) []bson.Raw {
	t.Helper()
	var out []bson.Raw
	lookup := func(doc bson.Raw, key string) {
		if v, err := doc.LookupErr(key); err == nil {
			out = append(out, v.Document())
		}
	}
	statements := func(key string) []bson.RawValue {
		stmts, err := c.Body.LookupErr(key)
		if err != nil {
			t.Fatalf("%s without %s: %s", c.Name, key, c.Body)
		}
		values, _ := stmts.Array().Values() // a malformed array yields no values, and fails below
		return values
	}
	switch c.Name {
	case "find":
		lookup(c.Body, "filter")
	case "count", "findAndModify":
		lookup(c.Body, "query")
	case "update":
		for _, v := range statements("updates") {
			lookup(v.Document(), "q")
		}
	case "delete":
		for _, v := range statements("deletes") {
			lookup(v.Document(), "q")
		}
	case "aggregate":
		for _, st := range statements("pipeline") {
			lookup(st.Document(), "$match")
		}
	}
	return out
}

// messageCollections hold a conversation's messages, their claims and their change log.
var messageCollections = []string{"messageBuckets", "messageClaims", "messageChanges"}

// TestMessageQueriesTargetOneConversation drives every path that touches messages (send, retry,
// history, sync, receipts, delete, account deletion) and checks that each read and write of a
// message document is by the exact _id of one conversation's document: the one filter the
// embedded store answers from an index, and a single-shard lookup on a cluster sharded on _id.
func TestMessageQueriesTargetOneConversation(t *testing.T) {
	_, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, time.Minute)
	alice, token := testenv.ConnectWithToken(t, n.URL(), "alice")
	bob := testenv.Connect(t, n.URL(), "bob")
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	group, err := bob.CreateGroup(ctx, "g", []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeConversation })
	first, err := alice.Send(ctx, dm.ID, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SendWithID(ctx, dm.ID, first.ClientMsgID, "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Send(ctx, group.ID, "hello group"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []protocol.ClientFrame{
		{Type: protocol.TypeHistory, ConversationID: dm.ID},
		{Type: protocol.TypeHistory, ConversationID: dm.ID, Around: ptr(int64(1))},
		{Type: protocol.TypeSync, Since: map[string]int64{dm.ID: 0, group.ID: 0}},
		{Type: protocol.TypeReceipts, ConversationID: dm.ID, Seq: 1},
		{Type: protocol.TypeDeleteMessage, ConversationID: group.ID, Seq: 1},
	} {
		if _, err := alice.Request(ctx, f); err != nil {
			t.Fatalf("%s: %v", f.Type, err)
		}
	}
	deleteAccount(t, ctx, n, token)

	ofOneConversation := func(id string) bool {
		return strings.HasPrefix(id, dm.ID+"/") || strings.HasPrefix(id, group.ID+"/")
	}
	checked := 0
	for _, coll := range messageCollections {
		for _, c := range rec.Commands("", coll) {
			if c.Name == "insert" {
				docs, _ := c.Body.Lookup("documents").Array().Values()
				for _, d := range docs {
					if id, ok := d.Document().Lookup("_id").StringValueOK(); !ok || !ofOneConversation(id) {
						t.Fatalf("insert into %s of a document not keyed by its conversation: %s", coll, c.Body)
					}
				}
				checked++
				continue
			}
			for _, f := range filtersOf(t, c) {
				elems, _ := f.Elements()
				id, ok := f.Lookup("_id").StringValueOK()
				if len(elems) != 1 || !ok || !ofOneConversation(id) {
					t.Fatalf("%s on %s is not by the exact _id of one conversation's document: %s", c.Name, coll, c.Body)
				}
				checked++
			}
		}
	}
	if checked < 8 {
		t.Fatalf("only %d commands on message documents were seen; the workload did not run", checked)
	}
}
