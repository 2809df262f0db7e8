package chat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// ModerateRequest is one moderate frame: an administrative change of a group (see
// protocol.TypeModerate for the actions and the fields each takes).
type ModerateRequest struct {
	Action  string
	UserID  string
	Name    string
	Topic   string
	Enabled bool
	Seconds int64
	Seq     int64
	// Token is the invite link revoke_invite revokes; ReportID the report dismiss_report closes.
	Token    string
	ReportID string
}

// Moderate makes an administrative change of a group userID is in: roles, name, topic,
// settings, mutes, bans, pins. The conversation's owner checks it against the group's rules and
// tells the group with a system message; a banned member is taken out like a removed one.
func (s *membership) Moderate(ctx context.Context, userID, convID string, req ModerateRequest) error {
	if _, err := s.positionOf(userID, convID); err != nil {
		return err
	}
	op := group.Op{Action: req.Action, Enabled: req.Enabled, Seconds: req.Seconds, Seq: req.Seq}
	switch req.Action {
	case protocol.ActionRename:
		op.Text = req.Name
	case protocol.ActionSetTopic:
		op.Text = req.Topic
	case protocol.ActionRevokeInvite:
		op.ID = req.Token
	case protocol.ActionDismissReport:
		op.ID = req.ReportID
	}
	if req.UserID != "" {
		op.Users = []string{req.UserID}
	}
	_, u, err := s.administer(ctx, userID, convID, op)
	if err != nil {
		return err
	}
	s.removed(convID, u)
	return nil
}

// administer asks the conversation's owner to make an administrative change of a group by
// userID, and returns the system message that told the group and what changed.
func (s *membership) administer(ctx context.Context, userID, convID string, op group.Op) (protocol.Message, storage.GroupUpdate, error) {
	m, u, err := s.seq.Administer(ctx, sequencer.SendRequest{ConversationID: convID, SenderID: userID,
		ClientMsgID: uuid.NewString(), Group: &op})
	var refusal *protocol.Error
	switch {
	case errors.Is(err, protocol.ErrUnavailable):
		s.log.Warn().Err(err).Str("conversation", convID).Msg("group change not acknowledged")
		return m, u, protocol.Refuse(protocol.ErrUnavailable, "the group may not have changed; try again")
	case errors.As(err, &refusal):
		return m, u, refusal // the owner's word, with its reason
	case err != nil:
		return m, u, fmt.Errorf("%s in %s: %w", op.Action, convID, err)
	}
	return m, u, nil
}

// removed takes the member a change removed (if any) out of the conversation: here at once, so
// their next frame is refused, and on their other nodes through the bus.
func (s *membership) removed(convID string, u storage.GroupUpdate) {
	if u.Remove == "" {
		return
	}
	s.applyLeave(u.Remove, convID)
	s.publishUser(u.Remove, userEvent{Type: userLeft, ConvID: convID})
}

// CreateInvite makes an invite link of a group userID runs, expiring after seconds (0: never)
// and joining at most maxUses times (0: no limit). Its token is the group's id and 128 random
// bits: whoever holds it may join.
func (s *membership) CreateInvite(ctx context.Context, userID, convID string, seconds, maxUses int64) (protocol.Invite, error) {
	if _, err := s.positionOf(userID, convID); err != nil {
		return protocol.Invite{}, err
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret) // crypto/rand never fails
	token := convID + "_" + hex.EncodeToString(secret)
	if _, _, err := s.administer(ctx, userID, convID, group.Op{Action: protocol.ActionCreateInvite, ID: token,
		Seconds: seconds, MaxUses: maxUses}); err != nil {
		return protocol.Invite{}, err
	}
	invites, err := s.Invites(ctx, userID, convID)
	if err != nil {
		return protocol.Invite{}, err
	}
	for _, i := range invites {
		if i.Token == token {
			return i, nil
		}
	}
	return protocol.Invite{}, fmt.Errorf("invite link of %s not found right after it was made", convID)
}

// Invites lists the live invite links of a group userID runs.
func (s *membership) Invites(ctx context.Context, userID, convID string) ([]protocol.Invite, error) {
	c, err := s.runGroup(ctx, userID, convID, "see its invite links")
	if err != nil {
		return nil, err
	}
	out := []protocol.Invite{}
	for _, i := range c.Admin.Invites {
		if _, err := group.FindInvite(c, i.Token, time.Now()); err == nil {
			out = append(out, protocol.Invite{Token: i.Token, ConversationID: c.ID, Name: c.Name, Members: len(c.Members),
				CreatedBy: i.CreatedBy, CreatedAt: &i.CreatedAt, ExpiresAt: i.ExpiresAt, MaxUses: i.MaxUses, Uses: i.Uses})
		}
	}
	return out, nil
}

