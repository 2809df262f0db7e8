package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// maxCachedConversations bounds the conversation states one partition keeps; an evicted one is
// recovered from the store on its next send.
const maxCachedConversations = 10000

// maxTailMessages bounds the messages of unsealed buckets one partition keeps (tail): about the
// order of its recent answers. Past it the tails are dropped, and those buckets are sealed from
// the store's claims instead.
const maxTailMessages = 1 << 16

// partition is one owned partition: a NATS subscription feeding a queue, and one goroutine that
// drains the queue in batches. Only that goroutine touches convs and recent, so they need no lock.
type partition struct {
	seq        *Sequencer
	id         int
	stillOwner func() bool
	sub        *nats.Subscription
	queue      chan pending
	quit       chan struct{}
	done       chan struct{}
	convs      map[string]*conversationState
	recent     *recentIDs
	// open holds the conversations whose counters this owner may have left open (ahead.go).
	open map[string]bool
	// tails counts the messages of the conversations' tails, roughly (a forgotten conversation's
	// stay counted until the tails are next dropped).
	tails int

	// closed is set by stop once the subscription is gone. A delivery already under way when it
	// went may still arrive: it is refused rather than queued after the loop has drained the queue,
	// where nobody would answer it (and the queue depth would never come down).
	mu     sync.Mutex
	closed bool
}

// pending is a send waiting for its group commit.
type pending struct {
	req     SendRequest
	replyTo string
}

// conversationState is what the owner knows of one conversation: its members, its last seq and
// its last change number.
type conversationState struct {
	members     map[string]bool
	lastSeq     int64
	lastVersion int64
	// tail is the stored messages of the conversation's bucket not full yet, from its first seq,
	// as they are now, when this owner stored them all: sealed from here when it fills, with no
	// read (storage.SealBucket). Empty when not known.
	tail []storage.Message

	// kind, name, createdBy and admin are how a group is run (see groups.go); lastSent is when
	// each member last sent, kept only in slow mode.
	kind, name, createdBy string
	admin                 *storage.GroupAdmin
	lastSent              map[string]time.Time

	// mentioned is the seqs of the newest messages that mention each member, and
	// mentionsChanged the members whose seqs changed since the counters were written (mentions.go).
	mentioned       map[string][]int64
	mentionsChanged map[string]bool

	aheadState
}

// entry is one send of a batch on its way to the store, and what became of it.
type entry struct {
	pending
	msg    storage.Message
	result *protocol.Message
	// refused is why there is no result: a refusal for the user, or protocol.ErrUnavailable.
	refused  *protocol.Error
	reason   string // why refused, one of the fail* reasons
	assigned bool   // the send was given a new seq in this batch
	// stored is the message as it is in the store, once that is known: new, or found again for a
	// retry. It is published even if it cannot be acked.
	stored *protocol.Message
	// change is what a change request changed, published once it is stored; nil for a send, and
	// for a change that changed nothing.
	change *Change
	// erased are the seqs an EraseSender request made tombstones.
	erased []int64
	// group is what a Group request changed.
	group *storage.GroupUpdate
	// removedFiles are the files of a message this entry deleted for everyone, removed once the
	// deletion is stored (changeStored), whatever the answer.
	removedFiles []storage.Attachment
	changeStored bool
}

// batchMessages holds the stored messages a batch reads and changes, each read once: a reply's
// quote, and the changes of one message, which are made one after the other and written once.
type batchMessages struct {
	byKey   map[messageKey]*batchMessage
	changed []*batchMessage // in the order of their first change
}

type messageKey struct {
	conversationID string
	seq            int64
}

// batchMessage is one message as the batch found it and as its changes leave it.
type batchMessage struct {
	msg         storage.Message
	prevVersion int64
	changed     bool
	// textChanged says an edit or a deletion changed what a conversation list shows of it.
	textChanged bool
	// readMentions are whom the message mentioned as the batch read it.
	readMentions []string
}

func newPartition(s *Sequencer, id int, stillOwner func() bool) *partition {
	return &partition{
		seq:        s,
		id:         id,
		stillOwner: stillOwner,
		queue:      make(chan pending, s.cfg.QueueSize),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		convs:      make(map[string]*conversationState),
		recent:     newRecentIDs(s.cfg.RecentIDs),
		open:       make(map[string]bool),
	}
}

