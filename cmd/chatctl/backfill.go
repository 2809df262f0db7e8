package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/chatd/chatd/storage"
)

// backfillTimeout bounds a whole backfill run; it is resumable, so a run cut short loses nothing.
const backfillTimeout = 24 * time.Hour

// runBackfill numbers a legacy messages collection (see storage.Backfill), talking to MongoDB
// directly rather than to a chat server.
func runBackfill(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("backfill")
	openStore := storeFlags(c, fs)
	batch := fs.Int("batch", storage.DefaultBackfillBatch, "messages numbered per bulk write")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, backfillTimeout)
	defer cancel()
	store, err := openStore(ctx, true)
	if err != nil {
		return err
	}
	defer store.Close(context.WithoutCancel(ctx))
	enc := json.NewEncoder(c.stdout)
	err = store.Backfill(ctx, *batch, func(p storage.BackfillProgress) {
		switch {
		case c.json:
			_ = enc.Encode(p) // progress output only; the run's result is the error below
		case p.Done:
			fmt.Fprintf(c.stdout, "%s: done, %d messages numbered\n", p.ConversationID, p.Numbered)
		default:
			fmt.Fprintf(c.stdout, "%s: %d numbered so far\n", p.ConversationID, p.Numbered)
		}
	})
	if err != nil {
		return fmt.Errorf("backfill (safe to run again; it resumes): %w", err)
	}
	if !c.json {
		fmt.Fprintln(c.stdout, "backfill complete; indexes built")
	}
	return nil
}
