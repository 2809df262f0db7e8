package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/chatd/chatd/storage"
)

// runMigrate moves a store's messages from one document each into buckets (see storage.Migrate),
// talking to MongoDB directly rather than to a chat server. Like a backfill it resumes where a
// run cut short stopped, so it shares its bound.
func runMigrate(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("migrate")
	openStore := storeFlags(c, fs)
	group := fs.Int("group", storage.DefaultMigrateGroup, "conversations moved per step (one read of the old collection each)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, backfillTimeout)
	defer cancel()
	store, err := openStore(ctx, false)
	if err != nil {
		return err
	}
	defer store.Close(context.WithoutCancel(ctx))
	enc := json.NewEncoder(c.stdout)
	err = store.Migrate(ctx, *group, func(p storage.MigrateProgress) {
		if c.json {
			_ = enc.Encode(p) // progress output only; the run's result is the error below
			return
		}
		fmt.Fprintf(c.stdout, "moved %d conversations, %d messages; last %s\n", p.Conversations, p.Messages, p.After)
	})
	if err != nil {
		return fmt.Errorf("migrate (safe to run again; it resumes): %w", err)
	}
	if !c.json {
		fmt.Fprintln(c.stdout, "migration complete; check it with chatctl audit")
	}
	return nil
}