func (p *partition) start() error {
	// A queue group keeps a send from being processed twice while two nodes briefly both think
	// they own the partition during a handover; the unique index catches what slips through.
	sub, err := p.seq.nc.QueueSubscribe(p.seq.PartitionSubject(p.id), "owners", p.receive)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", p.seq.PartitionSubject(p.id), err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("set pending limits: %w", err)
	}
	p.sub = sub
	go p.run()
	return nil
}

// stop unsubscribes, persists and answers what was already queued, and waits for the loop.
func (p *partition) stop() {
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		p.seq.log.Warn().Err(err).Int("partition", p.id).Msg("unsubscribe partition")
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.quit)
	<-p.done
}

func (p *partition) receive(m *nats.Msg) {
	var req SendRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		p.seq.log.Error().Err(err).Int("partition", p.id).Msg("undecodable send request")
		p.seq.metrics.answered(false, failInvalid)
		p.respond(m.Reply, answer(nil, protocol.ErrUnavailable))
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.seq.metrics.answered(false, failNotOwner)
		p.respond(m.Reply, answer(nil, protocol.ErrUnavailable))
		return
	}
	// Counted before it is queued, so the loop taking it cannot bring the depth below zero.
	p.seq.metrics.queued(1)
	select {
	case p.queue <- pending{req: req, replyTo: m.Reply}:
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		p.seq.metrics.queued(-1)
		p.seq.metrics.overflow()
		p.seq.overflows.event(&p.seq.log, zerolog.WarnLevel).Int("partition", p.id).Str("conversation", req.ConversationID).
			Int("queue", cap(p.queue)).Msg("partition queue full; send refused as retryable")
		p.respond(m.Reply, answer(nil, protocol.ErrUnavailable))
	}
}

func (p *partition) run() {
	defer close(p.done)
	var closing <-chan time.Time // armed while some conversation's counters are open
	for {
		if closing == nil && len(p.open) > 0 {
			closing = time.After(aheadFor)
		}
		select {
		case first := <-p.queue:
			p.flush(p.collect(first))
		case <-closing:
			closing = nil
			p.closeCounters()
		case <-p.quit:
			for {
				select {
				case first := <-p.queue:
					p.flush(p.collect(first))
				default:
					return
				}
			}
		}
	}
}

// collect takes first and whatever else is already waiting, up to MaxBatch. It never waits for more:
// sends that arrive during a flush form the next batch, so batching adds no latency.
func (p *partition) collect(first pending) []pending {
	batch := []pending{first}
	defer func() { p.seq.metrics.queued(-len(batch)) }() // taken: no longer waiting
	for len(batch) < p.seq.cfg.MaxBatch {
		select {
		case next := <-p.queue:
			batch = append(batch, next)
		default:
			return batch
		}
	}
	return batch
}

