package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// `chatbench seed` writes a data set straight into the store through package storage, the way a
// node would have stored it, so the store-bound measurements (connect with conversations, history
// depth) start from a million messages in minutes rather than from hours of WebSocket sends. The
// users are the ones chatbench signs in with the same -prefix (<prefix><n>), so a seeded store is
// then measured with `chatbench -prefix <prefix>`.

// Seeding defaults, each with its reason.
const (
	// seedBatch is the most messages in one InsertMessages call: the node's own batches are
	// smaller, and insertMany of 1,000 costs the embedded store 15x less per message than one
	// at a time (NOTES.md).
	seedBatch = 1000
	// defaultSeedConcurrency is the store calls in flight at once: the embedded store serializes
	// writes, so more only queue, and its pool deadlocks under many concurrent updates.
	defaultSeedConcurrency = 4
	// defaultSeedTimeout bounds one store call; an insertMany of 1,000 into a million-message
	// collection takes well under a second, a findAndModify that scans takes seconds.
	defaultSeedTimeout = 2 * time.Minute
	// defaultSeedPrefix names the seeded users seed0, seed1...
	defaultSeedPrefix = "seed"
	// seedAge is how far back the seeded conversations start, so seeded messages are older than
	// anything a measurement sends.
	seedAge = 30 * 24 * time.Hour
)

// seedNamespace makes the seeded groups' ids, so a data set's ids follow from its flags alone
// (`chatbench page` finds the big conversation by -prefix).
var seedNamespace = uuid.MustParse("3f0c9a52-7a1e-4d8e-b0a4-5d3c2f6e8b71")

// seedConfig is what `chatbench seed` writes, and where.
type seedConfig struct {
	MongoURI    string
	Database    string
	Prefix      string
	Users       int
	PerUser     int // conversations each user is in
	DMs         int // of those, DMs (the rest are groups)
	GroupSize   int
	Messages    int // spread over the users' conversations
	Big         int // in one more conversation, of users 0 and 1
	Concurrency int
	Timeout     time.Duration
}

