package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/testenv"
)

// TestBackfillThenMigrateCommands: a legacy store without seqs is numbered, then moved into
// buckets, after which today's reads page it.
func TestBackfillThenMigrateCommands(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	testenv.LegacyMessages(t, cfg, map[string]int{"old": 12})
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, []string{"backfill", "-mongo-uri", cfg.URI, "-mongo-db", cfg.Database, "-batch", "5"},
		cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }})
	if code != exitOK {
		t.Fatalf("backfill exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "old: done, 12 messages numbered") {
		t.Fatalf("progress output: %q", stdout.String())
	}
	stdout.Reset()
	code = run(ctx, []string{"migrate", "-mongo-uri", cfg.URI, "-mongo-db", cfg.Database, "-group", "1"},
		cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }})
	if code != exitOK || !strings.Contains(stdout.String(), "migration complete") {
		t.Fatalf("migrate exited %d: %s %s", code, stdout.String(), stderr.String())
	}
	store := testenv.OpenStore(t, cfg)
	msgs, err := store.MessageRange(ctx, "old", 1, 100)
	if err != nil || len(msgs) != 12 || msgs[11].Seq != 12 {
		t.Fatalf("after backfill and migrate: %d messages, %v", len(msgs), err)
	}
}