// flush is one group commit: assign seqs, one ordered insertMany, one bulk lastSeq update, then
// publish and ack. Nothing is acked before the store has returned.
func (p *partition) flush(batch []pending) {
	ctx, cancel := context.WithTimeout(context.Background(), p.seq.cfg.FlushTimeout)
	defer cancel()
	p.seq.metrics.batch(len(batch))

	entries := make([]*entry, len(batch))
	firstOfID := make(map[string]*entry, len(batch))
	msgs := &batchMessages{byKey: make(map[messageKey]*batchMessage)}
	var fresh []*entry
	for i, pd := range batch {
		e := &entry{pending: pd}
		entries[i] = e
		key := recentKey(pd.req.ConversationID, pd.req.ClientMsgID)
		if first, ok := firstOfID[key]; ok {
			// The same send twice in one batch: answer both from the first.
			entries[i] = first
			continue
		}
		firstOfID[key] = e
		if pd.req.Reload {
			p.reload(ctx, pd.req.ConversationID)
			if pd.req.Kind == "" {
				e.result = &protocol.Message{ConversationID: pd.req.ConversationID}
				continue
			}
		}
		if pd.req.EraseSender != "" {
			p.erase(ctx, e)
			continue
		}
		if pd.req.Op != "" {
			p.change(ctx, e, key, msgs)
			continue
		}
		if pd.req.Group != nil {
			p.administer(ctx, e, key, msgs)
		} else {
			p.assign(ctx, e, key, msgs)
		}
		if e.assigned {
			fresh = append(fresh, e)
		}
	}
	counters, err := p.persist(ctx, fresh, entries, msgs)
	// A change's version may not be stored before the conversation's lastVersion covers it.
	if p.advanced(entries, counters, err) {
		p.storeChanges(ctx, entries, msgs)
	}
	if p.stillOwner != nil && !p.stillOwner() {
		// Another node holds the partition now; what was stored will be found by the new owner
		// through the message's claims when the client retries.
		p.seq.staleAcks.event(&p.seq.log, zerolog.WarnLevel).Int("partition", p.id).Int("sends", len(batch)).
			Msg("partition claimed by another node; sends answered as retryable")
		p.convs, p.open = make(map[string]*conversationState), make(map[string]bool)
		for _, e := range entries {
			e.result, e.refused, e.reason = nil, protocol.ErrUnavailable, failNotOwner
		}
	}
	p.publish(entries)
	for _, e := range entries {
		if e.result != nil && e.req.ClientMsgID != "" {
			p.recent.add(recentKey(e.req.ConversationID, e.req.ClientMsgID), *e.result)
		}
	}
	for i, e := range entries {
		// Counted before the answer, so whoever got the answer sees it counted.
		if req := batch[i].req; (!req.Reload || req.Kind != "") && req.EraseSender == "" { // nor is a bare reload or an erase
			p.seq.metrics.answered(e.result != nil, e.reason)
		}
		r := answer(e.result, e.refused)
		if e.result != nil {
			r.Erased, r.Group = e.erased, e.group
		}
		p.respond(batch[i].replyTo, r)
	}
	p.seal(ctx, fresh)
	p.removeFiles(ctx, entries)
}

// seal writes the buckets the batch's new messages filled, after the answers, so that no ack
// waits for it: from the conversation's tail when this owner stored the whole bucket, else from
// the store's claims (storage.SealBuckets). A seal that fails leaves the messages in their claims,
// where they are read, and the next owner of the conversation seals the bucket.
func (p *partition) seal(ctx context.Context, fresh []*entry) {
	for _, e := range fresh { // each conversation's in seq order
		if e.stored == nil || !e.assigned {
			continue
		}
		c, ok := p.convs[e.msg.ConversationID]
		if !ok {
			continue
		}
		var err error
		switch full := p.extendTail(c, e.msg); {
		case full != nil:
			err = p.seq.store.SealBucket(ctx, full)
		case e.msg.Seq%storage.BucketSize == 0:
			err = p.seq.store.SealBuckets(ctx, e.msg.ConversationID, e.msg.Seq, e.msg.Seq)
		}
		if err != nil {
			p.seq.log.Warn().Err(err).Str("conversation", e.msg.ConversationID).Msg("seal a full bucket; its messages stay in their claims")
		}
	}
}

// extendTail adds a stored message to its conversation's tail, and returns the tail when the
// message filled its bucket (the tail is then emptied).
func (p *partition) extendTail(c *conversationState, m storage.Message) []storage.Message {
	switch n := len(c.tail); {
	case m.Seq%storage.BucketSize == 1:
		p.dropTail(c)
		c.tail = []storage.Message{m}
	case n > 0 && c.tail[n-1].Seq+1 == m.Seq:
		c.tail = append(c.tail, m)
	default: // a bucket begun before this owner knew the conversation
		p.dropTail(c)
		return nil
	}
	p.tails++
	if len(c.tail) == storage.BucketSize {
		full := c.tail
		p.dropTail(c)
		return full
	}
	if p.tails > maxTailMessages {
		p.tails = 0
		for _, other := range p.convs {
			other.tail = nil
		}
	}
	return nil
}

// dropTail forgets a conversation's tail.
func (p *partition) dropTail(c *conversationState) {
	p.tails -= len(c.tail)
	c.tail = nil
}

// changeTail puts a changed message's new state into its conversation's tail, if it is there.
func (p *partition) changeTail(m storage.Message) {
	c, ok := p.convs[m.ConversationID]
	if !ok || len(c.tail) == 0 {
		return
	}
	if i := m.Seq - c.tail[0].Seq; i >= 0 && i < int64(len(c.tail)) {
		c.tail[i] = m
	}
}

