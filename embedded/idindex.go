package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the driver FerretDB itself stores with
)

// FerretDB v1 on SQLite stores every collection as a table of JSON documents and pushes exactly
// one filter down to SQL, {_id: value}, as `WHERE _ferretdb_sjson->'$._id' = ?`. The index it
// builds for _id is on another expression (`_ferretdb_sjson->"_id"`), which SQLite does not match
// to that query: every _id lookup reads the whole table, parsing each document (measured here:
// 1.8 ms in a table of 20,000 100-byte documents, 70 ms in one of 2,000 of 20 KB). The chat
// store is laid out so that every hot read is an _id lookup (storage/buckets.go); the
// indexer gives each table an index on exactly the expression FerretDB queries, which makes those
// lookups a B-tree search. FerretDB knows nothing of these indexes: it neither lists nor needs
// them, and dropping a collection drops its table with its index.

// idIndexSweep is how often the indexer looks for tables FerretDB created since: a new
// collection's first lookups scan a table of a few documents, which costs nothing.
const idIndexSweep = 500 * time.Millisecond

// idIndexer indexes the _id expression of every collection table in the SQLite files of dir.
type idIndexer struct {
	dir     string
	log     *slog.Logger
	dbs     map[string]*sql.DB // by file
	indexed map[string]bool    // by file and table
}

func newIDIndexer(dir string, log *slog.Logger) *idIndexer {
	return &idIndexer{dir: dir, log: log, dbs: make(map[string]*sql.DB), indexed: make(map[string]bool)}
}

// run sweeps until ctx ends, then closes its connections.
func (x *idIndexer) run(ctx context.Context) {
	defer x.close()
	tick := time.NewTicker(idIndexSweep)
	defer tick.Stop()
	for {
		sweepCtx, cancel := context.WithTimeout(ctx, 10*idIndexSweep)
		if err := x.sweep(sweepCtx); err != nil && ctx.Err() == nil {
			x.log.Warn("index _id lookups", "error", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweep indexes every table not indexed yet.
func (x *idIndexer) sweep(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(x.dir, "*.sqlite"))
	if err != nil {
		return fmt.Errorf("list %s: %w", x.dir, err)
	}
	var errs []error
	for _, file := range files {
		if err := x.sweepFile(ctx, file); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (x *idIndexer) sweepFile(ctx context.Context, file string) error {
	db, err := x.open(file)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") { // a database FerretDB is still creating
			return nil
		}
		return fmt.Errorf("list the tables of %s: %w", file, err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return fmt.Errorf("list the tables of %s: %w", file, err)
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the tables of %s: %w", file, err)
	}
	for _, table := range tables {
		key := file + "\x00" + table
		if x.indexed[key] {
			continue
		}
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %q ON %q (_ferretdb_sjson->'$._id')`, table+"_id_lookup", table)
		if _, err := db.ExecContext(ctx, q); err != nil {
			if strings.Contains(err.Error(), "no such table") { // dropped meanwhile
				continue
			}
			return fmt.Errorf("index _id of %s in %s: %w", table, file, err)
		}
		x.indexed[key] = true
	}
	return nil
}

// open returns the connection to file, opening it on first use. A database file that is gone
// (dropped) is forgotten.
func (x *idIndexer) open(file string) (*sql.DB, error) {
	if db, ok := x.dbs[file]; ok {
		if _, err := os.Stat(file); err == nil {
			return db, nil
		}
		db.Close()
		delete(x.dbs, file)
		for key := range x.indexed {
			if strings.HasPrefix(key, file+"\x00") {
				delete(x.indexed, key)
			}
		}
	}
	// busy_timeout: FerretDB's own writes hold the database briefly; wait for them.
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	db.SetMaxOpenConns(1)
	x.dbs[file] = db
	return db, nil
}

func (x *idIndexer) close() {
	for file, db := range x.dbs {
		if err := db.Close(); err != nil {
			x.log.Warn("close", "file", file, "error", err)
		}
	}
}
