package main

import (
	"context"
	"flag"

	"github.com/chatd/chatd/storage"
)

// storeFlags adds the flags of an operator command that talks to MongoDB directly rather than to
// a chat server (-mongo-uri, -mongo-db), and returns how to open the store they name once parsed.
// skipIndexes opens without building indexes, for commands that only read or that run on a
// store whose data does not fit them yet.
func storeFlags(c *cli, fs *flag.FlagSet) func(ctx context.Context, skipIndexes bool) (*storage.Store, error) {
	uri := fs.String("mongo-uri", envOr(c.getenv, "CHAT_MONGO_URI", ""), "MongoDB URI (CHAT_MONGO_URI)")
	db := fs.String("mongo-db", envOr(c.getenv, "CHAT_MONGO_DB", "chat"), "database (CHAT_MONGO_DB)")
	return func(ctx context.Context, skipIndexes bool) (*storage.Store, error) {
		if *uri == "" {
			return nil, usagef("-mongo-uri (or CHAT_MONGO_URI) is required")
		}
		return storage.Open(ctx, storage.Config{URI: *uri, Database: *db, SkipIndexes: skipIndexes})
	}
}