// member returns the state of e's conversation once e's sender is found a member of it (system
// messages, from the server, need no member: their sender may have just left); otherwise it sets
// e's answer and returns nil. A request retried recently is answered from memory, also with nil.
func (p *partition) member(ctx context.Context, e *entry, key string) *conversationState {
	c, err := p.conversation(ctx, e.req.ConversationID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		e.refused, e.reason = protocol.ErrNotMember, failNotMember
		return nil
	case err != nil:
		p.seq.log.Error().Err(err).Str("conversation", e.req.ConversationID).Msg("load conversation")
		e.refused, e.reason = protocol.ErrUnavailable, failStore
		return nil
	case e.req.Kind != protocol.KindSystem && !c.members[e.req.SenderID] && !e.req.joins():
		e.refused, e.reason = protocol.ErrNotMember, failNotMember
		return nil
	}
	if m, ok := p.recent.get(key); ok {
		p.seq.metrics.recentHit()
		e.result, e.stored = &m, &m
		if e.req.Op != "" {
			e.stored = nil // a change is published once, when it is made
		}
		return nil
	}
	return c
}

// assign checks membership and retries, then gives e the next seq of its conversation. A reply
// gets the quote of the message it answers.
func (p *partition) assign(ctx context.Context, e *entry, key string, msgs *batchMessages) {
	c := p.member(ctx, e, key)
	if c == nil || !p.checkSend(c, e) {
		return
	}
	var quote *storage.Quote
	if e.req.ReplyTo > 0 {
		replied := p.message(ctx, e, msgs, e.req.ReplyTo, c.lastSeq)
		if replied == nil {
			return
		}
		quote = message.QuoteOf(replied.msg)
	}
	files, ok := p.attach(ctx, e)
	if !ok {
		return
	}
	c.lastSeq++
	e.assigned = true
	e.msg = storage.Message{
		ConversationID: e.req.ConversationID,
		Seq:            c.lastSeq,
		SenderID:       e.req.SenderID,
		Kind:           e.req.Kind,
		Body:           e.req.Body,
		CreatedAt:      time.Now().UTC().Truncate(time.Millisecond),
		ClientMsgID:    e.req.ClientMsgID,
		ReplyTo:        e.req.ReplyTo,
		Quote:          quote,
		Attachments:    files,
	}
	if e.req.Kind != protocol.KindSystem {
		e.msg.Mentions = mentionsIn(c, e.req.Body)
	}
}

// message returns message seq of e's conversation as this batch has it, reading it from the
// store the first time; seqs above lastSeq do not exist yet. When there is no such message, or
// it cannot be read, it sets e's answer and returns nil.
func (p *partition) message(ctx context.Context, e *entry, msgs *batchMessages, seq, lastSeq int64) *batchMessage {
	k := messageKey{e.req.ConversationID, seq}
	if bm, ok := msgs.byKey[k]; ok {
		return bm
	}
	var found []storage.Message
	if seq <= lastSeq {
		var err error
		if found, err = p.seq.store.MessageRange(ctx, k.conversationID, seq, seq); err != nil {
			p.seq.log.Error().Err(err).Str("conversation", k.conversationID).Int64("seq", seq).Msg("load message")
			e.refused, e.reason = protocol.ErrUnavailable, failStore
			return nil
		}
	}
	if len(found) == 0 {
		e.refused, e.reason = protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", seq), failRefused
		return nil
	}
	bm := &batchMessage{msg: found[0], prevVersion: found[0].Version, readMentions: found[0].Mentions}
	msgs.byKey[k] = bm
	return bm
}

