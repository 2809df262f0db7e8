// Package sequencer is the single writer of every conversation. Conversations are hashed onto
// partitions; each partition has one NATS subject and exactly one owning node at a time. The owner
// assigns a gapless seq (lastSeq+1), persists a whole batch of waiting sends with one insertMany,
// and only then acks the senders and publishes the messages for fan-out. Senders on any node reach
// the owner by request/reply on the partition's subject.
package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Send refuses with a *protocol.Error, whose kinds callers branch on with errors.Is:
// protocol.ErrNotMember (the conversation does not exist or the sender is not in it),
// protocol.ErrUnavailable (not acknowledged: the owner is moving, the store is down or the owner
// is overloaded; retrying with the same clientMsgId is safe), and for a change or a reply the
// owner's refusals with the reason the user is told (protocol.ErrNotFound: no message with that
// seq; protocol.ErrForbidden and protocol.ErrLimit from message.Apply).

// Store is what the sequencer needs from the database.
type Store interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	RecoverSeq(ctx context.Context, conversationID string) (int64, error)
	InsertMessages(ctx context.Context, msgs []storage.Message) error
	MessageByClientID(ctx context.Context, conversationID, clientMsgID string) (storage.Message, error)
	MessageRange(ctx context.Context, conversationID string, from, to int64) ([]storage.Message, error)
	AdvanceCounters(ctx context.Context, counters map[string]storage.Counters) error
	UpdateMessages(ctx context.Context, updates []storage.MessageUpdate) error
	RecordDeleted(ctx context.Context, conversationID string, seqs []int64) error
	TombstoneSender(ctx context.Context, conversationID string, lastSeq int64, userID string) ([]int64, error)
	SealBuckets(ctx context.Context, conversationID string, from, to int64) error
	SealBucket(ctx context.Context, msgs []storage.Message) error
	UpdateGroup(ctx context.Context, id string, u storage.GroupUpdate) error
}

// SendRequest is one message to sequence, or with Op one change of a stored message (see
// changes.go). SenderID comes from the authenticated session, never from the client's frame.
type SendRequest struct {
	ConversationID string `json:"conversationId"`
	SenderID       string `json:"senderId"`
	// ClientMsgID makes a retry safe: the client's id of a send, a request id of a change.
	ClientMsgID string `json:"clientMsgId"`
	Kind        string `json:"kind"`
	Body        string `json:"body"`
	ReplyTo     int64  `json:"replyTo,omitempty"`
	// Op, Seq and Emoji make the request a change of message Seq: an edit to Body, a deletion, or
	// a reaction added or taken away.
	Op    string `json:"op,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
	Emoji string `json:"emoji,omitempty"`
	// Reload makes the owner re-read the conversation's members first, so a membership change
	// takes effect at once. With an empty Kind nothing is stored: it is only a reload.
	Reload bool `json:"reload,omitempty"`
	// EraseSender makes the owner turn every message of that (deleted) account in the
	// conversation into a tombstone without a sender; nothing else is stored.
	EraseSender string `json:"eraseSender,omitempty"`
	// Group makes the request an administrative change of a group by SenderID (see groups.go).
	Group *group.Op `json:"group,omitempty"`
	// Attachments are the ids of the sender's pending uploads the message carries (files.go).
	Attachments []string `json:"attachments,omitempty"`
}

// reply is what an owner answers a SendRequest with: the message as stored (after a change, its
// new state), or a refusal: a protocol.Error's code, message (the reason the user is told) and
// whether it is retryable, the same on the node that asked.
type reply struct {
	Message *protocol.Message `json:"message,omitempty"`
	// Erased are the seqs an EraseSender request made tombstones.
	Erased    []int64 `json:"erased,omitempty"`
	Code      string  `json:"code,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	Retryable bool    `json:"retryable,omitempty"`

	// Group is what a Group request changed; RetryAfterMs is a refusal's RetryAfter.
	Group        *storage.GroupUpdate `json:"group,omitempty"`
	RetryAfterMs int64                `json:"retryAfterMs,omitempty"`
}

// answer is the reply of a request that ended with m, or with refusal when that is not nil.
func answer(m *protocol.Message, refusal *protocol.Error) reply {
	if refusal == nil {
		return reply{Message: m}
	}
	return reply{Code: refusal.Code, Reason: refusal.Message, Retryable: refusal.Retryable, RetryAfterMs: refusal.RetryAfter.Milliseconds()}
}

