package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/chatd/chatd/protocol"
)

// The audit reads every conversation through the store's own reads (Conversation with its
// counters, the seq claims, the buckets of messages) and recounts from the messages
// what the counters and the server's unread counts say. The raw queries it needs besides (listing
// conversations, a conversation's cursors, the next stored seq after an empty range) are here, so
// a change of the layout finds them in one file.

// Defaults of AuditOptions, each with its reason.
const (
	// DefaultAuditPage is the width of one MessageRange read, and the conversations or cursors
	// listed per read: about a megabyte of messages in memory and one round trip each. The
	// embedded store scans its whole collection for every range read, so fewer, larger pages are
	// what make an audit of it affordable.
	DefaultAuditPage = 1000
	// DefaultAuditReadTimeout bounds one read of the audit. MongoDB answers a page from an index;
	// the embedded store reads its whole messages collection for each one, which takes minutes at
	// a million messages (docs/SCALING.md, "Auditing a store").
	DefaultAuditReadTimeout = 2 * time.Minute
	// DefaultAuditRecheck is how long the audit waits before it looks again at a conversation that
	// differed. On a live store a batch's counters are raised one round trip after its messages
	// are stored, and a read position moves while the audit reads; a difference that is still
	// there a second later is not a write in flight.
	DefaultAuditRecheck = time.Second
)

// AuditCheck names one rule of the audit; a difference says which one it breaks.
type AuditCheck string

// The rules the audit checks for every conversation.
const (
	// AuditGap: a seq from 1 to the higher of lastSeq and the highest stored seq is not stored.
	AuditGap AuditCheck = "gap"
	// AuditDuplicate: a seq is stored more than once.
	AuditDuplicate AuditCheck = "duplicate"
	// AuditAboveLastSeq: messages are stored above the counters' lastSeq.
	AuditAboveLastSeq AuditCheck = "above-last-seq"
	// AuditLastVersion: a stored message has a version above the counters' lastVersion.
	AuditLastVersion AuditCheck = "last-version"
	// AuditSenders: the counters' newest seq of a sender is not their newest stored message.
	AuditSenders AuditCheck = "senders"
	// AuditLastMessage: the preview is not that of the newest stored message.
	AuditLastMessage AuditCheck = "last-message"
	// AuditDeletedSeqs: deletedSeqs is not the seqs of the stored tombstones, each once.
	AuditDeletedSeqs AuditCheck = "deleted-seqs"
	// AuditDeletedCount: deletedCount is not the number of stored tombstones.
	AuditDeletedCount AuditCheck = "deleted-count"
	// AuditUnread: a member's unread count as the server computes it (counters, deletedSeqs,
	// cursor) is not a recount of the stored messages after their read position.
	AuditUnread AuditCheck = "unread"
	// AuditCursor: a member has no read cursor, or a read cursor belongs to a non-member.
	AuditCursor AuditCheck = "cursor"
)

// AuditDifference is one way a conversation's stored state disagrees with its messages.
type AuditDifference struct {
	ConversationID string     `json:"conversationId"`
	Check          AuditCheck `json:"check"`
	// UserID is the member or sender concerned, if any.
	UserID string `json:"userId,omitempty"`
	// Seq is the seq concerned, if any; To ends a range of seqs that starts at Seq.
	Seq int64 `json:"seq,omitempty"`
	To  int64 `json:"to,omitempty"`
	// Detail says in words what is stored and what the messages say.
	Detail string `json:"detail"`
}

// AuditOptions tune an audit; a nil *AuditOptions means every default.
type AuditOptions struct {
	// Page is the widest range of seqs one MessageRange read asks for, and the most
	// conversations or cursors one read lists; 0 means DefaultAuditPage.
	Page int
	// ReadTimeout bounds each read; 0 means DefaultAuditReadTimeout.
	ReadTimeout time.Duration
	// Recheck is how long to wait before auditing a conversation that differs once more; only
	// differences found both times are reported, so a write in flight on a live store is not.
	// 0 means DefaultAuditRecheck; a negative value reports the first look.
	Recheck time.Duration
	// Difference, if set, is called with each difference as it is confirmed, conversation by
	// conversation in _id order.
	Difference func(AuditDifference)

	// beforeRecheck, set by tests only, runs between the two looks at a conversation.
	beforeRecheck func(conversationID string)
}