// change makes one change of a stored message in the batch's copy of it, numbered with the
// conversation's next version; storeChanges writes it. A change that changes nothing (a repeat)
// is answered with the message as it is and publishes nothing.
func (p *partition) change(ctx context.Context, e *entry, key string, msgs *batchMessages) {
	c := p.member(ctx, e, key)
	if c == nil {
		return
	}
	bm := p.message(ctx, e, msgs, e.req.Seq, c.lastSeq)
	if bm == nil {
		return
	}
	files := bm.msg.Attachments  // a deletion drops them from the message
	mentioned := bm.msg.Mentions // a deletion takes them with the text
	ch := e.req.MessageChange()
	ch.Admin = group.IsAdmin(c.groupOf(), e.req.SenderID)
	changed, err := message.Apply(&bm.msg, ch, c.lastVersion+1, time.Now().UTC().Truncate(time.Millisecond))
	if err != nil {
		var refusal *protocol.Error
		if !errors.As(err, &refusal) {
			p.seq.log.Error().Err(err).Msg("change message")
			e.refused, e.reason = protocol.ErrUnavailable, failInvalid
			return
		}
		e.refused, e.reason = refusal, failRefused
		return
	}
	if changed {
		if e.req.Op == message.OpEdit {
			bm.msg.Mentions = mentionsIn(c, bm.msg.Body)
			mentioned = without(mentioned, bm.msg.Mentions)
		}
		c.lastVersion++
		if !bm.changed {
			bm.changed = true
			msgs.changed = append(msgs.changed, bm)
		}
		bm.textChanged = bm.textChanged || e.req.Op == message.OpEdit || e.req.Op == message.OpDelete
		ch := ChangeOf(bm.msg, e.req, len(c.members))
		if e.req.Op == message.OpEdit || e.req.Op == message.OpDelete {
			ch.Unmentioned = mentioned
		}
		e.change = &ch
		if e.req.Op == message.OpDelete {
			e.removedFiles = files
		}
	}
	m := message.View(bm.msg, "")
	e.result = &m
}

// erase makes the messages of a deleted account in e's conversation tombstones, here in the
// owner's order, so that no bucket is written by two writers at once (the embedded store's
// updates rewrite the whole document). It needs no member: the account is gone.
func (p *partition) erase(ctx context.Context, e *entry) {
	id := e.req.ConversationID
	c, err := p.conversation(ctx, id)
	if err == nil {
		p.dropTail(c) // the store's messages change under it
		e.erased, err = p.seq.store.TombstoneSender(ctx, id, c.lastSeq, e.req.EraseSender)
	}
	if err != nil {
		p.seq.log.Error().Err(err).Str("conversation", id).Msg("erase the messages of a deleted account")
		p.fail([]*entry{e}, failStore)
		return
	}
	c.unmention(e.erased)
	e.result = &protocol.Message{ConversationID: id}
}

// storeChanges writes the batch's changed messages: first the seqs of those it deleted onto
// their conversations (so unread counts leave them out; a failure before the tombstone is
// finished by the retry), then every changed message with one bulk of updates guarded by the
// version it had. If any write fails, every change of the batch is answered as retryable and the
// conversations are read again on their next request: a retry finds what was written.
func (p *partition) storeChanges(ctx context.Context, entries []*entry, msgs *batchMessages) {
	if len(msgs.changed) == 0 {
		return
	}
	var err error
	updates := make([]storage.MessageUpdate, 0, len(msgs.changed))
	for _, bm := range msgs.changed {
		if err == nil && bm.msg.Kind == protocol.KindDeleted {
			err = p.seq.store.RecordDeleted(ctx, bm.msg.ConversationID, []int64{bm.msg.Seq})
		}
		updates = append(updates, storage.MessageUpdate{Message: bm.msg, PrevVersion: bm.prevVersion})
	}
	if err == nil {
		err = p.seq.store.UpdateMessages(ctx, updates)
	}
	if err == nil {
		for _, bm := range msgs.changed {
			p.changeTail(bm.msg)
		}
		for _, e := range entries {
			e.changeStored = e.change != nil
		}
		return
	}
	reason := failStore
	if errors.Is(err, storage.ErrConflict) {
		reason = failSeqTaken
	}
	p.seq.log.Error().Err(err).Int("partition", p.id).Int("messages", len(updates)).Msg("store changed messages")
	for _, e := range entries {
		if e.change != nil {
			p.fail([]*entry{e}, reason)
			e.change = nil
		}
	}
}

// persist stores the batch's new messages, then raises its counters (countersOf) and returns
// them with the raise's error. When the first insert stores every new message, as it nearly
// always does, the counters are raised in the same visit to the store
// (mergingStore.InsertAdvancing); otherwise on their own once the duplicates are sorted out.
func (p *partition) persist(ctx context.Context, fresh, entries []*entry, msgs *batchMessages) (map[string]storage.Counters, error) {
	var counters map[string]storage.Counters
	if len(fresh) > 0 {
		defer p.seq.metrics.inserted(time.Now())
		err := p.seq.store.InsertAdvancing(ctx, messagesOf(fresh), func() map[string]storage.Counters {
			markStored(fresh)
			counters = p.countersOf(entries, msgs)
			return counters
		})
		var notRaised *countersError
		switch {
		case err == nil:
			return counters, nil
		case errors.As(err, &notRaised):
			return counters, notRaised.err
		}
		p.insertRest(ctx, fresh, err)
	}
	counters = p.countersOf(entries, msgs)
	return counters, p.seq.store.AdvanceCounters(ctx, counters)
}

