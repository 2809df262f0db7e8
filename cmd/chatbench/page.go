package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// `chatbench page` times history pages at given depths of a conversation, read from the store the
// way a node reads one: the conversation by _id (for its lastSeq), then the page's seq range. It
// talks to the store directly because a node bounds each store call at 10 s, which a deep page on
// the embedded store's old layout exceeds; `chatctl history -before` is the same page through a node.

// defaultPageTimeout bounds one page: a page of a million-message collection scanned whole took
// 92-113 s on the embedded store (NOTES.md).
const defaultPageTimeout = 10 * time.Minute

// pageConfig is what `chatbench page` reads.
type pageConfig struct {
	MongoURI       string
	Database       string
	ConversationID string
	Depths         []int64
	Limit          int
	Repeat         int
	Timeout        time.Duration
	JSON           bool
}

func parsePageFlags(args []string, getenv func(string) string, stderr io.Writer) (pageConfig, error) {
	cfg := pageConfig{}
	fs := flag.NewFlagSet("chatbench page", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: chatbench page [flags]

Times one history page at each -depths of a conversation, read from the store as a node reads it:
the conversation by _id, then the seqs lastSeq-depth-limit+1..lastSeq-depth. Depth 0 is the latest
page. By default the conversation is the big one "chatbench seed" wrote with -prefix.

Flags:
`)
		fs.PrintDefaults()
	}
	storeFlags(fs, getenv, &cfg.MongoURI, &cfg.Database, "")
	prefix := fs.String("prefix", defaultSeedPrefix, "the seeded data set whose big conversation to page")
	fs.StringVar(&cfg.ConversationID, "conversation", "", "conversation id; default the big conversation of -prefix")
	depths := fs.String("depths", "0,10000,990000", "comma-separated depths: messages newer than the page")
	fs.IntVar(&cfg.Limit, "limit", protocol.DefaultPageSize, "messages per page")
	fs.IntVar(&cfg.Repeat, "repeat", 1, "pages read at each depth")
	fs.DurationVar(&cfg.Timeout, "timeout", defaultPageTimeout, "bound on one page")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.ConversationID == "" {
		cfg.ConversationID = bigConversationID(*prefix)
	}
	for _, d := range strings.Split(*depths, ",") {
		depth, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if err != nil || depth < 0 {
			return cfg, fmt.Errorf("depth %q is not a whole number from 0", d)
		}
		cfg.Depths = append(cfg.Depths, depth)
	}
	switch {
	case cfg.MongoURI == "":
		return cfg, errors.New("-mongo-uri (or CHAT_MONGO_URI) is required")
	case cfg.Limit < 1 || cfg.Limit > protocol.MaxPageSize:
		return cfg, fmt.Errorf("-limit must be between 1 and %d", protocol.MaxPageSize)
	case cfg.Repeat < 1:
		return cfg, errors.New("-repeat must be at least 1")
	}
	return cfg, nil
}

// pageRow is one depth's pages.
type pageRow struct {
	Depth   int64     `json:"depth"`
	FromSeq int64     `json:"fromSeq"`
	ToSeq   int64     `json:"toSeq"`
	Latency latencies `json:"latency"`
}

// runPage reads the pages and writes one row per depth.
func runPage(ctx context.Context, cfg pageConfig, out io.Writer) error {
	store, err := storage.Open(ctx, storage.Config{URI: cfg.MongoURI, Database: cfg.Database,
		OperationTimeout: cfg.Timeout, SkipIndexes: true}) // it only reads
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer store.Close(context.WithoutCancel(ctx))
	var rows []pageRow
	for _, depth := range cfg.Depths {
		h := &histogram{}
		row := pageRow{Depth: depth}
		for range cfg.Repeat {
			from, to, took, err := readPage(ctx, store, cfg, depth)
			if err != nil {
				return err
			}
			h.record(took)
			row.FromSeq, row.ToSeq = from, to
		}
		row.Latency = summarize(h)
		rows = append(rows, row)
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			ConversationID string    `json:"conversationId"`
			Pages          []pageRow `json:"pages"`
		}{cfg.ConversationID, rows})
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "conversation\t%s, %d messages per page\n", cfg.ConversationID, cfg.Limit)
	for _, r := range rows {
		fmt.Fprintf(tw, "depth %d\tseqs %d..%d: %s\n", r.Depth, r.FromSeq, r.ToSeq, latencyText(r.Latency))
	}
	return tw.Flush()
}

// readPage reads the page at depth and returns its seq range and how long it took.
func readPage(ctx context.Context, store *storage.Store, cfg pageConfig, depth int64) (from, to int64, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	conv, err := store.Conversation(ctx, cfg.ConversationID)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read conversation %s: %w", cfg.ConversationID, err)
	}
	to = conv.LastSeq - depth
	from = max(1, to-int64(cfg.Limit)+1)
	if to < 1 {
		return 0, 0, 0, fmt.Errorf("depth %d is beyond the conversation's %d messages", depth, conv.LastSeq)
	}
	msgs, err := store.MessageRange(ctx, cfg.ConversationID, from, to)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read seqs %d..%d: %w", from, to, err)
	}
	took = time.Since(start)
	if int64(len(msgs)) != to-from+1 {
		return 0, 0, 0, fmt.Errorf("seqs %d..%d: %d messages stored, want %d", from, to, len(msgs), to-from+1)
	}
	return from, to, took, nil
}