// AuditReport sums up an audit.
type AuditReport struct {
	// Conversations and Messages count what was checked: conversations, and message documents
	// read on the first look at each.
	Conversations int64 `json:"conversations"`
	Messages      int64 `json:"messages"`
	// Differences counts the differences reported.
	Differences int64 `json:"differences"`
}

// Audit checks every conversation of the store against its stored messages: seqs 1..lastSeq each
// stored exactly once and none above lastSeq; the counters (lastSeq, lastVersion, senders,
// lastMessage) and the conversation's deletedSeqs and deletedCount equal to what the messages
// say; every member with a read cursor and every cursor a member's; and each member's unread count
// as the server computes it equal to a recount from the messages and their cursor. It reports
// each difference to opts.Difference and returns their number with what it checked. It only
// reads, in pages, each read bounded by opts.ReadTimeout, so it may run on a live store (see
// AuditOptions.Recheck). Mention counts do not exist yet and are not checked; neither are
// messages of conversations that no longer exist.
func (s *Store) Audit(ctx context.Context, opts *AuditOptions) (_ AuditReport, err error) {
	defer s.metrics.observe(opAudit, time.Now(), &err)
	o := auditDefaults(opts)
	var report AuditReport
	after := ""
	for {
		var ids []string
		err := o.read(ctx, func(ctx context.Context) (err error) {
			ids, err = s.conversationIDsAfter(ctx, after, o.Page)
			return err
		})
		if err != nil {
			return report, err
		}
		for _, id := range ids {
			if err := s.auditWithRecheck(ctx, id, o, &report); err != nil {
				return report, err
			}
		}
		if len(ids) < o.Page {
			return report, nil
		}
		after = ids[len(ids)-1]
	}
}

func auditDefaults(opts *AuditOptions) AuditOptions {
	var o AuditOptions
	if opts != nil {
		o = *opts
	}
	if o.Page <= 0 {
		o.Page = DefaultAuditPage
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultAuditReadTimeout
	}
	if o.Recheck == 0 {
		o.Recheck = DefaultAuditRecheck
	}
	return o
}

// auditWithRecheck audits one conversation, and once more after o.Recheck if it differed; it
// reports the differences found both times.
func (s *Store) auditWithRecheck(ctx context.Context, id string, o AuditOptions, report *AuditReport) error {
	first, err := s.auditConversation(ctx, id, o)
	if errors.Is(err, ErrNotFound) {
		return nil // deleted since it was listed
	}
	if err != nil {
		return err
	}
	report.Conversations++
	report.Messages += first.messages
	diffs := first.diffs
	if len(diffs) > 0 && o.Recheck > 0 {
		t := time.NewTimer(o.Recheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("audit %s again: %w", id, ctx.Err())
		case <-t.C:
		}
		if o.beforeRecheck != nil {
			o.beforeRecheck(id)
		}
		second, err := s.auditConversation(ctx, id, o)
		switch {
		case errors.Is(err, ErrNotFound):
			diffs = nil
		case err != nil:
			return err
		default:
			diffs = persistent(first.diffs, second.diffs)
		}
	}
	for _, d := range diffs {
		report.Differences++
		if o.Difference != nil {
			o.Difference(d)
		}
	}
	return nil
}

// persistent returns the differences of second that first found too: the same rule broken for
// the same user, and for the same seq where the seq names what differs (a gap, a duplicate, a
// tombstone), whatever the numbers are now.
func persistent(first, second []AuditDifference) []AuditDifference {
	seen := make(map[auditKey]bool, len(first))
	for _, d := range first {
		seen[d.key()] = true
	}
	var out []AuditDifference
	for _, d := range second {
		if seen[d.key()] {
			out = append(out, d)
		}
	}
	return out
}

type auditKey struct {
	check AuditCheck
	user  string
	seq   int64
}

// key is what makes two looks' differences the same one. A seq that is a value (a sender's newest
// message, the newest message, the version's message, where lastSeq is) may move between looks.
func (d AuditDifference) key() auditKey {
	k := auditKey{check: d.Check, user: d.UserID}
	switch d.Check {
	case AuditGap, AuditDuplicate, AuditDeletedSeqs:
		k.seq = d.Seq
	}
	return k
}