// insertRest stores the fresh entries whose first insert failed with err, with further ordered
// insertMany calls. A duplicate clientMsgId is a retry stored before this owner's memory: it is
// answered with the stored message and the later seqs of its conversation close up. A duplicate
// seq means another writer got there first: that conversation's sends fail as retryable and its
// state is reloaded on the next send.
func (p *partition) insertRest(ctx context.Context, fresh []*entry, err error) {
	rest := fresh
	for {
		if err == nil {
			markStored(rest)
			return
		}
		var dup *storage.DuplicateError
		if !errors.As(err, &dup) || dup.Index >= len(rest) {
			p.seq.log.Error().Err(err).Int("partition", p.id).Int("messages", len(rest)).Msg("persist batch")
			p.fail(rest, failStore)
			return
		}
		markStored(rest[:dup.Index])
		bad, after := rest[dup.Index], rest[dup.Index+1:]
		conv := bad.msg.ConversationID
		// Its own name: the next insert's outcome goes to err, which the next round reads.
		stored, lookupErr := p.seq.store.MessageByClientID(ctx, conv, bad.msg.ClientMsgID)
		switch {
		case lookupErr == nil:
			m := message.View(stored, "")
			bad.result, bad.stored, bad.assigned = &m, &m, false
			if stored.Seq != bad.msg.Seq {
				// Stored earlier under another seq: the slot this batch gave it is free again.
				for _, e := range after {
					if e.msg.ConversationID == conv {
						e.msg.Seq--
					}
				}
				if c, ok := p.convs[conv]; ok {
					c.lastSeq--
				}
			}
		case errors.Is(lookupErr, storage.ErrNotFound):
			p.seq.log.Warn().Str("conversation", conv).Int64("seq", bad.msg.Seq).Msg("seq already taken, reloading conversation")
			var keep []*entry
			for _, e := range append([]*entry{bad}, after...) {
				if e.msg.ConversationID == conv {
					p.fail([]*entry{e}, failSeqTaken)
				} else {
					keep = append(keep, e)
				}
			}
			after = keep
		default:
			p.seq.log.Error().Err(lookupErr).Str("conversation", conv).Msg("look up duplicate send")
			p.fail(append([]*entry{bad}, after...), failStore)
			return
		}
		rest = after
		if len(rest) == 0 {
			return
		}
		err = p.seq.store.InsertMessages(ctx, messagesOf(rest))
	}
}

// fail answers entries as retryable for reason and forgets their conversations, whose seqs may
// now be anywhere between the remembered and the assigned value.
func (p *partition) fail(entries []*entry, reason string) {
	for _, e := range entries {
		e.result, e.refused, e.reason, e.assigned, e.stored = nil, protocol.ErrUnavailable, reason, false, nil
		delete(p.convs, e.req.ConversationID)
	}
}

