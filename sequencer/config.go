package sequencer

import (
	"errors"
	"time"
)

// Defaults, each with the reason it is what it is.
const (
	// DefaultPartitions spreads conversations over enough single writers that a few busy
	// conversations rarely share one, while each node still owns only a handful of subscriptions.
	DefaultPartitions = 64
	// DefaultSubjectPrefix starts every NATS subject the chat server uses.
	DefaultSubjectPrefix = "chat"
	// DefaultAttemptTimeout bounds one request to a partition owner; a flush to a healthy store
	// takes milliseconds, so a second means the request was lost (with a NATS server that went
	// away, or an owner that died) or the store is down. Retrying is safe (the clientMsgId), and
	// this is most of what a send waits when a NATS server is lost.
	DefaultAttemptTimeout = time.Second
	// DefaultMaxBatch bounds one group commit: one insertMany of at most this many messages.
	DefaultMaxBatch = 512
	// DefaultQueueSize bounds the sends waiting on one partition; past it a send is refused as
	// retryable instead of growing memory without limit. Two full batches: more waiting means
	// the store is not keeping up.
	DefaultQueueSize = 1024
	// DefaultRecentIDs is how many clientMsgIds each partition remembers to answer a retry without a
	// store lookup; older retries are still caught by the unique index.
	DefaultRecentIDs = 65536
	// DefaultFlushTimeout bounds one group commit's store round trips.
	DefaultFlushTimeout = 5 * time.Second
)

// Config tunes a Sequencer. Zero fields take the defaults above.
type Config struct {
	// Partitions is the number of single-writer partitions conversations are hashed onto. Every
	// node of a cluster must use the same number.
	Partitions int
	// SubjectPrefix starts the NATS subjects: <prefix>.seq.<partition> and <prefix>.conv.<conversation>.msg.
	SubjectPrefix string
	// AttemptTimeout bounds one request to the owner; Send retries until its context ends.
	AttemptTimeout time.Duration
	// MaxBatch bounds the messages in one group commit.
	MaxBatch int
	// QueueSize bounds the sends waiting on one owned partition.
	QueueSize int
	// RecentIDs is how many clientMsgIds each owned partition remembers.
	RecentIDs int
	// FlushTimeout bounds one group commit.
	FlushTimeout time.Duration
	// Metrics records the sequencer's instruments, and those of the Leases started with it; nil
	// records nothing.
	Metrics *Metrics
	// Observer, if set, hears every stored message and change on its owner (Web Push, webhooks).
	Observer Observer
	// Files attaches uploads to sends and removes a deleted message's files (files.go); nil
	// refuses every send with attachments.
	Files Files
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Partitions:     DefaultPartitions,
		SubjectPrefix:  DefaultSubjectPrefix,
		AttemptTimeout: DefaultAttemptTimeout,
		MaxBatch:       DefaultMaxBatch,
		QueueSize:      DefaultQueueSize,
		RecentIDs:      DefaultRecentIDs,
		FlushTimeout:   DefaultFlushTimeout,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = d.SubjectPrefix
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = d.AttemptTimeout
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.QueueSize == 0 {
		c.QueueSize = d.QueueSize
	}
	if c.RecentIDs == 0 {
		c.RecentIDs = d.RecentIDs
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = d.FlushTimeout
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Partitions < 1 || c.Partitions > 65536:
		return errors.New("sequencer: partitions must be between 1 and 65536")
	case c.MaxBatch < 1:
		return errors.New("sequencer: max batch must be positive")
	case c.QueueSize < 1:
		return errors.New("sequencer: queue size must be positive")
	case c.AttemptTimeout < 0 || c.FlushTimeout < 0:
		return errors.New("sequencer: timeouts must be positive")
	}
	return nil
}