// refusal is the refusal r carries, nil when it carries none.
func (r reply) refusal() *protocol.Error {
	if r.Code == "" {
		return nil
	}
	return &protocol.Error{Code: r.Code, Message: r.Reason, Retryable: r.Retryable, RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond}
}

// Sequencer sends messages to partition owners and, for the partitions this node owns, is the owner.
type Sequencer struct {
	cfg   Config
	nc    *nats.Conn
	store *mergingStore
	log   zerolog.Logger
	// metrics is cfg.Metrics, nil when nothing is recorded.
	metrics *Metrics
	// overflows and staleAcks rate-limit the incident lines of full queues and of batches not
	// acked because another node claimed the partition.
	overflows, staleAcks *incidentLog

	mu    sync.Mutex
	owned map[int]*partition

	// epochs holds, per partition, a context cancelled when the partition's owner changes, so
	// sends waiting on the old owner (a timeout, a backoff) try the new one at once.
	epochsMu sync.Mutex
	epochs   map[int]epoch
}

// epoch is one owner's time on a partition, as senders see it.
type epoch struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a sequencer that owns no partition yet.
func New(cfg Config, nc *nats.Conn, store Store, log zerolog.Logger) (*Sequencer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Sequencer{
		cfg:       cfg,
		nc:        nc,
		store:     newMergingStore(store, cfg.MaxBatch, cfg.FlushTimeout),
		log:       log.With().Str("component", "sequencer").Logger(),
		metrics:   cfg.Metrics,
		overflows: newIncidentLog(),
		staleAcks: newIncidentLog(),
		owned:     make(map[int]*partition),
		epochs:    make(map[int]epoch),
	}, nil
}

// Partitions returns the number of partitions.
func (s *Sequencer) Partitions() int { return s.cfg.Partitions }

// PartitionOf returns the partition a conversation is hashed onto.
func (s *Sequencer) PartitionOf(conversationID string) int {
	return PartitionOf(conversationID, s.cfg.Partitions)
}

// PartitionOf hashes a conversation onto one of n partitions.
func PartitionOf(conversationID string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(conversationID)) // writing to a hash never fails
	return int(h.Sum32() % uint32(n))
}

// PartitionSubject is the subject the owner of partition p listens on.
func (s *Sequencer) PartitionSubject(p int) string {
	return fmt.Sprintf("%s.seq.%d", s.cfg.SubjectPrefix, p)
}

// MessageSubject is the subject a conversation's persisted messages are published on.
func (s *Sequencer) MessageSubject(conversationID string) string {
	return MessageSubject(s.cfg.SubjectPrefix, conversationID)
}

// MessageSubject is the fan-out subject of a conversation under prefix. Hubs subscribe to
// <prefix>.conv.<id>.* to get its messages and its other events with one subscription.
func MessageSubject(prefix, conversationID string) string {
	return prefix + ".conv." + conversationID + ".msg"
}

// ChangeSubject is where the owner publishes a conversation's message changes (JSON of Change).
// It shares the conversation's subscription with MessageSubject, and the owner publishes both from
// one connection, so a node hears a message before any change of it.
func ChangeSubject(prefix, conversationID string) string {
	return prefix + ".conv." + conversationID + ".chg"
}

// Send sequences and persists one message through the owner of its partition and returns it with
// its seq; with req.Op it makes that change of a stored message and returns the message's new
// state. It retries while no owner answers, until ctx ends; the clientMsgId makes retries safe.
func (s *Sequencer) Send(ctx context.Context, req SendRequest) (protocol.Message, error) {
	r, err := s.ask(ctx, req)
	if err != nil {
		return protocol.Message{}, err
	}
	return *r.Message, nil
}

// EraseSender makes every message userID sent in a conversation a tombstone without a sender,
// through the conversation's owner (the one writer of its messages), and returns the seqs that
// were live. A retry after a lost answer returns none: they are tombstones already.
func (s *Sequencer) EraseSender(ctx context.Context, conversationID, userID string) ([]int64, error) {
	r, err := s.ask(ctx, SendRequest{ConversationID: conversationID, EraseSender: userID})
	if err != nil {
		return nil, fmt.Errorf("erase the messages of %s in %s: %w", userID, conversationID, err)
	}
	return r.Erased, nil
}

