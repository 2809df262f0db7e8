package storage

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The driver's Cursor.All, Cursor.Decode and SingleResult.Decode wrap every document they decode
// in a fresh 4 KiB bufio.Reader (mongo-driver v2.10, getDecoder); bson.Unmarshal decodes the same
// bytes through a pooled reader. A connecting user's reads decode a dozen documents, so each
// connect left garbage of 4 KiB buffers: the size class of every open socket's read and write
// buffers, whose spans the garbage then kept half empty (docs/BENCHMARKS.md, "Memory per idle
// connection"). The store uses no custom registry or BSON options, so both decode alike.

// readAll decodes every document of cur into *out, replacing what it held, and closes cur, as
// cur.All does.
func readAll[T any](ctx context.Context, cur *mongo.Cursor, out *[]T) (err error) {
	defer func() {
		// With context.Background, as cur.All does: the cursor is closed even when ctx has ended.
		if cerr := cur.Close(context.Background()); cerr != nil && err == nil {
			err = fmt.Errorf("close cursor: %w", cerr)
		}
	}()
	docs := (*out)[:0]
	for cur.Next(ctx) {
		var doc T
		if err := bson.Unmarshal(cur.Current, &doc); err != nil {
			return fmt.Errorf("decode document %d: %w", len(docs), err)
		}
		docs = append(docs, doc)
	}
	if err := cur.Err(); err != nil {
		return err
	}
	*out = docs
	return nil
}

// decode decodes the document of res into v, as res.Decode does; it returns mongo.ErrNoDocuments
// when there is none, and the operation's error when it failed.
func decode(res *mongo.SingleResult, v any) error {
	raw, err := res.Raw()
	if err != nil {
		return err
	}
	if err := bson.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode document: %w", err)
	}
	return nil
}
