// Package indexing keeps this node's search index (package search) in step with the store, so
// that every node answers a search the same way from its own index. It hears what every
// conversation's owner publishes after persisting (every message and every change, on all
// conversations, by wildcard subscriptions) and indexes it in batches; what it could not hear
// (the node was down, NATS cut it off or dropped a slow subscription) it reads from the store:
// the index records per conversation how far it has taken its seqs and change versions
// (search.Progress, written with the batch that took them), and a sweep compares that with the
// store's counters at start, after a NATS reconnect and periodically, and reads what is missing
// by _id (message buckets and the change log), as a reconnecting client does.
//
// One goroutine writes the index, so the live feed and the store's catch-up of one conversation
// never interleave: a catch-up reads the conversation as it is now and moves its progress past
// what it read, and live events at or below that progress are dropped as already taken.
package indexing

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/search"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// Defaults, each with its reason.
const (
	// DefaultMaxBatch bounds the events one index write takes: under a burst a batch of 1,024 is
	// one disk write and one segment instead of 1,024.
	DefaultMaxBatch = 1024
	// DefaultBatchWindow is how long the writer gathers events after the first before it writes
	// them as one batch. Every batch is a segment that Bleve merges into larger ones later, and
	// merging a segment per message cost a node at 300 sends/s about half a core (measured: 45%
	// of the node's CPU in scorch's merger and persister); gathered for this long, a busy node
	// writes a few batches a second, and a message or an edit is still searchable well within a
	// second.
	DefaultBatchWindow = 200 * time.Millisecond
	// DefaultBuffer bounds the events waiting for the writer. Past it NATS drops them (a slow
	// consumer) and the next sweep reads them from the store.
	DefaultBuffer = 1 << 16
	// DefaultSweepInterval is how often the index is compared with every conversation's counters
	// even when nothing was seen to be missed: a change lost on the way, with no later event in
	// its conversation to show the gap, is indexed within this time. Not more often: a sweep
	// lists every conversation, which the embedded store answers by reading them all.
	DefaultSweepInterval = time.Hour
	// DefaultTimeout bounds one store read or one index write.
	DefaultTimeout = 10 * time.Second
	// sweepPage is how many conversation ids a sweep lists at a time.
	sweepPage = 500
	// readPage is how many messages, or changed messages, one catch-up read asks for: a history
	// page's worth.
	readPage = 200
	// applyEvery is how many messages a catch-up reads before it writes them to the index, with
	// the progress they make: a long conversation is taken in parts, each safe where it ends,
	// never held in memory whole.
	applyEvery = 10000
	// storeShare bounds the store's time the sweep and the catch-ups take: after each read they
	// rest (storeShare-1) times as long as it took. A node starting on a store of a million
	// messages it has not indexed reads them all; at a fifth of the store's time that leaves
	// the rest to connecting users and sends, and the index is complete a few times later.
	storeShare = 5
	// maxCachedProgress bounds the conversations whose progress the writer keeps in memory; the
	// index holds them all.
	maxCachedProgress = 100000
)

// Store is what the catch-up reads: every read is by _id on the embedded store, except the
// list of conversation ids, which a sweep reads a page at a time.
type Store interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
	ChangedMessages(ctx context.Context, conversationID string, afterVersion, maxSeq int64, limit int) ([]storage.Message, error)
	ConversationIDsAfter(ctx context.Context, after string, limit int) ([]string, error)
}

