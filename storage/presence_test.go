package storage_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestLastDisconnectsOnTwoNodesAtOnce: when a user's last connections on two nodes close at the
// same moment, at least one of the two nodes finds no other node holding the user, so someone
// announces them offline; and the user is left on no node. Repeated, on the real store.
func TestLastDisconnectsOnTwoNodesAtOnce(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 20 {
		for _, node := range []string{"a", "b"} {
			if _, err := s.RecordPresence(ctx, node, []string{"alice"}, nil, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		left := make([][]string, 2)
		for i, node := range []string{"a", "b"} {
			wg.Go(func() {
				nodes, err := s.RecordPresence(ctx, node, nil, []string{"alice"}, time.Now())
				if err != nil {
					t.Error(err)
				}
				left[i] = nodes["alice"]
			})
		}
		wg.Wait()
		if len(left[0]) > 0 && len(left[1]) > 0 {
			t.Fatalf("round %d: node a found %v still online and node b found %v: nobody announces alice offline", round, left[0], left[1])
		}
		p, err := s.PresenceOf(ctx, []string{"alice"})
		if err != nil {
			t.Fatal(err)
		}
		if nodes := p["alice"].Nodes; len(nodes) > 0 {
			t.Fatalf("round %d: alice is left on nodes %v", round, nodes)
		}
	}
}

// TestPresenceRecords: marking online twice records one node; one batch records users coming and
// going and answers, for each, the nodes holding them; a restarted node's records are forgotten;
// last seen only moves forward; the privacy switch is kept.
func TestPresenceRecords(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.EnsureUser(ctx, storage.User{ID: "alice", Name: "alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.RecordPresence(ctx, "a", []string{"alice", "bob"}, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	batches := []struct {
		node            string
		online, offline []string
		want            map[string][]string // bob, gone from a, is on no node
	}{
		{"b", []string{"alice", "carol"}, nil, map[string][]string{"alice": {"a", "b"}, "carol": {"b"}}},
		{"a", []string{"dave"}, []string{"bob"}, map[string][]string{"dave": {"a"}}},
	}
	for _, b := range batches {
		nodes, err := s.RecordPresence(ctx, b.node, b.online, b.offline, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != len(b.want) {
			t.Fatalf("%v coming to %s and %v leaving it: %v; want %v", b.online, b.node, b.offline, nodes, b.want)
		}
		for uid, w := range b.want {
			if got := sorted(nodes[uid]); !slices.Equal(got, w) {
				t.Fatalf("%s is on %v; want %v (all: %v)", uid, got, w, nodes)
			}
		}
	}
	if err := s.ForgetNodePresence(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.SetLastSeen(ctx, []string{"alice", "bob"}, later); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastSeen(ctx, []string{"alice"}, later.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHidePresence(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	p, err := s.PresenceOf(ctx, []string{"alice", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p["alice"]; !slices.Equal(got.Nodes, []string{"b"}) || got.LastSeen == nil || !got.LastSeen.Equal(later) || !got.Hidden {
		t.Errorf("alice's presence: %+v; want on b only, last seen %v, hidden", got, later)
	}
	if _, ok := p["nobody"]; ok {
		t.Errorf("a user with no account has a presence")
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestLastSeenNeverUndoesARename: the last-seen time, written in the background when a user's last
// connection closes, and a rename made at that moment both stay. (On the account document they
// raced: FerretDB makes each update a read-modify-write of the whole document, and the rename
// was undone.)
func TestLastSeenNeverUndoesARename(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.EnsureUser(ctx, storage.User{ID: "mary", Name: "Mary", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	seen := time.Now().UTC().Truncate(time.Millisecond)
	for i := range 30 {
		name := fmt.Sprintf("Mary %d", i)
		var wg sync.WaitGroup
		var renameErr, seenErr error
		wg.Go(func() { renameErr = s.SetName(ctx, "mary", name) })
		wg.Go(func() { seenErr = s.SetLastSeen(ctx, []string{"mary"}, seen.Add(time.Duration(i)*time.Second)) })
		wg.Wait()
		if renameErr != nil || seenErr != nil {
			t.Fatal(renameErr, seenErr)
		}
		u, err := s.User(ctx, "mary")
		if err != nil {
			t.Fatal(err)
		}
		if u.Name != name {
			t.Fatalf("round %d: the account says %q after renaming it to %q beside a last-seen write", i, u.Name, name)
		}
	}
	p, err := s.PresenceOf(ctx, []string{"mary"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p["mary"].LastSeen; got == nil || !got.Equal(seen.Add(29*time.Second)) {
		t.Errorf("last seen %v; want the latest written, %v", got, seen.Add(29*time.Second))
	}
	if len(p["mary"].Nodes) != 0 {
		t.Errorf("the last-seen record counts as a node: %v", p["mary"].Nodes)
	}
}