func parseSeedFlags(args []string, getenv func(string) string, stderr io.Writer) (seedConfig, error) {
	cfg := seedConfig{}
	fs := flag.NewFlagSet("chatbench seed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: chatbench seed [flags]

Writes users, conversations and messages straight into the store (package storage), as chat nodes
would have stored them: -users users named <prefix><n>, each in -conversations conversations
(-dms of them DMs with their neighbours n±1, n±2..., the rest groups of -group-size), -messages
spread evenly over those conversations, and -big messages in one more group of <prefix>0 and
<prefix>1 (its id is printed; "chatbench page" finds it by -prefix). It refuses a store that
already holds <prefix>0: seed a fresh data directory.

Flags:
`)
		fs.PrintDefaults()
	}
	storeFlags(fs, getenv, &cfg.MongoURI, &cfg.Database, "; for the embedded store add ?maxPoolSize=8")
	fs.StringVar(&cfg.Prefix, "prefix", defaultSeedPrefix, "user names are <prefix><n>, as chatbench -prefix signs them in")
	fs.IntVar(&cfg.Users, "users", 5000, "users")
	fs.IntVar(&cfg.PerUser, "conversations", 20, "conversations each user is in")
	fs.IntVar(&cfg.DMs, "dms", 10, "of each user's conversations, how many are DMs (even; the rest are groups)")
	fs.IntVar(&cfg.GroupSize, "group-size", 10, "members per group; must divide -users")
	fs.IntVar(&cfg.Messages, "messages", 100000, "messages spread evenly over the users' conversations")
	fs.IntVar(&cfg.Big, "big", 1000000, "messages in the big conversation (0: none)")
	fs.IntVar(&cfg.Concurrency, "concurrency", defaultSeedConcurrency, "store calls in flight at once")
	fs.DurationVar(&cfg.Timeout, "timeout", defaultSeedTimeout, "bound on one store call")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.validate()
}

// validate reports a data set that cannot be laid out as asked.
func (c seedConfig) validate() error {
	groups := c.PerUser - c.DMs
	switch {
	case c.MongoURI == "":
		return errors.New("-mongo-uri (or CHAT_MONGO_URI) is required")
	case c.Users < 2:
		return errors.New("-users must be at least 2")
	case c.PerUser < 0 || c.DMs < 0 || c.DMs > c.PerUser:
		return errors.New("-dms must be between 0 and -conversations")
	case c.DMs%2 != 0:
		return errors.New("-dms must be even: each user's DMs are with the neighbours on either side")
	case c.DMs >= c.Users:
		return errors.New("-dms must be below -users, or two users would share a DM twice")
	case groups > 0 && (c.GroupSize < 2 || c.Users%c.GroupSize != 0):
		return errors.New("-group-size must be at least 2 and divide -users")
	case c.Messages < 0 || c.Big < 0:
		return errors.New("-messages and -big must not be negative")
	case c.Messages > 0 && c.PerUser == 0:
		return errors.New("-messages needs conversations to spread them over")
	case c.Concurrency < 1:
		return errors.New("-concurrency must be at least 1")
	}
	return nil
}

// seedConv is one conversation of the data set and how many messages it gets.
type seedConv struct {
	conv     storage.Conversation
	messages int64
}

// seedPlan is the whole data set: users first (seedPlan.users[0] marks a seeded store), then
// conversations, the big one last.
type seedPlan struct {
	users []storage.User
	convs []*seedConv
}

// seedUserID is the account dev-mode sign-in makes of <prefix><i>, so chatbench's users are
// the seeded ones.
func seedUserID(prefix string, i int) (id, name string, err error) {
	id, name, err = auth.UserIDFromName(prefix + strconv.Itoa(i))
	if err != nil {
		return "", "", fmt.Errorf("user name %s%d: %w", prefix, i, err)
	}
	return id, name, nil
}

// bigConversationID is the big conversation of the data set of prefix.
func bigConversationID(prefix string) string {
	return uuid.NewSHA1(seedNamespace, []byte(prefix+" big")).String()
}

// planSeed lays out the data set. Every user is in exactly PerUser conversations (users 0 and 1
// in the big one too): DMs with the neighbours d = 1..DMs/2 away on either side of a ring, and in
// each of the remaining rounds one group of a fresh shuffle of everyone. The layout depends only
// on the flags.
func planSeed(cfg seedConfig, now time.Time) (seedPlan, error) {
	var p seedPlan
	ids := make([]string, cfg.Users)
	for i := range cfg.Users {
		id, name, err := seedUserID(cfg.Prefix, i)
		if err != nil {
			return p, err
		}
		ids[i] = id
		p.users = append(p.users, storage.User{ID: id, Name: name, CreatedAt: now.Add(-seedAge)})
	}
	created := now.Add(-seedAge)
	for d := 1; d <= cfg.DMs/2; d++ {
		for u := range cfg.Users {
			members := []string{ids[u], ids[(u+d)%cfg.Users]}
			slices.Sort(members)
			p.convs = append(p.convs, &seedConv{conv: storage.Conversation{ID: chat.DMID(members[0], members[1]),
				Kind: storage.KindDM, Members: members, CreatedBy: ids[u], CreatedAt: created}})
		}
	}
	for r := range cfg.PerUser - cfg.DMs {
		order := rand.New(rand.NewPCG(uint64(r), 0x5eed)).Perm(cfg.Users)
		for g := range cfg.Users / cfg.GroupSize {
			members := make([]string, cfg.GroupSize)
			for j := range members {
				members[j] = ids[order[g*cfg.GroupSize+j]]
			}
			key := fmt.Sprintf("%s group %d/%d", cfg.Prefix, r, g)
			p.convs = append(p.convs, &seedConv{conv: storage.Conversation{ID: uuid.NewSHA1(seedNamespace, []byte(key)).String(),
				Kind: storage.KindGroup, Name: fmt.Sprintf("seed %d/%d", r, g), Members: members, CreatedBy: members[0], CreatedAt: created}})
		}
	}
	for i, c := range p.convs {
		c.messages = int64(cfg.Messages / len(p.convs))
		if i < cfg.Messages%len(p.convs) {
			c.messages++
		}
	}
	if cfg.Big > 0 {
		p.convs = append(p.convs, &seedConv{messages: int64(cfg.Big), conv: storage.Conversation{ID: bigConversationID(cfg.Prefix),
			Kind: storage.KindGroup, Name: "big", Members: []string{ids[0], ids[1]}, CreatedBy: ids[0], CreatedAt: created}})
	}
	return p, nil
}

// message is seq of c as a member would have sent it: the members take turns.
func (c *seedConv) message(seq int64) storage.Message {
	return storage.Message{
		ConversationID: c.conv.ID,
		Seq:            seq,
		SenderID:       c.conv.Members[(seq-1)%int64(len(c.conv.Members))],
		Kind:           protocol.KindText,
		Body:           "seeded message " + strconv.FormatInt(seq, 10) + ": see you at the station at seven",
		CreatedAt:      c.conv.CreatedAt.Add(time.Duration(seq) * time.Millisecond),
		ClientMsgID:    "seed-" + strconv.FormatInt(seq, 10),
	}
}

// seedBatches hands fn the messages of convs in batches of about size (a full one ends where a
// bucket of its conversation begins, so no bucket is split), each conversation's in
// seq order and the conversations one after another, with the counters that make each one's
// lastSeq, preview and senders right once the batch is stored (as the owner's AdvanceCounters
// after its insert).
func seedBatches(convs []*seedConv, size int, fn func([]storage.Message, map[string]storage.Counters) error) error {
	batch := make([]storage.Message, 0, size)
	counters := map[string]storage.Counters{}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := fn(batch, counters)
		batch, counters = make([]storage.Message, 0, size), map[string]storage.Counters{}
		return err
	}
	for _, c := range convs {
		for seq := int64(1); seq <= c.messages; seq++ {
			// A full batch ends where a bucket begins, so each bucket is stored whole by one
			// insert, which seals it, as the owner seals a bucket its batches filled.
			if len(batch) >= size && seq%storage.BucketSize == 1 {
				if err := flush(); err != nil {
					return err
				}
			}
			m := c.message(seq)
			batch = append(batch, m)
			k := counters[c.conv.ID]
			if k.Senders == nil {
				k.Senders = map[string]int64{}
			}
			k.LastSeq = seq
			k.Newest = &storage.MessagePreview{Seq: seq, SenderID: m.SenderID, Kind: m.Kind, Body: m.Body, CreatedAt: m.CreatedAt}
			k.Senders[m.SenderID] = seq
			counters[c.conv.ID] = k
		}
	}
	return flush()
}

// assignWriters gives each conversation to one of n writers, so one conversation's batches are
// stored in order, balancing the messages: the biggest first, each to the least loaded writer.
func assignWriters(convs []*seedConv, n int) [][]*seedConv {
	order := slices.Clone(convs)
	slices.SortStableFunc(order, func(a, b *seedConv) int { return int(b.messages - a.messages) })
	writers := make([][]*seedConv, n)
	load := make([]int64, n)
	for _, c := range order {
		w := slices.Index(load, slices.Min(load))
		writers[w] = append(writers[w], c)
		load[w] += c.messages
	}
	return writers
}

// runSeed writes the data set of cfg into the store.
func runSeed(ctx context.Context, cfg seedConfig, log io.Writer) error {
	start := time.Now()
	plan, err := planSeed(cfg, start.UTC())
	if err != nil {
		return err
	}
	store, err := storage.Open(ctx, storage.Config{URI: cfg.MongoURI, Database: cfg.Database, OperationTimeout: cfg.Timeout})
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer store.Close(context.WithoutCancel(ctx))
	call := func(f func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		return f(cctx)
	}

	// Users are written first, so the first of them marks a store seeded, if only in part.
	first := plan.users[0].ID
	err = call(func(ctx context.Context) error { _, err := store.User(ctx, first); return err })
	switch {
	case err == nil:
		return fmt.Errorf("the store already holds user %s: it is seeded (perhaps in part) with -prefix %s; seed a fresh data directory, or another -prefix", first, cfg.Prefix)
	case !errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("look for user %s: %w", first, err)
	}

	var users atomic.Int64
	stop := reportProgress(log, "users", int64(len(plan.users)), &users, start)
	err = seedEach(ctx, len(plan.users), cfg.Concurrency, func(i int) error {
		err := call(func(ctx context.Context) error { _, err := store.EnsureUser(ctx, plan.users[i]); return err })
		users.Add(1)
		return err
	})
	stop()
	if err != nil {
		return fmt.Errorf("seed users: %w", err)
	}
	var convs atomic.Int64
	stop = reportProgress(log, "conversations", int64(len(plan.convs)), &convs, start)
	err = seedEach(ctx, len(plan.convs), cfg.Concurrency, func(i int) error {
		err := call(func(ctx context.Context) error {
			_, err := store.EnsureConversation(ctx, plan.convs[i].conv)
			return err
		})
		convs.Add(1)
		return err
	})
	stop()
	if err != nil {
		return fmt.Errorf("seed conversations: %w", err)
	}

	var total int64
	for _, c := range plan.convs {
		total += c.messages
	}
	var stored atomic.Int64
	stop = reportProgress(log, "messages", total, &stored, start)
	writers := assignWriters(plan.convs, cfg.Concurrency)
	err = seedEach(ctx, len(writers), len(writers), func(w int) error {
		return seedBatches(writers[w], seedBatch, func(msgs []storage.Message, counters map[string]storage.Counters) error {
			if err := call(func(ctx context.Context) error { return store.InsertMessages(ctx, msgs) }); err != nil {
				return err
			}
			if err := call(func(ctx context.Context) error { return store.AdvanceCounters(ctx, counters) }); err != nil {
				return err
			}
			stored.Add(int64(len(msgs)))
			return nil
		})
	})
	stop()
	if err != nil {
		return fmt.Errorf("seed messages after %d of %d: %w", stored.Load(), total, err)
	}
	logf(log, "seeded %d users, %d conversations, %d messages in %s", len(plan.users), len(plan.convs), total,
		time.Since(start).Round(time.Second))
	if cfg.Big > 0 {
		logf(log, "the big conversation: %s, %d messages, members %s", bigConversationID(cfg.Prefix), cfg.Big,
			plan.convs[len(plan.convs)-1].conv.Members)
	}
	return nil
}

// seedProgressEvery is how often a seed phase logs how far it got: on the old layout the phases
// run for minutes.
const seedProgressEvery = 10 * time.Second

// reportProgress logs the phase's start and then, every seedProgressEvery, how much of total done
// holds, until stop is called.
func reportProgress(log io.Writer, what string, total int64, done *atomic.Int64, start time.Time) (stop func()) {
	logf(log, "seeding %d %s (%s)", total, what, time.Since(start).Round(time.Second))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(seedProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				logf(log, "%d of %d %s stored (%s)", done.Load(), total, what, time.Since(start).Round(time.Second))
			case <-quit:
				return
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// seedEach runs fn(i) for i in [0, n) on at most limit goroutines and returns the first error;
// after one, the remaining calls are skipped.
func seedEach(ctx context.Context, n, limit int, fn func(i int) error) error {
	var mu sync.Mutex
	var first error
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	parallel(n, limit, func(i int) {
		if failed() || ctx.Err() != nil {
			return
		}
		if err := fn(i); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	})
	if first != nil {
		return first
	}
	return ctx.Err()
}

// storeFlags adds -mongo-uri and -mongo-db, the store the seed and page commands talk to
// directly, defaulting to CHAT_MONGO_URI and CHAT_MONGO_DB; uriNote ends the URI's help.
func storeFlags(fs *flag.FlagSet, getenv func(string) string, uri, db *string, uriNote string) {
	fs.StringVar(uri, "mongo-uri", getenv("CHAT_MONGO_URI"), "MongoDB URI of the store (CHAT_MONGO_URI)"+uriNote)
	fs.StringVar(db, "mongo-db", cmp.Or(getenv("CHAT_MONGO_DB"), "chat"), "database (CHAT_MONGO_DB)")
}