// Config configures a Feed. Zero fields take the defaults above.
type Config struct {
	// Dir is the index's directory. Required.
	Dir string
	// SubjectPrefix must match the sequencer's.
	SubjectPrefix string
	MaxBatch      int
	BatchWindow   time.Duration
	Buffer        int
	SweepInterval time.Duration
	Timeout       time.Duration
	// Metrics, if set, counts what the feed takes and catches up; nil records nothing.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, sequencer.DefaultSubjectPrefix)
	c.MaxBatch = cmp.Or(c.MaxBatch, DefaultMaxBatch)
	c.BatchWindow = cmp.Or(c.BatchWindow, DefaultBatchWindow)
	c.Buffer = cmp.Or(c.Buffer, DefaultBuffer)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

// Feed is a node's search index and what keeps it current. Its methods are safe for concurrent
// use.
type Feed struct {
	cfg   Config
	nc    *nats.Conn
	store Store
	index *search.Index
	log   zerolog.Logger

	events chan *nats.Msg
	subs   []*nats.Subscription
	// behind carries conversations the sweep found behind the store to the writer.
	behind chan string
	// sweepNow asks the sweeper for a sweep (after a reconnect or a dropped event).
	sweepNow chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup

	// The writer's own state: no lock.
	progress map[string]search.Progress
	late     map[string]bool // conversations to read from the store before the next batch
	dropped  int             // events NATS dropped, as last seen
}

// forgetEvent asks every node to remove a deleted account's messages from its index.
type forgetEvent struct {
	UserID        string   `json:"userId"`
	Conversations []string `json:"conversations,omitempty"`
}

// Start opens (or creates) the index in cfg.Dir, rebuilding it when an older version built it,
// subscribes to every conversation's messages and changes, and starts the writer and the sweeper.
func Start(cfg Config, nc *nats.Conn, store Store, log zerolog.Logger) (*Feed, error) {
	if cfg.Dir == "" {
		return nil, errors.New("indexing: Dir is required")
	}
	cfg = cfg.withDefaults()
	index, err := search.Open(search.Config{Dir: cfg.Dir})
	if errors.Is(err, search.ErrIncompatible) {
		log.Warn().Str("dir", cfg.Dir).Msg("search index built by another version: rebuilding it from the store")
		if err = os.RemoveAll(cfg.Dir); err == nil {
			index, err = search.Open(search.Config{Dir: cfg.Dir})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open search index: %w", err)
	}
	f := &Feed{cfg: cfg, nc: nc, store: store, index: index, log: log.With().Str("component", "indexing").Logger(),
		events: make(chan *nats.Msg, cfg.Buffer), behind: make(chan string, sweepPage), sweepNow: make(chan struct{}, 1),
		stop: make(chan struct{}), progress: make(map[string]search.Progress), late: make(map[string]bool)}
	for _, subject := range []string{
		sequencer.MessageSubject(cfg.SubjectPrefix, "*"),
		sequencer.ChangeSubject(cfg.SubjectPrefix, "*"),
		f.forgetSubject(),
	} {
		sub, err := nc.ChanSubscribe(subject, f.events)
		if err != nil {
			f.unsubscribe()
			_ = index.Close()
			return nil, fmt.Errorf("subscribe %s: %w", subject, err)
		}
		f.subs = append(f.subs, sub)
	}
	f.wg.Add(2)
	go f.write()
	go f.sweep()
	return f, nil
}

func (f *Feed) forgetSubject() string { return f.cfg.SubjectPrefix + ".search.forget" }

// Close stops the feed and closes the index; what was not written yet is read from the store
// after the next start.
func (f *Feed) Close() error {
	f.unsubscribe()
	close(f.stop)
	f.wg.Wait()
	return f.index.Close()
}

func (f *Feed) unsubscribe() {
	for _, sub := range f.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			f.log.Warn().Err(err).Str("subject", sub.Subject).Msg("unsubscribe")
		}
	}
}

// Reconnected makes the feed compare its index with the store: events published while NATS was
// away never reached it.
func (f *Feed) Reconnected() {
	select {
	case f.sweepNow <- struct{}{}:
	default: // a sweep is already due
	}
}

// Search answers one search from this node's index.
func (f *Feed) Search(ctx context.Context, q search.Query) (search.Page, error) {
	return f.index.Search(ctx, q)
}

// Progress returns how far the index has taken a conversation, as recorded with its last
// batch: every message up to Progress.Seq is searchable.
func (f *Feed) Progress(conversationID string) (search.Progress, error) {
	return f.index.Progress(conversationID)
}

// ForgetAccount removes a deleted account's messages, and the conversations deleted with it,
// from every node's index (this node's included, through NATS like the others).
func (f *Feed) ForgetAccount(userID string, conversations []string) error {
	data, err := json.Marshal(forgetEvent{UserID: userID, Conversations: conversations})
	if err != nil {
		return fmt.Errorf("encode search forget event: %w", err)
	}
	if err := f.nc.Publish(f.forgetSubject(), data); err != nil {
		return fmt.Errorf("publish search forget event: %w", err)
	}
	return nil
}