// conversationAudit is what one look at a conversation found.
type conversationAudit struct {
	diffs    []AuditDifference
	messages int64
}

// seqRange is the seqs from..to.
type seqRange struct{ from, to int64 }

// messageTally is what a conversation's stored messages say, read once in seq order.
type messageTally struct {
	docs int64
	// last is the highest seq seen, copies its number of documents.
	last, copies int64
	gaps         []seqRange
	// tombstones holds each tombstone's seq once, ascending.
	tombstones []int64
	// newestBy is each sender's newest message, system messages and deleted accounts left out:
	// what the owner keeps in the counters' senders.
	newestBy map[string]int64
	// newest is the first document of the highest seq.
	newest *Message
	// version is the highest version stored, at versionSeq.
	version, versionSeq int64
	dups                []AuditDifference
}

func (t *messageTally) add(convID string, m Message) {
	t.docs++
	if m.Seq == t.last && t.last > 0 {
		t.copies++
		return
	}
	t.closeSeq(convID)
	if m.Seq > t.last+1 {
		t.gaps = append(t.gaps, seqRange{t.last + 1, m.Seq - 1})
	}
	t.last, t.copies = m.Seq, 1
	if m.Kind == protocol.KindDeleted {
		t.tombstones = append(t.tombstones, m.Seq)
	}
	if m.SenderID != "" && m.Kind != protocol.KindSystem {
		t.newestBy[m.SenderID] = m.Seq
	}
	if m.Version > t.version {
		t.version, t.versionSeq = m.Version, m.Seq
	}
	t.newest = &m
}

// closeSeq reports the seq just read if it was stored more than once.
func (t *messageTally) closeSeq(convID string) {
	if t.copies <= 1 {
		return
	}
	t.dups = append(t.dups, AuditDifference{ConversationID: convID, Check: AuditDuplicate, Seq: t.last,
		Detail: fmt.Sprintf("seq %d is stored %d times", t.last, t.copies)})
}

// liveAfter counts the seqs after read up to the highest stored one that are stored and not
// tombstones: the unread a member at read position read has, recounted from the messages.
func (t *messageTally) liveAfter(read int64) int64 {
	if read >= t.last {
		return 0
	}
	n := t.last - read
	for _, g := range t.gaps {
		if g.to > read {
			n -= g.to - max(g.from, read+1) + 1
		}
	}
	i := sort.Search(len(t.tombstones), func(i int) bool { return t.tombstones[i] > read })
	return n - int64(len(t.tombstones)-i)
}

func (t *messageTally) isTombstone(seq int64) bool {
	_, found := slices.BinarySearch(t.tombstones, seq)
	return found
}

func (t *messageTally) isStored(seq int64) bool {
	if seq < 1 || seq > t.last {
		return false
	}
	for _, g := range t.gaps {
		if seq >= g.from && seq <= g.to {
			return false
		}
	}
	return true
}

