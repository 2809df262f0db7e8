package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
)

// socket is a session as the chat service sees it.
type socket struct{ *session.Session }

// End closes the socket because its user is gone.
func (s socket) End(reason string) { s.Close(session.StatusRemoved, reason) }

// router answers a session's frames by calling the chat service (through opening, which
// greets the session first). The service's refusals are
// already *protocol.Error; the session turns them into error frames (protocol.ErrorFrame).
type router struct {
	chat *chat.Service
	// account reads a user's account through the server's short cache (filled by the account
	// check a moment before Opened), and forgetAccount drops it there after a change.
	account       func(ctx context.Context, userID string) (storage.User, error)
	forgetAccount func(userID string)
	sendTimeout   time.Duration
	opTimeout     time.Duration
	metrics       *Metrics
	log           zerolog.Logger
}

// opening is the router of one new session, with the account its check has just read from the
// store (nil if the check found it in the cache): the service's load of the user's state takes
// it from there instead of reading it again, which is a third of a first connect's store reads.
type opening struct {
	*router
	account *storage.User
}

// Opened greets the session and registers it with the service.
func (o *opening) Opened(ctx context.Context, s *session.Session) error {
	account := o.account
	o.account = nil // the session keeps its handler: hold no copy of the account for its life
	r := o.router
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	// hello is the first frame: queued before the service may push anything to the socket.
	user, err := r.account(ctx, s.UserID()) // the check has just cached it
	if err != nil {
		return fmt.Errorf("load the account of %s: %w", s.UserID(), err)
	}
	if err := s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeHello, UserID: s.UserID(), Name: user.Name, SessionID: s.ID()}); err != nil {
		return err
	}
	total, err := r.chat.Open(ctx, socket{s}, account)
	if err != nil {
		if errors.Is(err, protocol.ErrRateLimited) { // the only one Open gives: the connection cap
			r.metrics.refused(reasonTooManyConns)
		} else {
			r.metrics.refused(reasonOpenFailed)
		}
		return err // rate_limited closes with 4029
	}
	if err := s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeBadge, Total: &total}); err != nil {
		r.chat.Close(socket{s}) // Closed is called only after Opened succeeded
		return err
	}
	return nil
}

// Closed unregisters the session.
func (r *router) Closed(s *session.Session) { r.chat.Close(socket{s}) }