// write is the index's one writer: it takes whatever events wait as one batch, then catches up
// the conversations found behind.
func (f *Feed) write() {
	defer f.wg.Done()
	for {
		select {
		case m := <-f.events:
			f.apply(f.collect(m))
		case id := <-f.behind:
			f.late[id] = true
		case <-f.stop:
			return
		}
		f.noticeDrops()
		for id := range f.late {
			delete(f.late, id)
			f.catchUp(id)
		}
	}
}

// collect takes first and what else arrives within BatchWindow of it, up to MaxBatch; a stop
// ends the gathering at once.
func (f *Feed) collect(first *nats.Msg) []*nats.Msg {
	batch := []*nats.Msg{first}
	window := time.NewTimer(f.cfg.BatchWindow)
	defer window.Stop()
	for len(batch) < f.cfg.MaxBatch {
		select {
		case m := <-f.events:
			batch = append(batch, m)
		case <-window.C:
			return batch
		case <-f.stop:
			return batch
		}
	}
	return batch
}

// noticeDrops asks for a sweep when NATS dropped events for a slow writer since last time.
func (f *Feed) noticeDrops() {
	dropped := 0
	for _, sub := range f.subs {
		if n, err := sub.Dropped(); err == nil {
			dropped += n
		}
	}
	if dropped != f.dropped {
		f.dropped = dropped
		f.log.Warn().Int("dropped", dropped).Msg("search feed fell behind; reading the missed events from the store")
		f.Reconnected()
	}
}

// apply indexes one batch of events with one index write.
func (f *Feed) apply(events []*nats.Msg) {
	b := f.index.NewBatch()
	touched := make(map[string]bool)
	for _, m := range events {
		switch {
		case m.Subject == f.forgetSubject():
			f.cfg.Metrics.took(kindForget)
			f.forget(m.Data)
		case len(m.Subject) > 4 && m.Subject[len(m.Subject)-4:] == ".msg":
			f.cfg.Metrics.took(kindMessage)
			f.takeMessage(b, m.Data, touched)
		default:
			f.cfg.Metrics.took(kindChange)
			f.takeChange(b, m.Data, touched)
		}
	}
	for id := range touched {
		b.SetProgress(id, f.progress[id])
	}
	if b.Len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	defer f.cfg.Metrics.wrote(time.Now())
	if err := f.index.Apply(ctx, b); err != nil {
		f.log.Error().Err(err).Int("events", len(events)).Msg("index a batch; its conversations are read from the store")
		for id := range touched {
			delete(f.progress, id) // read again from the index, which has not moved
			f.late[id] = true
		}
	}
}

// takeMessage adds a published message to the batch when it is the next of its conversation;
// one further on means some were missed, and the store has them.
func (f *Feed) takeMessage(b *search.Batch, data []byte, touched map[string]bool) {
	var m protocol.Message
	if err := json.Unmarshal(data, &m); err != nil || m.ConversationID == "" {
		f.log.Error().Err(err).Msg("undecodable message event")
		return
	}
	p, ok := f.progressOf(m.ConversationID)
	switch {
	case !ok || m.Seq <= p.Seq:
		return
	case m.Seq > p.Seq+1:
		f.late[m.ConversationID] = true
		return
	}
	if err := f.take(b, storage.Message{ConversationID: m.ConversationID, Seq: m.Seq, SenderID: m.SenderID,
		Kind: m.Kind, Body: m.Body, CreatedAt: m.CreatedAt}); err != nil {
		f.late[m.ConversationID] = true
		return
	}
	p.Seq = m.Seq
	f.progress[m.ConversationID], touched[m.ConversationID] = p, true
}

// takeChange adds a published change to the batch when it is the next of its conversation: an
// edit replaces the message's text, a deletion removes it, a reaction only moves the progress.
// A change after a gap, or of a message not indexed yet, is read from the store instead.
func (f *Feed) takeChange(b *search.Batch, data []byte, touched map[string]bool) {
	var c sequencer.Change
	if err := json.Unmarshal(data, &c); err != nil || c.ConversationID == "" {
		f.log.Error().Err(err).Msg("undecodable change event")
		return
	}
	p, ok := f.progressOf(c.ConversationID)
	switch {
	case !ok || c.Version <= p.Version:
		return
	case c.Version > p.Version+1 || c.Seq > p.Seq || (c.CreatedAt.IsZero() && (c.Op == message.OpEdit || c.Op == message.OpDelete)):
		f.late[c.ConversationID] = true
		return
	}
	m := storage.Message{ConversationID: c.ConversationID, Seq: c.Seq, SenderID: c.UserID, CreatedAt: c.CreatedAt}
	var err error
	switch c.Op {
	case message.OpEdit:
		m.Kind, m.Body = protocol.KindText, c.Body
		err = f.take(b, m)
	case message.OpDelete:
		m.Kind = protocol.KindDeleted
		err = f.take(b, m)
	}
	if err != nil {
		f.late[c.ConversationID] = true
		return
	}
	p.Version = c.Version
	f.progress[c.ConversationID], touched[c.ConversationID] = p, true
}

