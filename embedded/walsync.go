package embedded

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// With SyncInterval the store commits as with SyncNormal (SQLite writes each commit to its
// write-ahead log and does not wait for the disk), and this loop syncs the logs to disk every
// walSyncEvery: an acknowledged write survives a killed process at once, and a power loss or an
// operating system crash once the next sync has run. That is what MongoDB promises by default
// (a write acknowledged before its journal is synced, which happens every 100 ms), at a fraction
// of SyncFull's cost: the disk is waited for ten times a second, not at every commit.
// SQLite keeps the database consistent either way: it syncs the log before it checkpoints it
// into the database, and recovery stops at the first commit not wholly on disk.

// walSyncEvery bounds the commits a power loss can take with SyncInterval.
const walSyncEvery = 100 * time.Millisecond

// syncLogs syncs the write-ahead logs under dir every walSyncEvery until ctx ends.
func syncLogs(ctx context.Context, dir string, log *slog.Logger) {
	tick := time.NewTicker(walSyncEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := syncLogsOnce(ctx, dir); err != nil {
			log.Warn("sync the write-ahead logs", "error", err)
		}
	}
}

// syncLogsOnce syncs every write-ahead log under dir to disk. A log that is gone (SQLite deletes
// it when its database closes) has nothing to sync.
func syncLogsOnce(ctx context.Context, dir string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*.sqlite-wal"))
	if err != nil {
		return fmt.Errorf("list the logs in %s: %w", dir, err)
	}
	var errs []error
	for _, name := range logs {
		if ctx.Err() != nil {
			return nil // stopping: the store's own close syncs what is left
		}
		if err := syncFile(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	return nil
}