// countersOf is what the batch raises in the store: conversations.lastSeq and lastVersion for
// every conversation the batch touched, and each sender's newest seq (their read position), and
// their previews moved to the newest message (or to the new text of the newest message, edited
// or deleted); changes are written after them, so lastVersion is never below a stored version.
func (p *partition) countersOf(entries []*entry, msgs *batchMessages) map[string]storage.Counters {
	counters := make(map[string]storage.Counters)
	fresh := make(map[string]int)  // new messages stored per conversation
	mixed := make(map[string]bool) // conversations the batch does more in than store new messages
	p.noteMentions(entries, msgs)
	for _, e := range entries {
		c, ok := p.convs[e.req.ConversationID]
		if !ok || e.result == nil {
			continue
		}
		if e.assigned && e.stored != nil && e.req.Op == "" && e.req.Group == nil {
			fresh[e.req.ConversationID]++
		} else {
			mixed[e.req.ConversationID] = true
		}
		n := counters[e.req.ConversationID]
		n.LastSeq, n.LastVersion = c.lastSeq, c.lastVersion
		if m := e.stored; m != nil && e.req.Op == "" { // a message, new or found again for a retry
			if n.Newest == nil || m.Seq > n.Newest.Seq {
				preview := previewOf(*m)
				n.Newest = &preview
			}
			if m.Kind != protocol.KindSystem {
				// The sender has read up to their own message: stored here, not as a cursor write.
				if n.Senders == nil {
					n.Senders = make(map[string]int64)
				}
				n.Senders[m.SenderID] = max(n.Senders[m.SenderID], m.Seq)
			}
		}
		counters[e.req.ConversationID] = n
	}
	now := time.Now()
	for id, n := range counters {
		c := p.convs[id]
		busy := now.Sub(c.lastBatch) < aheadFor
		c.lastBatch = now
		if !mixed[id] && c.holdBack(n, fresh[id], now) {
			delete(counters, id)
			continue
		}
		n = c.withAhead(n)
		n.Mentioned, n.Ahead = c.changedMentions(), fresh[id] > 0 && busy
		counters[id] = n
	}
	for _, bm := range msgs.changed {
		if n, ok := counters[bm.msg.ConversationID]; ok && bm.textChanged {
			n.Changed = append(n.Changed, previewOf(message.View(bm.msg, "")))
			counters[bm.msg.ConversationID] = n
		}
	}
	return counters
}

// advanced reports whether the batch's counters were raised (err is the raise's error). If not,
// nothing is acked: the stored messages stay remembered, so the retry acks the same seq, and the
// changes are not written at all.
func (p *partition) advanced(entries []*entry, counters map[string]storage.Counters, err error) bool {
	p.raised(counters, err, time.Now())
	if err == nil {
		return true
	}
	p.seq.log.Error().Err(err).Int("partition", p.id).Msg("advance lastSeq")
	for _, e := range entries {
		if e.result != nil {
			if e.change == nil && e.req.Op == "" {
				p.recent.add(recentKey(e.req.ConversationID, e.req.ClientMsgID), *e.result)
			}
			e.result, e.refused, e.reason = nil, protocol.ErrUnavailable, failStore
		}
	}
	return false
}

// publish sends the batch's stored messages to their conversations' fan-out subjects: new ones
// in seq order, and again those a client retried, because a retry may mean the owner that stored
// a message died before publishing it (receivers drop a seq they already have); then the
// changes it stored, in version order.
func (p *partition) publish(entries []*entry) {
	published := make(map[*entry]bool, len(entries))
	for _, e := range entries {
		if e.stored == nil || published[e] {
			continue
		}
		published[e] = true
		p.publishOne(*e.stored)
	}
	for _, e := range entries {
		if e.change != nil && e.result != nil && !published[e] {
			published[e] = true
			p.publishChange(*e.change)
		}
	}
}

// publishChange sends one stored change to its conversation's change subject.
func (p *partition) publishChange(c Change) {
	data, err := json.Marshal(c)
	if err != nil {
		p.seq.log.Error().Err(err).Msg("encode change event")
		return
	}
	if err := p.seq.nc.Publish(ChangeSubject(p.seq.cfg.SubjectPrefix, c.ConversationID), data); err != nil {
		// Members' clients catch up on the next sync with versions.
		p.seq.log.Error().Err(err).Str("conversation", c.ConversationID).Msg("publish change")
	}
	if o := p.seq.cfg.Observer; o != nil {
		o.Changed(c)
	}
}

// republish publishes again the stored messages from..to of a conversation whose lastSeq trails
// its messages: they were stored by a batch whose end this owner never saw (an insert whose answer
// was lost when the store went away, or an owner that died between persist and fan-out), so they
// may never have been published. It runs before the conversation's next seq is assigned, so live
// members get them in seq order; receivers drop the seqs they have. Only the last MaxBatch are
// looked at: one lost batch.
func (p *partition) republish(ctx context.Context, conversationID string, from, to int64) {
	msgs, err := p.seq.store.MessageRange(ctx, conversationID, from, to)
	if err != nil {
		// Members' clients fill the gap from history when the next message arrives.
		p.seq.log.Warn().Err(err).Str("conversation", conversationID).Msg("read unconfirmed messages to publish")
		return
	}
	for _, m := range msgs {
		p.publishOne(message.View(m, ""))
	}
}

