package chat

import (
	"cmp"
	"errors"
	"time"

	"github.com/chatd/chatd/hub"
)

// Defaults, each with its reason.
const (
	// DefaultSendTimeout bounds a send from frame to ack, retries included; past it the client
	// gets a retryable error and resends with the same clientMsgId.
	DefaultSendTimeout = 10 * time.Second
	// DefaultOpTimeout bounds the store work of one request.
	DefaultOpTimeout = 10 * time.Second
	// DefaultSyncLimit bounds the messages replayed per conversation on reconnect; a client further
	// behind pages the rest with history requests.
	DefaultSyncLimit = 200
	// DefaultLiveReceiptsMaxMembers is the largest group whose read receipts are pushed live; in
	// larger groups every cursor move would fan out to every member.
	DefaultLiveReceiptsMaxMembers = 32
	// DefaultMaxConnectionsPerUser bounds one user's sockets on one node: phones, laptops and tabs,
	// but not a script opening thousands.
	DefaultMaxConnectionsPerUser = 16
	// DefaultTypingInterval is how often one user's typing in one conversation fans out: clients
	// show "typing" for a few seconds after each event, so more often says nothing new.
	DefaultTypingInterval = 3 * time.Second
	// DefaultMaxConcurrentSyncReads bounds the store reads that (re)connecting sessions run at once
	// on one node: loading a user's state on Open and a sync's catch-up. When a node dies its
	// clients reconnect to the others within a second; unbounded, hundreds of catch-ups would
	// flood the store, and the owners' writes and other users' history and sends would wait
	// behind them. Sixteen reads already keep a store busy (more would only queue inside it), and
	// leave most of the store client's pool (mongo-driver's default maxPoolSize is 100) to
	// everything else. Reconnecting sessions queue for a slot instead.
	DefaultMaxConcurrentSyncReads = 16
	// presenceBatch bounds the presence changes written in one batch (see recordPresences): a
	// batch costs the store three round trips whatever its size, so a reconnect storm of 5,000
	// users is recorded in about 80 batches instead of 10,000 round trips. Not more, because the
	// batch shares one OpTimeout and the embedded store commits each upsert on its own: a batch
	// of 256 came within a machine's hiccup of the timeout there (docs/BENCHMARKS.md, "Presence
	// records during 5,000 connects").
	presenceBatch = 64
	// presenceRetryPause is how long the presence writer waits after the store failed a batch
	// before it writes the batch again, so a store that refuses at once is not asked in a loop.
	presenceRetryPause = time.Second
)

// Config tunes a Service. Zero fields take the defaults above.
type Config struct {
	SendTimeout            time.Duration
	OpTimeout              time.Duration
	SyncLimit              int
	LiveReceiptsMaxMembers int
	MaxConnectionsPerUser  int
	TypingInterval         time.Duration
	// MaxConcurrentSyncReads bounds the store reads of connecting and syncing sessions running at
	// once on the node (see DefaultMaxConcurrentSyncReads); history, sends and the rest are not
	// counted.
	MaxConcurrentSyncReads int
	// NodeID names this node where presence records which nodes hold a user's connections.
	NodeID string
	// Nodes tells which other nodes live, so connections on a dead node do not count as online;
	// nil counts this node only (a single node).
	Nodes Nodes
	// Search answers searches and forgets deleted accounts' messages (see search.go); nil turns
	// search off (refused as unavailable).
	Search Searcher
	// Metrics, if set, records sends, history pages and resyncs; nil records nothing.
	Metrics *Metrics
	// Hub tunes the hub of the node's live connections that the service keeps (see hub.Config).
	Hub hub.Config
	// Files deletes a deleted account's files (files.go); nil: there are none.
	Files AccountFiles
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		SendTimeout:            DefaultSendTimeout,
		OpTimeout:              DefaultOpTimeout,
		SyncLimit:              DefaultSyncLimit,
		LiveReceiptsMaxMembers: DefaultLiveReceiptsMaxMembers,
		MaxConnectionsPerUser:  DefaultMaxConnectionsPerUser,
		TypingInterval:         DefaultTypingInterval,
		MaxConcurrentSyncReads: DefaultMaxConcurrentSyncReads,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.SendTimeout = cmp.Or(c.SendTimeout, d.SendTimeout)
	c.OpTimeout = cmp.Or(c.OpTimeout, d.OpTimeout)
	c.SyncLimit = cmp.Or(c.SyncLimit, d.SyncLimit)
	c.LiveReceiptsMaxMembers = cmp.Or(c.LiveReceiptsMaxMembers, d.LiveReceiptsMaxMembers)
	c.MaxConnectionsPerUser = cmp.Or(c.MaxConnectionsPerUser, d.MaxConnectionsPerUser)
	c.TypingInterval = cmp.Or(c.TypingInterval, d.TypingInterval)
	c.MaxConcurrentSyncReads = cmp.Or(c.MaxConcurrentSyncReads, d.MaxConcurrentSyncReads)
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.SendTimeout < 0 || c.OpTimeout < 0 || c.SyncLimit < 0 || c.LiveReceiptsMaxMembers < 0 ||
		c.MaxConnectionsPerUser < 0 || c.TypingInterval < 0 || c.MaxConcurrentSyncReads < 0 {
		return errors.New("chat: limits and timeouts must not be negative")
	}
	return nil
}