// runGroup loads a group userID is an admin of, or refuses: the reads of what only admins see
// (links, reports). Changes are checked by the conversation's owner instead.
func (s *membership) runGroup(ctx context.Context, userID, convID, what string) (storage.Conversation, error) {
	c, err := s.group(ctx, userID, convID)
	if err != nil {
		return storage.Conversation{}, err
	}
	if !group.IsAdmin(group.Of(c), userID) {
		return storage.Conversation{}, protocol.Refuse(protocol.ErrForbidden, "only the group's admins can %s", what)
	}
	if c.Admin == nil {
		c.Admin = &storage.GroupAdmin{Owner: c.CreatedBy}
	}
	return c, nil
}

// loadInvite reads the group an invite token joins and the link as it stands.
func (s *membership) loadInvite(ctx context.Context, token string) (storage.Conversation, storage.Invite, error) {
	c, err := s.store.Conversation(ctx, protocol.InviteConversation(token))
	if errors.Is(err, storage.ErrNotFound) {
		return c, storage.Invite{}, protocol.Refuse(protocol.ErrNotFound, "no such invite link: it may have been revoked")
	}
	if err != nil {
		return c, storage.Invite{}, fmt.Errorf("load the group of an invite link: %w", err)
	}
	i, err := group.FindInvite(c, token, time.Now())
	return c, i, err
}

// PreviewInvite is what an invite link joins: the group's name and member count, for whoever
// holds the token.
func (s *membership) PreviewInvite(ctx context.Context, token string) (protocol.Invite, error) {
	c, _, err := s.loadInvite(ctx, token)
	if err != nil {
		return protocol.Invite{}, err
	}
	return protocol.Invite{Token: token, ConversationID: c.ID, Name: c.Name, Members: len(c.Members)}, nil
}

// JoinInvite makes userID a member of the group an invite link joins, unless they are banned
// from it (the conversation's owner checks the link and counts its use); a member already gets
// the group as it is.
func (s *membership) JoinInvite(ctx context.Context, userID, token string) (protocol.Conversation, error) {
	convID := protocol.InviteConversation(token)
	m, u, err := s.administer(ctx, userID, convID, group.Op{Action: group.OpJoin, ID: token})
	if err != nil {
		return protocol.Conversation{}, err
	}
	c, err := s.store.Conversation(ctx, convID)
	if err != nil {
		return protocol.Conversation{}, fmt.Errorf("load %s after a join: %w", convID, err)
	}
	if len(u.Add) > 0 {
		view := toView(c, position{}, m.Seq)
		// Here at once, so the reply's conversation is live for the joiner; the bus tells their
		// other nodes.
		s.applyJoin(userID, view, c.DeletedSeqs)
		s.publishUser(userID, userEvent{Type: userJoined, Conversation: &view, DeletedSeqs: c.DeletedSeqs})
	}
	p, err := s.positionOf(userID, convID)
	if err != nil {
		return protocol.Conversation{}, err
	}
	return toView(c, p, s.lastSeq(convID, p)), nil
}

// Report reports message seq of a group to its admins, with reason; the group is not told. The
// admins' devices get it at once (a reports push); a lost push leaves it in list_reports.
func (s *membership) Report(ctx context.Context, userID, convID string, seq int64, reason string) error {
	if _, err := s.positionOf(userID, convID); err != nil {
		return err
	}
	id := uuid.NewString()
	if _, u, err := s.administer(ctx, userID, convID, group.Op{Action: group.OpReport, ID: id, Seq: seq, Text: reason}); err != nil || len(u.Admin.Reports) == 0 {
		return err // a repeat of the member's report changed nothing: the admins have it
	}
	c, err := s.store.Conversation(ctx, convID)
	if err != nil {
		return fmt.Errorf("load %s to tell its admins of a report: %w", convID, err)
	}
	for _, r := range reportsOf(c) {
		if r.ID != id {
			continue
		}
		for _, admin := range append([]string{c.Admin.Owner}, c.Admin.Admins...) {
			s.publishUser(admin, userEvent{Type: userReport, ConvID: convID, Report: &r})
		}
	}
	return nil
}

// Reports lists the open reports of a group userID runs, oldest first.
func (s *membership) Reports(ctx context.Context, userID, convID string) ([]protocol.Report, error) {
	c, err := s.runGroup(ctx, userID, convID, "see its reports")
	if err != nil {
		return nil, err
	}
	return reportsOf(c), nil
}

// OpenReports lists the open reports of group convID, oldest first, for the operators (the
// admin API); not_found when there is no such conversation.
func (s *membership) OpenReports(ctx context.Context, convID string) ([]protocol.Report, error) {
	c, err := s.store.Conversation(ctx, convID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, protocol.Refuse(protocol.ErrNotFound, "no conversation %s", convID)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s for its reports: %w", convID, err)
	}
	return reportsOf(c), nil
}

// reportsOf is the open reports of group c, oldest first: what its admins and the operators see.
func reportsOf(c storage.Conversation) []protocol.Report {
	out := []protocol.Report{}
	if c.Admin == nil {
		return out
	}
	for _, r := range c.Admin.Reports {
		out = append(out, protocol.Report{ID: r.ID, ConversationID: c.ID, Seq: r.Seq, Reporter: r.Reporter, Reason: r.Reason, CreatedAt: r.CreatedAt})
	}
	return out
}