// auditConversation looks at one conversation once. Its counters are read before its messages:
// the owner raises them only after the messages are stored, so every seq up to the lastSeq read
// is stored by then, on a live store too.
func (s *Store) auditConversation(ctx context.Context, id string, o AuditOptions) (conversationAudit, error) {
	var c Conversation
	err := o.read(ctx, func(ctx context.Context) (err error) {
		c, err = s.Conversation(ctx, id)
		return err
	})
	if err != nil {
		return conversationAudit{}, err
	}
	var high int64
	if err := o.read(ctx, func(ctx context.Context) (err error) {
		high, err = s.highestClaimed(ctx, id, c.LastSeq)
		return err
	}); err != nil {
		return conversationAudit{}, err
	}
	t := &messageTally{newestBy: make(map[string]int64)}
	if err := s.tallyMessages(ctx, id, high, o, t); err != nil {
		return conversationAudit{}, err
	}
	a := conversationAudit{messages: t.docs}
	diff := func(check AuditCheck, user string, seq, to int64, format string, args ...any) {
		a.diffs = append(a.diffs, AuditDifference{ConversationID: id, Check: check, UserID: user, Seq: seq, To: to,
			Detail: fmt.Sprintf(format, args...)})
	}

	// Seqs: gapless up to lastSeq, each once, none above it.
	for _, g := range t.gaps {
		diff(AuditGap, "", g.from, rangeEnd(g), "%s not stored (lastSeq %d)", seqsWord(g), c.LastSeq)
	}
	if c.LastSeq > t.last {
		g := seqRange{t.last + 1, c.LastSeq}
		diff(AuditGap, "", g.from, rangeEnd(g), "%s not stored (lastSeq %d)", seqsWord(g), c.LastSeq)
	}
	a.diffs = append(a.diffs, t.dups...)
	if t.last > c.LastSeq {
		diff(AuditAboveLastSeq, "", c.LastSeq+1, rangeEnd(seqRange{c.LastSeq + 1, t.last}), "messages stored up to seq %d, above lastSeq %d", t.last, c.LastSeq)
	}

	// Counters.
	if t.version > c.LastVersion {
		diff(AuditLastVersion, "", t.versionSeq, 0, "seq %d has version %d, above lastVersion %d", t.versionSeq, t.version, c.LastVersion)
	}
	for _, u := range sortedKeys(t.newestBy) {
		if seq := t.newestBy[u]; c.Senders[u] != seq {
			diff(AuditSenders, u, seq, 0, "senders[%s] is %d; %s's newest stored message is seq %d", u, c.Senders[u], u, seq)
		}
	}
	members := make(map[string]bool, len(c.Members))
	for _, m := range c.Members {
		members[m] = true
	}
	for _, u := range sortedKeys(c.Senders) {
		// A deleted account's messages lose their sender; its entry stays and means nothing.
		if _, sent := t.newestBy[u]; !sent && members[u] {
			diff(AuditSenders, u, c.Senders[u], 0, "senders[%s] is %d; %s has no stored message", u, c.Senders[u], u)
		}
	}
	if d := previewDifference(c.LastMessage, t.newest); d != "" {
		diff(AuditLastMessage, "", t.last, 0, "%s", d)
	}

	// Tombstones.
	listed := make(map[int64]int, len(c.DeletedSeqs))
	for _, seq := range c.DeletedSeqs {
		listed[seq]++
	}
	for _, seq := range sortedKeys(listed) {
		switch n := listed[seq]; {
		case n > 1:
			diff(AuditDeletedSeqs, "", seq, 0, "seq %d is in deletedSeqs %d times", seq, n)
		case !t.isStored(seq):
			diff(AuditDeletedSeqs, "", seq, 0, "seq %d is in deletedSeqs but not stored", seq)
		case !t.isTombstone(seq):
			diff(AuditDeletedSeqs, "", seq, 0, "seq %d is in deletedSeqs but stored as a live message", seq)
		}
	}
	for _, seq := range t.tombstones {
		if listed[seq] == 0 {
			diff(AuditDeletedSeqs, "", seq, 0, "seq %d is a tombstone missing from deletedSeqs", seq)
		}
	}
	if n := int64(len(t.tombstones)); c.DeletedCount != n {
		diff(AuditDeletedCount, "", 0, 0, "deletedCount is %d; %d tombstones are stored", c.DeletedCount, n)
	}

	// Members: a cursor each, and the unread the server computes from the counters equal to a
	// recount from the messages.
	cursors, err := s.cursorsIn(ctx, id, o)
	if err != nil {
		return conversationAudit{}, err
	}
	for _, u := range sortedKeys(cursors) {
		if !members[u] {
			diff(AuditCursor, u, 0, 0, "%s has a read cursor but is not a member", u)
		}
	}
	for _, u := range c.Members {
		cur, ok := cursors[u]
		if !ok {
			diff(AuditCursor, u, 0, 0, "member %s has no read cursor", u)
		}
		server, serverRead := serverUnread(c, u, cur)
		read := max(cur.ReadSeq, t.newestBy[u])
		if recount := t.liveAfter(read); recount != server {
			diff(AuditUnread, u, 0, 0, "%s: the server counts %d unread after read position %d; the stored messages after %d hold %d",
				u, server, serverRead, read, recount)
		}
	}
	return a, nil
}