// take adds a message as it is now to the batch: a text message indexed, a tombstone removed, a
// system message (words of the server, not of a member) left out.
func (f *Feed) take(b *search.Batch, m storage.Message) error {
	doc := search.Message{ConversationID: m.ConversationID, Seq: m.Seq, SenderID: m.SenderID, CreatedAt: m.CreatedAt, Body: m.Body}
	switch m.Kind {
	case protocol.KindText:
		return b.Put(doc)
	case protocol.KindDeleted:
		b.Delete(doc)
	}
	return nil
}

// progressOf returns how far the index has taken a conversation, from memory or the index; false
// when the index cannot say (the conversation is then caught up from the store).
func (f *Feed) progressOf(id string) (search.Progress, bool) {
	if p, ok := f.progress[id]; ok {
		return p, true
	}
	p, err := f.index.Progress(id)
	if err != nil {
		f.log.Error().Err(err).Str("conversation", id).Msg("read search progress")
		f.late[id] = true
		return p, false
	}
	if len(f.progress) >= maxCachedProgress {
		for evict := range f.progress {
			delete(f.progress, evict)
			break
		}
	}
	f.progress[id] = p
	return p, true
}

// forget removes a deleted account's messages and deleted conversations from the index.
func (f *Feed) forget(data []byte) {
	var ev forgetEvent
	if err := json.Unmarshal(data, &ev); err != nil || ev.UserID == "" {
		f.log.Error().Err(err).Msg("undecodable search forget event")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	if _, err := f.index.DeleteSender(ctx, ev.UserID); err != nil {
		f.log.Error().Err(err).Str("user", ev.UserID).Msg("remove a deleted account's messages from the search index")
	}
	for _, id := range ev.Conversations {
		if _, err := f.index.DeleteConversation(ctx, id); err != nil {
			f.log.Error().Err(err).Str("conversation", id).Msg("remove a deleted conversation from the search index")
		}
	}
}

// catchUp reads from the store what the index misses of a conversation: its messages after the
// progress's seq and the messages changed after its version, as they are now, and records the
// counters it read first as the new progress (everything up to them is in what it read). A long
// run of messages is written in parts of applyEvery, each with the progress it makes. A
// conversation that no longer exists leaves the index. Each store read is paced (read).
func (f *Feed) catchUp(id string) {
	f.cfg.Metrics.caughtUp()
	p, ok := f.progressOf(id)
	if !ok {
		delete(f.late, id) // the index cannot be read: the next sweep tries again
		return
	}
	var conv storage.Conversation
	err := f.read(func(ctx context.Context) (err error) {
		conv, err = f.store.Conversation(ctx, id)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
		defer cancel()
		if _, err := f.index.DeleteConversation(ctx, id); err != nil {
			f.log.Error().Err(err).Str("conversation", id).Msg("remove a deleted conversation from the search index")
		}
		return
	}
	b := f.index.NewBatch()
	changedUpTo := p.Seq // the messages after it are read as they are now, changes and all
	if err == nil {
		b, p, err = f.readMessages(b, id, p, conv.LastSeq)
	}
	if err == nil && conv.LastVersion > p.Version {
		err = f.readChanges(b, id, p.Version, changedUpTo)
	}
	next := search.Progress{Seq: max(p.Seq, conv.LastSeq), Version: max(p.Version, conv.LastVersion)}
	if err == nil {
		err = f.applyCaughtUp(b, id, next)
	}
	if err != nil && !errors.Is(err, errStopping) {
		// Left for the next sweep: a store that fails now is not asked again in a loop.
		f.log.Warn().Err(err).Str("conversation", id).Msg("catch up the search index from the store")
	}
}

// read runs one store read of the sweep or a catch-up with its own timeout, then rests
// storeShare-1 times as long as it took, so that they take at most 1/storeShare of the store's
// time; errStopping when the feed stops meanwhile.
func (f *Feed) read(call func(ctx context.Context) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	err := call(ctx)
	cancel()
	rest := time.NewTimer(time.Since(start) * (storeShare - 1))
	defer rest.Stop()
	select {
	case <-rest.C:
		return err
	case <-f.stop:
		return errStopping
	}
}

// errStopping ends a catch-up when the feed stops.
var errStopping = errors.New("the search feed is stopping")

// applyCaughtUp writes a catch-up's batch to the index with the progress it makes.
func (f *Feed) applyCaughtUp(b *search.Batch, id string, p search.Progress) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	b.SetProgress(id, p)
	start := time.Now()
	err := f.index.Apply(ctx, b)
	f.cfg.Metrics.wrote(start)
	if err == nil {
		f.progress[id] = p
	}
	return err
}

// readMessages takes a conversation's messages after p.Seq up to to into b, writing every
// applyEvery of them with the progress they make (their seqs; p.Version until the changes are
// read). It returns the batch still to write and the progress written so far.
func (f *Feed) readMessages(b *search.Batch, id string, p search.Progress, to int64) (*search.Batch, search.Progress, error) {
	taken := 0
	for from := p.Seq + 1; from <= to; from += readPage {
		var msgs []storage.Message
		err := f.read(func(ctx context.Context) (err error) {
			msgs, err = f.store.MessageRange(ctx, id, from, min(to, from+readPage-1))
			return err
		})
		if err != nil {
			return b, p, err
		}
		for _, m := range msgs {
			if err := f.take(b, m); err != nil {
				return b, p, err
			}
		}
		if taken += len(msgs); taken >= applyEvery && from+readPage-1 < to {
			part := search.Progress{Seq: from + readPage - 1, Version: p.Version}
			if err := f.applyCaughtUp(b, id, part); err != nil {
				return b, p, err
			}
			b, p, taken = f.index.NewBatch(), part, 0
		}
	}
	return b, p, nil
}

func (f *Feed) readChanges(b *search.Batch, id string, after, maxSeq int64) error {
	for {
		var msgs []storage.Message
		err := f.read(func(ctx context.Context) (err error) {
			msgs, err = f.store.ChangedMessages(ctx, id, after, maxSeq, readPage)
			return err
		})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := f.take(b, m); err != nil {
				return err
			}
			after = max(after, m.Version)
		}
		if len(msgs) < readPage {
			return nil
		}
	}
}