// publishOne sends one stored message to its conversation's fan-out subject.
func (p *partition) publishOne(m protocol.Message) {
	data, err := json.Marshal(m)
	if err != nil {
		p.seq.log.Error().Err(err).Msg("encode message event")
		return
	}
	if err := p.seq.nc.Publish(p.seq.MessageSubject(m.ConversationID), data); err != nil {
		// Members' clients fill the gap from history when the next message arrives.
		p.seq.log.Error().Err(err).Str("conversation", m.ConversationID).Msg("publish message")
	}
	if o := p.seq.cfg.Observer; o != nil {
		var members []string
		if c, ok := p.convs[m.ConversationID]; ok {
			members = slices.Collect(maps.Keys(c.members))
		}
		o.Stored(m, members)
	}
}

func (p *partition) respond(subject string, r reply) {
	if subject == "" {
		return
	}
	data, err := json.Marshal(r)
	if err != nil {
		p.seq.log.Error().Err(err).Msg("encode reply")
		return
	}
	if err := p.seq.nc.Publish(subject, data); err != nil {
		p.seq.log.Warn().Err(err).Msg("send reply")
	}
}

// reload re-reads a conversation's members, keeping its lastSeq (sends of this batch may already
// hold seqs past the stored one); a conversation that no longer exists is forgotten.
func (p *partition) reload(ctx context.Context, id string) {
	c, ok := p.convs[id]
	if !ok {
		return // not cached: the next send loads it fresh
	}
	conv, err := p.seq.store.Conversation(ctx, id)
	if err != nil {
		// Deleted, or the store failed: either way the next send loads it fresh.
		delete(p.convs, id)
		return
	}
	c.hold(conv)
}

func memberSet(members []string) map[string]bool {
	set := make(map[string]bool, len(members))
	for _, m := range members {
		set[m] = true
	}
	return set
}

// conversation returns the owner's state of a conversation, recovering it from the store on first
// use: lastSeq is the larger of the counter and the highest claimed seq, since the claims are
// the truth (storage.RecoverSeq, which also seals a full bucket a failed owner left unsealed).
func (p *partition) conversation(ctx context.Context, id string) (*conversationState, error) {
	if c, ok := p.convs[id]; ok {
		return c, nil
	}
	conv, err := p.seq.store.Conversation(ctx, id)
	if err != nil {
		return nil, err
	}
	high, err := p.seq.store.RecoverSeq(ctx, id)
	if err != nil {
		return nil, err
	}
	// Seqs stored above the raised counters may be from a batch that never published them; a
	// read of open counters folds those in too, so they count from the raised lastSeq.
	counted := conv.LastSeq
	if conv.CountersOpen {
		counted = conv.RaisedSeq
	}
	if high > counted {
		p.republish(ctx, id, max(counted+1, high-int64(p.seq.cfg.MaxBatch)+1), high)
	}
	c := &conversationState{lastSeq: max(conv.LastSeq, high), lastVersion: conv.LastVersion, mentioned: conv.Mentioned}
	c.hold(conv)
	if conv.CountersOpen {
		// Its last owner left the counters open, and may have run ahead of them: the next raise
		// writes all that a reader folds in now, so none of it is lost when lastSeq passes it, and
		// closes them if no batch does it first.
		c.ahead = storage.Counters{Newest: conv.LastMessage, Senders: maps.Clone(conv.Senders)}
		p.open[id] = true
		c.unwritten(conv.Mentioned)
	}
	if len(p.convs) >= maxCachedConversations {
		for evict := range p.convs {
			delete(p.convs, evict)
			break
		}
	}
	p.convs[id] = c
	return c, nil
}

func messagesOf(entries []*entry) []storage.Message {
	out := make([]storage.Message, len(entries))
	for i, e := range entries {
		out[i] = e.msg
	}
	return out
}

func markStored(entries []*entry) {
	for _, e := range entries {
		m := message.View(e.msg, "")
		e.result, e.stored = &m, &m
	}
}

// previewOf is what a conversation list shows of m (storage.Message.Preview).
func previewOf(m protocol.Message) storage.MessagePreview {
	stored := storage.Message{Seq: m.Seq, SenderID: m.SenderID, Kind: m.Kind, Body: m.Body, CreatedAt: m.CreatedAt}
	if len(m.Attachments) > 0 {
		stored.Attachments = []storage.Attachment{{Name: m.Attachments[0].Name, Width: m.Attachments[0].Width}}
	}
	return stored.Preview()
}
