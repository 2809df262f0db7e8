package storage_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/testenv"
)

// TestBlocks covers the blocks collection on the real store: blocking is idempotent and listed,
// Blocked and BlockedWith see either direction, unblocking undoes it, and deleting an account
// removes the blocks it made and those of it.
func TestBlocks(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ensureUsers(t, ctx, s, "alice", "bob", "carol", "dave")
	blocked := func(a, b string) bool {
		t.Helper()
		got, err := s.Blocked(ctx, a, b)
		if err != nil {
			t.Fatalf("blocked %s %s: %v", a, b, err)
		}
		return got
	}
	blocksOf := func(u string) []string {
		t.Helper()
		got, err := s.BlocksOf(ctx, u)
		if err != nil {
			t.Fatalf("blocks of %s: %v", u, err)
		}
		return got
	}

	for range 2 { // the second time changes nothing
		if err := s.Block(ctx, "alice", "carol", time.Now().UTC()); err != nil {
			t.Fatalf("block: %v", err)
		}
	}
	if err := s.Block(ctx, "alice", "bob", time.Now().UTC()); err != nil {
		t.Fatalf("block: %v", err)
	}
	if got := blocksOf("alice"); !slices.Equal(got, []string{"bob", "carol"}) {
		t.Fatalf("alice blocks %v; want [bob carol]", got)
	}
	if got := blocksOf("bob"); len(got) != 0 {
		t.Fatalf("bob blocks %v; want nobody", got)
	}
	if !blocked("alice", "bob") || !blocked("bob", "alice") {
		t.Fatal("a block is not seen from both sides")
	}
	if blocked("bob", "carol") || blocked("alice", "dave") {
		t.Fatal("a block is seen where there is none")
	}
	if err := s.Block(ctx, "dave", "alice", time.Now().UTC()); err != nil {
		t.Fatalf("block: %v", err)
	}
	with, err := s.BlockedWith(ctx, "alice", []string{"dave", "bob", "carol", "alice", "bob"})
	if err != nil {
		t.Fatalf("blocked with: %v", err)
	}
	if !slices.Equal(with, []string{"dave", "bob", "carol"}) {
		t.Fatalf("blocked with alice: %v; want [dave bob carol]", with)
	}
	if with, err := s.BlockedWith(ctx, "bob", []string{"carol", "dave"}); err != nil || len(with) != 0 {
		t.Fatalf("blocked with bob: %v, %v; want none", with, err)
	}

	for range 2 {
		if err := s.Unblock(ctx, "alice", "bob"); err != nil {
			t.Fatalf("unblock: %v", err)
		}
	}
	if blocked("alice", "bob") || !slices.Equal(blocksOf("alice"), []string{"carol"}) {
		t.Fatalf("after unblocking bob: blocked %v, list %v", blocked("alice", "bob"), blocksOf("alice"))
	}

	if _, err := s.DeleteAccount(ctx, "alice"); err != nil {
		t.Fatalf("delete account: %v", err)
	}
	if len(blocksOf("alice")) != 0 || len(blocksOf("dave")) != 0 || blocked("alice", "carol") {
		t.Fatalf("blocks outlive the account: alice %v, dave %v", blocksOf("alice"), blocksOf("dave"))
	}
}