// ask sends req to the owner of its partition and returns the answer, retrying while no owner
// answers, until ctx ends.
func (s *Sequencer) ask(ctx context.Context, req SendRequest) (reply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return reply{}, fmt.Errorf("encode send request: %w", err)
	}
	p := s.PartitionOf(req.ConversationID)
	subject := s.PartitionSubject(p)
	backoff := 10 * time.Millisecond
	for {
		owner := s.epoch(p)
		r, err := s.attempt(ctx, owner, subject, data)
		if !errors.Is(err, protocol.ErrUnavailable) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return reply{}, fmt.Errorf("send to %s: %w (%v)", subject, protocol.ErrUnavailable, ctx.Err())
		case <-owner.Done():
			backoff = 10 * time.Millisecond // a new owner: ask it now
			continue
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// attempt asks the owner once. It gives up at AttemptTimeout, or as soon as the partition's
// owner changes (owner is cancelled): a request to a dead owner is never answered.
func (s *Sequencer) attempt(ctx, owner context.Context, subject string, data []byte) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AttemptTimeout)
	defer cancel()
	defer context.AfterFunc(owner, cancel)()
	msg, err := s.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		// No responders (no owner right now), a timeout, a new owner or a lost connection: all
		// retryable.
		return reply{}, fmt.Errorf("request %s: %w (%v)", subject, protocol.ErrUnavailable, err)
	}
	var r reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return reply{}, fmt.Errorf("decode reply from %s: %w", subject, err)
	}
	if refusal := r.refusal(); refusal != nil {
		if errors.Is(refusal, protocol.ErrUnavailable) {
			return reply{}, fmt.Errorf("owner of %s: %w", subject, refusal)
		}
		return reply{}, refusal
	}
	if r.Message == nil {
		return reply{}, fmt.Errorf("reply from %s has no message", subject)
	}
	return r, nil
}

// epoch returns a context that is cancelled when partition p's owner changes.
func (s *Sequencer) epoch(p int) context.Context {
	s.epochsMu.Lock()
	defer s.epochsMu.Unlock()
	e, ok := s.epochs[p]
	if !ok {
		e.ctx, e.cancel = context.WithCancel(context.Background())
		s.epochs[p] = e
	}
	return e.ctx
}

// Reconnected tells waiting senders that this node's NATS connection was re-established:
// requests and replies in flight when it went down are lost, so every waiting send asks again at
// once instead of at its attempt timeout.
func (s *Sequencer) Reconnected() {
	s.epochsMu.Lock()
	epochs := s.epochs
	s.epochs = make(map[int]epoch)
	s.epochsMu.Unlock()
	for _, e := range epochs {
		e.cancel()
	}
}

// ownerMoved tells waiting senders that partition p has a new owner (or none).
func (s *Sequencer) ownerMoved(p int) {
	s.epochsMu.Lock()
	e, ok := s.epochs[p]
	delete(s.epochs, p)
	s.epochsMu.Unlock()
	if ok {
		e.cancel()
	}
}

// Reload tells the owner of a conversation to re-read its members (or forget it, if it was
// deleted) before the next send; membership changes call it after writing the store.
func (s *Sequencer) Reload(ctx context.Context, conversationID string) error {
	_, err := s.Send(ctx, SendRequest{ConversationID: conversationID, Reload: true})
	if err != nil {
		return fmt.Errorf("reload %s: %w", conversationID, err)
	}
	return nil
}

// Own makes this node the owner of partition p: it recovers state lazily per conversation from the
// store and starts answering the partition's subject. Owning an owned partition is a no-op.
// fenced, if not nil, is asked before every ack whether this node still holds the partition.
func (s *Sequencer) Own(p int, fenced func() bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owned[p]; ok {
		return nil
	}
	part := newPartition(s, p, fenced)
	if err := part.start(); err != nil {
		return fmt.Errorf("own partition %d: %w", p, err)
	}
	s.owned[p] = part
	s.metrics.owned(len(s.owned))
	s.log.Debug().Int("partition", p).Msg("owning partition")
	return nil
}

// Release stops owning partition p after the sends already taken are persisted and answered.
func (s *Sequencer) Release(p int) {
	s.mu.Lock()
	part, ok := s.owned[p]
	delete(s.owned, p)
	s.metrics.owned(len(s.owned))
	s.mu.Unlock()
	if ok {
		part.stop()
		s.log.Debug().Int("partition", p).Msg("released partition")
	}
}

// Owned returns the partitions this node owns.
func (s *Sequencer) Owned() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.owned))
	for p := range s.owned {
		out = append(out, p)
	}
	return out
}

// Close releases every owned partition.
func (s *Sequencer) Close() {
	for _, p := range s.Owned() {
		s.Release(p)
	}
}
