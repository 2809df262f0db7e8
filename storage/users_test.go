package storage_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestEnsureUserConcurrentFirstCalls: 8 simultaneous EnsureUser of one new user all return the
// one stored account (before the fix some got E11000 duplicate key).
func TestEnsureUserConcurrentFirstCalls(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 5 {
		id := "new-" + string(rune('a'+round))
		var wg sync.WaitGroup
		got := make([]storage.User, 8)
		errs := make([]error, 8)
		start := make(chan struct{})
		for i := range got {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.EnsureUser(ctx, storage.User{ID: id, Name: id, CreatedAt: time.Now().UTC().Add(time.Duration(i) * time.Second)})
			})
		}
		close(start)
		wg.Wait()
		for i := range got {
			if errs[i] != nil {
				t.Fatalf("%s: call %d of 8: %v", id, i, errs[i])
			}
			if !got[i].CreatedAt.Equal(got[0].CreatedAt) {
				t.Fatalf("%s: calls returned different accounts: %v and %v", id, got[0], got[i])
			}
		}
	}
}

// TestDeletedAccountStaysATombstone: after DeleteAccount the id is refused by EnsureUser, unknown
// to User and MissingUsers, and ReviveUser makes a new account whose tokens start after the
// deletion.
func TestDeletedAccountStaysATombstone(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.EnsureUser(ctx, storage.User{ID: "alice", Name: "Alice", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := s.DeleteAccount(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureUser(ctx, storage.User{ID: "alice", Name: "alice", CreatedAt: time.Now().UTC()}); !errors.Is(err, storage.ErrDeleted) {
		t.Fatalf("EnsureUser of a deleted account: %v; want ErrDeleted", err)
	}
	if _, err := s.User(ctx, "alice"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("User of a deleted account: %v; want ErrNotFound", err)
	}
	if missing, err := s.MissingUsers(ctx, []string{"alice"}); err != nil || len(missing) != 1 {
		t.Fatalf("MissingUsers of a deleted account: %v, %v; want it missing", missing, err)
	}
	u, err := s.ReviveUser(ctx, storage.User{ID: "alice", Name: "Alice again", CreatedAt: time.Now().UTC()})
	if err != nil || u.TokensValidAfter == nil || !u.TokensValidAfter.After(before) {
		t.Fatalf("ReviveUser = %+v, %v; want tokens valid only after the deletion", u, err)
	}
	if got, err := s.User(ctx, "alice"); err != nil || got.Name != "Alice again" || got.TokensValidAfter == nil {
		t.Fatalf("revived account: %+v, %v", got, err)
	}
}

// TestRevokeTokens stores the end of the current second, for known and not yet seen users.
func TestRevokeTokens(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Date(2026, 12, 2, 12, 0, 0, 400_000_000, time.UTC)
	after, err := s.RevokeTokens(ctx, "stranger", at)
	if err != nil || !after.Equal(at.Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("RevokeTokens = %s, %v; want the next whole second", after, err)
	}
	u, err := s.EnsureUser(ctx, storage.User{ID: "stranger", Name: "stranger", CreatedAt: time.Now().UTC()})
	if err != nil || u.TokensValidAfter == nil || !u.TokensValidAfter.Equal(after) {
		t.Fatalf("the first connection after a revocation sees %+v, %v; want tokens valid after %s", u, err, after)
	}
}

// TestFindUsersByNameOrWord: a person is found by the start of their name or of any word of it,
// in any case and script, sorted by name; deleted accounts and the asker are not found; a renamed
// user is found by the new name only; Profiles shows a deleted account as such.
func TestFindUsersByNameOrWord(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, name := range map[string]string{"mary": "Mary Jane", "jan": "Jan Novák", "jo": "José Janssen",
		"li": "李雷", "asker": "Jane Asker", "gone": "Janet Gone", "old": "Oldname"} {
		if _, err := s.EnsureUser(ctx, storage.User{ID: id, Name: name, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteAccount(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetName(ctx, "old", "Janina Renamed"); err != nil {
		t.Fatal(err)
	}
	names := func(query string) []string {
		t.Helper()
		found, err := s.FindUsers(ctx, query, "asker", 20)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, u := range found {
			out = append(out, u.Name)
		}
		return out
	}
	for query, want := range map[string][]string{
		"jan":      {"Jan Novák", "Janina Renamed", "José Janssen", "Mary Jane"},
		"JAN":      {"Jan Novák", "Janina Renamed", "José Janssen", "Mary Jane"},
		"mary j":   {"Mary Jane"},
		"josé":     {"José Janssen"},
		"李":        {"李雷"},
		"oldname":  {},
		"a.b":      {}, // no regular expression sneaks in
		"renamed ": {"Janina Renamed"},
	} {
		if got := names(query); !slices.Equal(got, want) {
			t.Errorf("FindUsers(%q) = %q; want %q", query, got, want)
		}
	}
	profiles, err := s.Profiles(ctx, []string{"mary", "gone", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(profiles, func(a, b storage.User) int { return strings.Compare(a.ID, b.ID) })
	if len(profiles) != 2 || profiles[0].ID != "gone" || profiles[0].DeletedAt == nil || profiles[0].Name != "" ||
		profiles[1].Name != "Mary Jane" || profiles[1].DeletedAt != nil {
		t.Fatalf("Profiles = %+v; want gone (deleted, no name) and Mary Jane", profiles)
	}
	if err := s.SetName(ctx, "gone", "Back"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("SetName of a deleted account: %v; want ErrNotFound", err)
	}
}