// sweep compares the index with the store's counters at start, when asked and every
// SweepInterval, and hands the conversations behind to the writer. It reads the index's
// recorded progress, which may trail the writer's by a batch: a conversation it reports for
// nothing costs the writer one read of its counters.
func (f *Feed) sweep() {
	defer f.wg.Done()
	ticker := time.NewTicker(f.cfg.SweepInterval)
	defer ticker.Stop()
	for {
		if err := f.compare(); err != nil {
			f.log.Warn().Err(err).Msg("compare the search index with the store")
		}
		select {
		case <-ticker.C:
		case <-f.sweepNow:
		case <-f.stop:
			return
		}
	}
}

// compare walks every conversation of the store, a page of ids at a time.
func (f *Feed) compare() error {
	after := ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
		ids, err := f.store.ConversationIDsAfter(ctx, after, sweepPage)
		cancel()
		if err != nil {
			return err
		}
		for _, id := range ids {
			behind, err := f.isBehind(id)
			if err != nil {
				return nil // stopping
			}
			if behind {
				select {
				case f.behind <- id:
				case <-f.stop:
					return nil
				}
			}
		}
		if len(ids) < sweepPage {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// isBehind reports whether the index is behind the store's counters of a conversation (or
// cannot say); an error only when the feed stops.
func (f *Feed) isBehind(id string) (bool, error) {
	var conv storage.Conversation
	err := f.read(func(ctx context.Context) (err error) {
		conv, err = f.store.Conversation(ctx, id)
		return err
	})
	switch {
	case errors.Is(err, errStopping):
		return false, err
	case err != nil:
		return !errors.Is(err, storage.ErrNotFound), nil
	}
	p, err := f.index.Progress(id)
	return err != nil || conv.LastSeq > p.Seq || conv.LastVersion > p.Version, nil
}
