package server

import (
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
)

// The cache holds the accounts read lately, not one per user seen since the node started: an
// idle node with thousands of connected users keeps none of their accounts.
func TestAccountCacheDropsExpiredAccounts(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := newAccountCache()
	c.now = func() time.Time { return now }
	for _, id := range []string{"ann", "bob", "cat"} {
		_, gen, _ := c.get(id)
		c.put(storage.User{ID: id}, gen)
	}
	now = now.Add(accountCacheTTL)
	_, gen, _ := c.get("dan")
	c.put(storage.User{ID: "dan"}, gen)
	if len(c.m) != 1 {
		t.Fatalf("after a TTL the cache holds %d accounts, want only the one read since", len(c.m))
	}
	if _, _, ok := c.get("dan"); !ok {
		t.Fatal("the account read last is not cached")
	}
}
