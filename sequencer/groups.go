package sequencer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Running a group goes through the conversation's owner (SendRequest.Group), like sends and
// changes: the owner holds the group's roles and settings with its members, checks each change
// against the rules of the group package there, writes it (storage.UpdateGroup) and then
// sequences the system message that tells the group who did what, in the same batch. So every
// permission is checked by the one writer of the conversation, in one order: two admins on two
// nodes cannot race past a rule, and a demoted admin's next request is refused whatever node it
// comes from. The same state decides who may send now (announcement groups, mutes, slow mode)
// and who may delete another member's message.

// Administer makes an administrative change of a group through its owner and returns the system
// message that tells the group, and what changed; a change that changes nothing (a repeat) is
// answered with a message without a seq and an empty update. Refusals are the owner's (see
// group.Apply), or protocol.ErrUnavailable when nothing is known to be stored.
func (s *Sequencer) Administer(ctx context.Context, req SendRequest) (protocol.Message, storage.GroupUpdate, error) {
	r, err := s.ask(ctx, req)
	if err != nil {
		return protocol.Message{}, storage.GroupUpdate{}, err
	}
	var u storage.GroupUpdate
	if r.Group != nil {
		u = *r.Group
	}
	return *r.Message, u, nil
}

// groupOf is a conversation as the group rules see it.
func (c *conversationState) groupOf() group.Group {
	return group.Group{Kind: c.kind, Name: c.name, CreatedBy: c.createdBy, Members: c.members, Admin: c.admin, LastSeq: c.lastSeq}
}

// hold keeps what the owner needs of a stored conversation besides its counters.
func (c *conversationState) hold(conv storage.Conversation) {
	c.members, c.kind, c.name, c.createdBy, c.admin = memberSet(conv.Members), conv.Kind, conv.Name, conv.CreatedBy, conv.Admin
}

// administer checks e's change of its group against the rules, writes it, and then makes e the
// system message that tells the group, sequenced like a send. A change that changes nothing is
// answered at once and says nothing. A write that fails answers unavailable and forgets the
// conversation: a retry finds the change made, or makes it.
func (p *partition) administer(ctx context.Context, e *entry, key string, msgs *batchMessages) {
	c := p.member(ctx, e, key)
	if c == nil {
		return
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	res, err := group.Apply(c.groupOf(), e.req.SenderID, *e.req.Group, now)
	var refusal *protocol.Error
	switch {
	case errors.As(err, &refusal):
		e.refused, e.reason = refusal, failRefused
		return
	case err != nil:
		p.seq.log.Error().Err(err).Str("conversation", e.req.ConversationID).Msg("change a group")
		e.refused, e.reason = protocol.ErrUnavailable, failInvalid
		return
	case !res.Changed:
		e.result = &protocol.Message{ConversationID: e.req.ConversationID}
		return
	}
	if err := p.seq.store.UpdateGroup(ctx, e.req.ConversationID, res.Update); err != nil {
		p.seq.log.Error().Err(fmt.Errorf("write a change of group %s: %w", e.req.ConversationID, err)).Msg("change a group")
		p.fail([]*entry{e}, failStore)
		return
	}
	u := res.Update
	c.name, c.admin, e.group = u.Name, &u.Admin, &u
	for _, m := range u.Add {
		c.members[m] = true
	}
	if u.Remove != "" {
		delete(c.members, u.Remove)
		delete(c.lastSent, u.Remove)
	}
	if res.Body == "" { // a report, or its dismissal: the admins' alone, nothing said
		e.result = &protocol.Message{ConversationID: e.req.ConversationID}
		return
	}
	e.req.Kind, e.req.Body = protocol.KindSystem, res.Body
	p.assign(ctx, e, key, msgs)
}

// joins reports whether r is a join by invite link: the one request of a user not a member yet.
func (r SendRequest) joins() bool { return r.Group != nil && r.Group.Action == group.OpJoin }

// checkSend refuses e's message when its group's settings do not let its sender post now, and
// otherwise remembers when they did, for slow mode (in memory: a new owner starts the wait anew).
func (p *partition) checkSend(c *conversationState, e *entry) bool {
	if e.req.Kind != protocol.KindText || c.admin == nil {
		return true
	}
	now := time.Now()
	if err := group.CheckSend(c.groupOf(), e.req.SenderID, c.lastSent[e.req.SenderID], now); err != nil {
		var refusal *protocol.Error
		errors.As(err, &refusal)
		e.refused, e.reason = refusal, failRefused
		return false
	}
	if c.admin.SlowModeSeconds > 0 {
		if c.lastSent == nil {
			c.lastSent = make(map[string]time.Time)
		}
		c.lastSent[e.req.SenderID] = now
	}
	return true
}
