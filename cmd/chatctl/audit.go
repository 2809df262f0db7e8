package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chatd/chatd/storage"
)

// auditTimeout bounds a whole audit run by default. An audit only reads, so a run cut short
// loses nothing but its answer; the embedded store reads its whole messages collection for every
// page, so a large one takes hours (docs/SCALING.md, "Auditing a store").
const auditTimeout = 24 * time.Hour

// auditUsage is what chatctl audit -h prints before its flags; docs/SCALING.md says the same.
const auditUsage = `usage: chatctl audit -mongo-uri URI [-mongo-db chat] [flags]

Reads every conversation of the store, in pages, and checks it against its stored messages:
  - seqs 1..lastSeq each stored exactly once, none above lastSeq
    (gap, duplicate, above-last-seq);
  - lastVersion at least every message's version, senders[user] each sender's newest message,
    lastMessage the newest message's preview (last-version, senders, last-message);
  - deletedSeqs the tombstones' seqs, each once, deletedCount their number
    (deleted-seqs, deleted-count);
  - a read cursor for every member and none for anyone else (cursor), and each member's unread
    count as the server computes it equal to a recount from the messages and their cursor
    (unread). Mention counts do not exist yet and are not checked.
It prints one line per difference, then a summary; -json prints one JSON record per difference
and the summary last. It only reads, so it may run on a live store: a conversation that differs
is looked at again after -recheck, and only what differs both times is printed.
Exit status: 0 when nothing differs, 3 when something does, 1 when the audit could not finish.

Example (a store of 50 conversations, three of them broken by hand):
  $ chatctl audit -mongo-uri mongodb://127.0.0.1:27017/ -mongo-db chat
  group-007 gap: seq 40 is not stored (lastSeq 100)
  group-012 deleted-seqs: seq 2 is a tombstone missing from deletedSeqs
  group-031 above-last-seq: messages stored up to seq 100, above lastSeq 99
  group-031 unread: ann: the server counts 0 unread after read position 99; the stored messages after 99 hold 1
  group-031 unread: cat: the server counts 1 unread after read position 98; the stored messages after 98 hold 2
  group-031 unread: dan: the server counts 49 unread after read position 50; the stored messages after 50 hold 50
  50 conversations, 4999 messages checked, 6 differences (24.5s)

Flags:
`

// errDifferences says the audit ran and found differences; run exits with exitDifferences.
var errDifferences = errors.New("differences found")

// runAudit checks every conversation of a store against its stored messages (storage.Audit),
// talking to MongoDB directly rather than to a chat server, as backfill does. It prints one line
// (or JSON record) per difference and a summary; the exit status is exitDifferences when any.
func runAudit(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("audit")
	openStore := storeFlags(c, fs)
	page := fs.Int("page", storage.DefaultAuditPage, "seqs per message read, conversations and cursors per list read")
	readTimeout := fs.Duration("read-timeout", storage.DefaultAuditReadTimeout, "bound on each read")
	recheck := fs.Duration("recheck", storage.DefaultAuditRecheck,
		"look again after this long at a conversation that differs, and report only what differs both times (0: report the first look)")
	deadline := fs.Duration("deadline", auditTimeout, "bound on the whole run")
	fs.Usage = func() {
		fmt.Fprint(c.stderr, auditUsage)
		fs.PrintDefaults()
	}
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *deadline)
	defer cancel()
	// No indexes are built: the audit only reads, and may run against a store mid-migration.
	store, err := openStore(ctx, true)
	if err != nil {
		return err
	}
	defer store.Close(context.WithoutCancel(ctx))
	if *recheck == 0 {
		*recheck = -1 // storage's 0 is its default
	}
	enc := json.NewEncoder(c.stdout)
	start := time.Now()
	report, err := store.Audit(ctx, &storage.AuditOptions{Page: *page, ReadTimeout: *readTimeout, Recheck: *recheck,
		Difference: func(d storage.AuditDifference) {
			if c.json {
				_ = enc.Encode(d) // a failed write to stdout shows in the summary's absence
				return
			}
			fmt.Fprintf(c.stdout, "%s %s: %s\n", d.ConversationID, d.Check, d.Detail)
		}})
	if err != nil {
		return fmt.Errorf("audit after %d conversations (it only reads; run it again): %w", report.Conversations, err)
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	if c.json {
		if err := enc.Encode(struct {
			storage.AuditReport
			Seconds float64 `json:"seconds"`
		}{report, elapsed.Seconds()}); err != nil {
			return fmt.Errorf("print the summary: %w", err)
		}
	} else {
		fmt.Fprintf(c.stdout, "%d conversations, %d messages checked, %d differences (%s)\n",
			report.Conversations, report.Messages, report.Differences, elapsed)
	}
	if report.Differences > 0 {
		return fmt.Errorf("%d %w", report.Differences, errDifferences)
	}
	return nil
}
