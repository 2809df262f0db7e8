// Package search is the full-text index of message bodies: it answers "which messages that this
// user may see contain these words", newest first, with a highlighted snippet. It knows nothing of
// membership, storage or the wire: the caller feeds it messages as they are stored, changed and
// deleted, and passes the asker's current conversations with every query.
//
// The index is Bleve (github.com/blevesearch/bleve/v2, scorch) in process, on disk under one
// directory. One document per message, keyed by creation time, conversation and seq, so an edit
// replaces it, a deletion removes it, and the key's order is the hits' order. Bodies go through
// one analyzer for every script (see analyzer.go): Unicode word segmentation, case folded, Latin,
// Greek, Cyrillic and Hebrew accents and Arabic diacritics removed, and Chinese and Japanese
// (which write no spaces) indexed as overlapping character unigrams and bigrams, so a word is
// found inside a sentence.
//
// Past one machine. The index is derived data, rebuilt from the store, so every node keeps its
// own copy (package indexing feeds it from what the owners publish on NATS, and from the store for
// what a node missed) and answers queries locally: every node answers the same way once it has
// caught up, queries cost no network hop and no extra service runs, but every node pays the
// indexing of every message and holds the whole index (about 330 bytes per message), which
// bounds this design to what one machine indexes and stores: tens of millions of messages and
// thousands of sends per second. Beyond that, production uses a shared engine (MongoDB Atlas
// Search or Elasticsearch/OpenSearch, sharded by conversation) behind the same few calls. See
// docs/ARCHITECTURE.md, "Search".
package search

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/index/scorch"
)

// dirName is where the index lives under the node's data directory.
const dirName = "search"

// mappingVersionKey names the internal value that records which analysis built the index.
const mappingVersionKey = "chatd.search.mapping"

// mappingVersion changes whenever the mapping or the analyzer changes: an index built by another
// analysis answers wrongly without failing, so Open refuses it and the caller rebuilds it.
const mappingVersion = "1"

// ErrIncompatible means the directory holds an index built with another mapping or analyzer; the
// caller removes the directory and indexes the messages again.
var ErrIncompatible = errors.New("search index built by another version")

// Config configures an Index.
type Config struct {
	// Dir is the index's directory, created with the index when it holds none. Required.
	Dir string
}

// DefaultConfig keeps the index in a directory of its own under the node's data directory.
func DefaultConfig(dataDir string) Config {
	return Config{Dir: filepath.Join(dataDir, dirName)}
}

// Validate reports a config Open cannot use.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("search: Dir is required")
	}
	return nil
}

// Index is an open search index. Its methods are safe for concurrent use.
type Index struct {
	index bleve.Index
}

// Open opens the index in cfg.Dir, creating it when the directory holds none. It returns
// ErrIncompatible for an index built by another mapping.
func Open(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	idx, err := bleve.Open(cfg.Dir)
	switch {
	case errors.Is(err, bleve.ErrorIndexPathDoesNotExist):
		return create(cfg.Dir)
	case err != nil:
		return nil, fmt.Errorf("open search index %s: %w", cfg.Dir, err)
	}
	version, err := idx.GetInternal([]byte(mappingVersionKey))
	if err == nil && string(version) != mappingVersion {
		err = fmt.Errorf("%s has mapping %q, want %q: %w", cfg.Dir, version, mappingVersion, ErrIncompatible)
	}
	if err != nil {
		_ = idx.Close()
		return nil, fmt.Errorf("open search index: %w", err)
	}
	return &Index{index: idx}, nil
}

func create(dir string) (*Index, error) {
	m, err := newMapping()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create search index %s: %w", dir, err)
	}
	idx, err := bleve.NewUsing(dir, m, scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, fmt.Errorf("create search index %s: %w", dir, err)
	}
	if err := idx.SetInternal([]byte(mappingVersionKey), []byte(mappingVersion)); err != nil {
		_ = idx.Close()
		return nil, fmt.Errorf("record search mapping version: %w", err)
	}
	return &Index{index: idx}, nil
}

// Close flushes and closes the index. Calls after Close fail.
func (ix *Index) Close() error {
	if err := ix.index.Close(); err != nil {
		return fmt.Errorf("close search index: %w", err)
	}
	return nil
}