// HandleFrame answers one client frame. Identity always comes from the session.
func (r *router) HandleFrame(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	timeout := r.opTimeout
	if f.WritesMessage() {
		timeout = r.sendTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := r.answer(ctx, s, f)
	if err != nil {
		return err
	}
	if reply == nil {
		return nil
	}
	reply.ID = f.ID
	return s.Reply(ctx, *reply)
}

// answer runs a frame's operation and returns its reply, or nil for frames answered by nothing.
func (r *router) answer(ctx context.Context, s *session.Session, f protocol.ClientFrame) (*protocol.ServerFrame, error) {
	uid, conv := s.UserID(), f.ConversationID
	ok := &protocol.ServerFrame{Type: protocol.TypeOK}
	switch f.Type {
	case protocol.TypeSend:
		m, err := r.chat.Send(ctx, uid, chat.SendRequest{ConversationID: conv, ClientMsgID: f.ClientMsgID, Body: f.Body, ReplyTo: f.ReplyTo,
			Attachments: f.Attachments})
		if err != nil {
			return nil, err
		}
		return &protocol.ServerFrame{Type: protocol.TypeAck, ConversationID: m.ConversationID, Seq: m.Seq,
			ClientMsgID: m.ClientMsgID, CreatedAt: &m.CreatedAt}, nil
	case protocol.TypeOpenDM:
		return conversationReply(r.chat.OpenDM(ctx, uid, f.UserID))
	case protocol.TypeCreateGroup:
		return conversationReply(r.chat.CreateGroup(ctx, uid, f.Name, f.Members))
	case protocol.TypeListConversations:
		views, err := r.chat.ListConversations(ctx, uid)
		return &protocol.ServerFrame{Type: protocol.TypeConversations, Conversations: views}, err
	case protocol.TypeSync:
		views, err := r.chat.Sync(ctx, socket{s}, f.Since, f.Versions)
		return &protocol.ServerFrame{Type: protocol.TypeSynced, Conversations: views}, err
	case protocol.TypeHistory:
		p, err := r.chat.History(ctx, uid, conv, chat.Anchor{Before: f.Before, After: f.After, Around: f.Around, Fraction: f.Fraction}, f.PageLimit())
		return &protocol.ServerFrame{Type: protocol.TypePage, ConversationID: conv, Messages: p.Messages,
			FirstSeq: p.FirstSeq, LastSeq: p.LastSeq, HasBefore: p.HasBefore, HasAfter: p.HasAfter}, err
	case protocol.TypeRead:
		return nil, r.chat.Read(ctx, uid, conv, f.Seq)
	case protocol.TypeDelivered:
		return nil, r.chat.Delivered(uid, conv, f.Seq)
	case protocol.TypeReceipts:
		rc, err := r.chat.Receipts(ctx, uid, conv, f.Seq)
		return &protocol.ServerFrame{Type: protocol.TypeReceiptCount, ConversationID: conv, Seq: f.Seq,
			DeliveredTo: &rc.DeliveredTo, ReadBy: &rc.ReadBy, Readers: rc.Readers}, err
	case protocol.TypeTyping:
		return nil, r.chat.Typing(uid, conv)
	case protocol.TypeSetPrivacy:
		if f.HideReceipts != nil {
			if err := r.chat.SetPrivacy(ctx, uid, *f.HideReceipts); err != nil {
				return nil, err
			}
		}
		if f.HidePresence != nil {
			if err := r.chat.SetPresencePrivacy(ctx, uid, *f.HidePresence); err != nil {
				return nil, err
			}
		}
		return ok, nil
	case protocol.TypeSetName:
		if err := r.chat.SetName(ctx, uid, f.Name); err != nil {
			return nil, err
		}
		r.forgetAccount(uid) // a reconnect's hello here says the new name
		return ok, nil
	case protocol.TypeProfiles:
		users, err := r.chat.Profiles(ctx, f.UserIDs)
		return &protocol.ServerFrame{Type: protocol.TypeProfiles, Users: &users}, err
	case protocol.TypeFindUsers:
		users, err := r.chat.FindUsers(ctx, uid, f.Query)
		return &protocol.ServerFrame{Type: protocol.TypeProfiles, Users: &users}, err
	case protocol.TypeSetNotify:
		return ok, r.chat.SetNotify(ctx, uid, conv, f.Notify)
	case protocol.TypeSearch:
		p, err := r.chat.Search(ctx, uid, chat.SearchRequest{Query: f.Query, ConversationID: conv, Cursor: f.Cursor, Limit: f.Limit})
		return &protocol.ServerFrame{Type: protocol.TypeSearchResults, Hits: &p.Hits, Cursor: p.Next}, err
	case protocol.TypePresence:
		list, err := r.chat.Presence(ctx, uid, f.UserIDs)
		return &protocol.ServerFrame{Type: protocol.TypePresenceList, Presence: list}, err
	case protocol.TypeAddMembers:
		return ok, r.chat.AddMembers(ctx, uid, conv, f.Members)
	case protocol.TypeRemoveMember:
		return ok, r.chat.RemoveMember(ctx, uid, conv, f.UserID)
	case protocol.TypeLeave:
		return ok, r.chat.RemoveMember(ctx, uid, conv, uid)
	case protocol.TypeModerate:
		return r.moderate(ctx, uid, f)
	case protocol.TypeListInvites:
		list, err := r.chat.Invites(ctx, uid, conv)
		return &protocol.ServerFrame{Type: protocol.TypeInvites, ConversationID: conv, Invites: &list}, err
	case protocol.TypeInvitePreview:
		inv, err := r.chat.PreviewInvite(ctx, f.Token)
		return &protocol.ServerFrame{Type: protocol.TypeInvite, Invite: &inv}, err
	case protocol.TypeJoinInvite:
		return conversationReply(r.chat.JoinInvite(ctx, uid, f.Token))
	case protocol.TypeReport:
		return ok, r.chat.Report(ctx, uid, conv, f.Seq, f.Reason)
	case protocol.TypeListReports:
		list, err := r.chat.Reports(ctx, uid, conv)
		return &protocol.ServerFrame{Type: protocol.TypeReports, ConversationID: conv, Reports: &list}, err
	case protocol.TypeDeleteMessage:
		return ok, r.chat.DeleteMessage(ctx, uid, conv, f.Seq)
	case protocol.TypeEditMessage:
		return ok, r.chat.EditMessage(ctx, uid, conv, f.Seq, f.Body)
	case protocol.TypeReact:
		return ok, r.chat.React(ctx, uid, conv, f.Seq, f.Emoji, f.Remove)
	case protocol.TypeReactions:
		list, err := r.chat.Reactions(ctx, uid, conv, f.Seq)
		return &protocol.ServerFrame{Type: protocol.TypeReactionList, ConversationID: conv, Seq: f.Seq, Reactions: list}, err
	case protocol.TypeFocus:
		return ok, r.chat.Focus(socket{s}, conv)
	case protocol.TypeHideConversation:
		return ok, r.chat.HideConversation(ctx, uid, conv)
	case protocol.TypeBlockUser:
		return ok, r.chat.Block(ctx, uid, f.UserID)
	case protocol.TypeUnblockUser:
		return ok, r.chat.Unblock(ctx, uid, f.UserID)
	case protocol.TypeListBlocks:
		ids, err := r.chat.Blocks(ctx, uid)
		return &protocol.ServerFrame{Type: protocol.TypeBlocks, UserIDs: ids}, err
	default:
		return nil, protocol.Errorf(protocol.CodeUnknownType, "frame type %q is not supported", f.Type)
	}
}

// moderate answers a moderate frame: ok, or for create_invite the new link.
func (r *router) moderate(ctx context.Context, uid string, f protocol.ClientFrame) (*protocol.ServerFrame, error) {
	if f.Action == protocol.ActionCreateInvite {
		inv, err := r.chat.CreateInvite(ctx, uid, f.ConversationID, f.Seconds, f.MaxUses)
		return &protocol.ServerFrame{Type: protocol.TypeInvite, Invite: &inv}, err
	}
	enabled := f.Enabled != nil && *f.Enabled
	return &protocol.ServerFrame{Type: protocol.TypeOK}, r.chat.Moderate(ctx, uid, f.ConversationID, chat.ModerateRequest{
		Action: f.Action, UserID: f.UserID, Name: f.Name, Topic: f.Topic, Enabled: enabled, Seconds: f.Seconds, Seq: f.Seq,
		Token: f.Token, ReportID: f.ReportID})
}

func conversationReply(c protocol.Conversation, err error) (*protocol.ServerFrame, error) {
	return &protocol.ServerFrame{Type: protocol.TypeConversation, Conversation: &c}, err
}