// serverUnread is userID's unread count in c as the chat service computes it from the store
// (Unread, as Badge and toView use it): lastSeq less the read position (the cursor's, or the
// member's own newest message), less the deleted seqs after it. It returns that read position too.
func serverUnread(c Conversation, userID string, cur Cursor) (unread, read int64) {
	read = min(c.ReadSeq(userID, cur), c.LastSeq)
	return Unread(c.LastSeq, read, c.DeletedSeqs), read
}

// previewDifference says how stored differs from the preview of the newest message, the way the
// owner writes it; "" when it does not.
func previewDifference(stored *MessagePreview, newest *Message) string {
	switch {
	case newest == nil && stored == nil:
		return ""
	case newest == nil:
		return fmt.Sprintf("lastMessage is seq %d; no message is stored", stored.Seq)
	case stored == nil:
		return fmt.Sprintf("no lastMessage; the newest stored message is seq %d", newest.Seq)
	}
	want := newest.Preview()
	switch {
	case stored.Seq != want.Seq:
		return fmt.Sprintf("lastMessage is seq %d; the newest stored message is seq %d", stored.Seq, want.Seq)
	case stored.SenderID != want.SenderID || stored.Kind != want.Kind || stored.Body != want.Body || !stored.CreatedAt.Equal(want.CreatedAt):
		return fmt.Sprintf("lastMessage of seq %d is %s %s %q at %s; the message is %s %s %q at %s", want.Seq,
			stored.SenderID, stored.Kind, stored.Body, stored.CreatedAt.UTC().Format(time.RFC3339Nano),
			want.SenderID, want.Kind, want.Body, want.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// tallyMessages reads a conversation's messages 1..high in seq order into t, o.Page seqs (whole
// buckets) at a time, every stored copy of a seq included.
func (s *Store) tallyMessages(ctx context.Context, id string, high int64, o AuditOptions, t *messageTally) error {
	width := max(int64(o.Page)/BucketSize, 1) * BucketSize
	for from := int64(1); from <= high; from += width {
		var msgs []Message
		if err := o.read(ctx, func(ctx context.Context) (err error) {
			msgs, err = s.bucketMessages(ctx, id, from, min(from+width-1, high))
			return err
		}); err != nil {
			return err
		}
		for _, m := range msgs {
			t.add(id, m)
		}
	}
	t.closeSeq(id)
	return nil
}

// conversationIDsAfter lists up to limit conversation ids after after, in _id order.
func (s *Store) conversationIDsAfter(ctx context.Context, after string, limit int) ([]string, error) {
	var docs []struct {
		ID string `bson:"_id"`
	}
	cur, err := s.conversations.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err == nil {
		err = readAll(ctx, cur, &docs)
	}
	if err != nil {
		return nil, fmt.Errorf("list conversations after %q: %w", after, err)
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids, nil
}

// cursorsIn returns the read cursors of a conversation by user, read o.Page at a time in _id
// order (the {conversationId, readSeq} index serves the filter on MongoDB).
func (s *Store) cursorsIn(ctx context.Context, id string, o AuditOptions) (map[string]Cursor, error) {
	out := make(map[string]Cursor)
	after := ""
	for {
		var docs []struct {
			ID     string `bson:"_id"`
			Cursor `bson:",inline"`
		}
		err := o.read(ctx, func(ctx context.Context) error {
			cur, err := s.cursors.Find(ctx,
				bson.D{{Key: "conversationId", Value: id}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}}},
				options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(o.Page)))
			if err != nil {
				return err
			}
			return readAll(ctx, cur, &docs)
		})
		if err != nil {
			return nil, fmt.Errorf("read cursors of %s: %w", id, err)
		}
		for _, d := range docs {
			out[d.UserID] = d.Cursor
		}
		if len(docs) < o.Page {
			return out, nil
		}
		after = docs[len(docs)-1].ID
	}
}

// read runs one read with its own deadline of o.ReadTimeout.
func (o AuditOptions) read(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
	defer cancel()
	return f(ctx)
}

func rangeEnd(g seqRange) int64 {
	if g.to == g.from {
		return 0
	}
	return g.to
}

func seqsWord(g seqRange) string {
	if g.to == g.from {
		return fmt.Sprintf("seq %d is", g.from)
	}
	return fmt.Sprintf("seqs %d..%d are", g.from, g.to)
}

func sortedKeys[K string | int64, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
