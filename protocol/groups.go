package protocol

import (
	"encoding/hex"
	"strings"
	"time"
)

// Running a group (issue 37): the moderate frame and what a conversation view says of a group's
// roles and settings. docs/PROTOCOL.md "Running a group" describes them.

// TypeModerate is the client frame of every administrative change of a group besides adding,
// removing and leaving (add_members, remove_member, leave): Action says which.
const TypeModerate = "moderate"

// Actions of a moderate frame.
const (
	ActionPromote      = "promote"      // userId becomes an admin (the owner only)
	ActionDemote       = "demote"       // userId stops being an admin (the owner only)
	ActionTransfer     = "transfer"     // userId becomes the owner; the old owner stays an admin
	ActionRename       = "rename"       // the group's name becomes name
	ActionSetTopic     = "set_topic"    // the group's topic becomes topic ("" clears it)
	ActionAnnouncement = "announcement" // enabled: only admins post
	ActionSlowMode     = "slow_mode"    // a member sends at most once every seconds (0: off)
	ActionMute         = "mute"         // userId cannot send for seconds
	ActionUnmute       = "unmute"       // userId may send again
	ActionBan          = "ban"          // userId is removed and cannot come back until unbanned
	ActionUnban        = "unban"        // userId may be added again
	ActionPin          = "pin"          // message seq is pinned
	ActionUnpin        = "unpin"        // message seq is no longer pinned
	// ActionCreateInvite makes an invite link (expiring after seconds, 0 never; at most maxUses
	// joins, 0 no limit); the reply is an invite frame with its token.
	ActionCreateInvite  = "create_invite"
	ActionRevokeInvite  = "revoke_invite"  // the link token no longer joins
	ActionDismissReport = "dismiss_report" // report reportId is closed
)

// Client frames about invite links and reports, besides the moderate actions.
const (
	TypeListInvites   = "list_invites"   // an admin lists a group's links: answered with invites
	TypeInvitePreview = "invite_preview" // what link token joins: answered with invite
	TypeJoinInvite    = "join_invite"    // join by link token: answered with conversation
	TypeReport        = "report"         // report message seq to the group's admins with reason
	TypeListReports   = "list_reports"   // an admin lists a group's open reports: answered with reports
)

// Server frames about invite links and reports.
const (
	TypeInvite  = "invite"
	TypeInvites = "invites"
	TypeReports = "reports"
)

// Bounds of a group's settings.
const (
	// MaxTopicBytes bounds a group's topic: a line under its name, not a document.
	MaxTopicBytes = 500
	// MaxSlowModeSeconds bounds slow mode at a day: a longer wait is an announcement group.
	MaxSlowModeSeconds = 24 * 60 * 60
	// MaxMuteSeconds bounds a mute at a year; a member muted for longer should be removed.
	MaxMuteSeconds = 365 * 24 * 60 * 60
	// MaxPins bounds the pinned messages of a group, so a conversation view stays small.
	MaxPins = 50
	// MaxInvites bounds a group's live invite links (expired and used-up ones are dropped).
	MaxInvites = 20
	// MaxOpenReports bounds a group's open reports, which its document holds.
	MaxOpenReports = 100
	// MaxReasonBytes bounds a report's reason.
	MaxReasonBytes = 500
)

// Invite is an invite link: to an admin listing them, all of it; to whoever previews a token,
// the group's name and member count.
type Invite struct {
	Token          string     `json:"token"`
	ConversationID string     `json:"conversationId"`
	Name           string     `json:"name,omitempty"`
	Members        int        `json:"members,omitempty"`
	CreatedBy      string     `json:"createdBy,omitempty"`
	CreatedAt      *time.Time `json:"createdAt,omitempty"`
	ExpiresAt      *time.Time `json:"expiresAt,omitempty"`
	MaxUses        int64      `json:"maxUses,omitempty"`
	Uses           int64      `json:"uses,omitempty"`
}

// Report is a member's report of a message to a group's admins.
type Report struct {
	ID             string    `json:"id"`
	ConversationID string    `json:"conversationId"`
	Seq            int64     `json:"seq"`
	Reporter       string    `json:"reporter"`
	Reason         string    `json:"reason"`
	CreatedAt      time.Time `json:"createdAt"`
}

// ValidInviteToken reports whether token has the shape of an invite link's: the group's id, an
// underscore, and 32 hex digits.
func ValidInviteToken(token string) bool {
	i := strings.LastIndexByte(token, '_')
	if i < 1 || len(token)-i-1 != inviteSecretHex || !ValidID(token) {
		return false
	}
	_, err := hex.DecodeString(token[i+1:])
	return err == nil
}

// inviteSecretHex is the length of an invite token's secret part: 128 random bits in hex.
const inviteSecretHex = 32

// InviteConversation is the group an invite token (ValidInviteToken) joins.
func InviteConversation(token string) string { return token[:strings.LastIndexByte(token, '_')] }

// validateGroupFrame checks the invite and report frames.
func (f *ClientFrame) validateGroupFrame() error {
	switch f.Type {
	case TypeInvitePreview, TypeJoinInvite:
		if !ValidInviteToken(f.Token) {
			return Errorf(CodeInvalidField, "token is not an invite link's")
		}
		return nil
	case TypeReport:
		if err := requireMessage(f); err != nil {
			return err
		}
		if f.Reason == "" || len(f.Reason) > MaxReasonBytes {
			return Errorf(CodeInvalidField, "reason must be 1 to %d bytes", MaxReasonBytes)
		}
		return nil
	default: // list_invites, list_reports
		return requireID("conversationId", f.ConversationID)
	}
}

// Roles of a group's members.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// GroupInfo is how a group is run, in its conversation view (Conversation.Group); a DM has none.
// Members not named Owner or in Admins are plain members.
type GroupInfo struct {
	Owner           string   `json:"owner"`
	Admins          []string `json:"admins,omitempty"`
	Topic           string   `json:"topic,omitempty"`
	Announcement    bool     `json:"announcement,omitempty"`
	SlowModeSeconds int64    `json:"slowModeSeconds,omitempty"`
	Muted           []Mute   `json:"muted,omitempty"`
	Banned          []string `json:"banned,omitempty"`
	Pins            []int64  `json:"pins,omitempty"`
}

// Mute is a member who cannot send until Until.
type Mute struct {
	UserID string    `json:"userId"`
	Until  time.Time `json:"until"`
}

// validateModerate checks a moderate frame: the conversation, and the fields its action needs.
func (f *ClientFrame) validateModerate() error {
	if err := requireID("conversationId", f.ConversationID); err != nil {
		return err
	}
	switch f.Action {
	case ActionPromote, ActionDemote, ActionTransfer, ActionUnmute, ActionBan, ActionUnban:
		return requireID("userId", f.UserID)
	case ActionMute:
		if f.Seconds < 1 || f.Seconds > MaxMuteSeconds {
			return Errorf(CodeInvalidField, "seconds must be 1 to %d", MaxMuteSeconds)
		}
		return requireID("userId", f.UserID)
	case ActionRename:
		if f.Name == "" || len(f.Name) > MaxNameBytes {
			return Errorf(CodeInvalidField, "name must be 1 to %d bytes", MaxNameBytes)
		}
	case ActionSetTopic:
		if len(f.Topic) > MaxTopicBytes {
			return Errorf(CodeInvalidField, "topic is longer than %d bytes", MaxTopicBytes)
		}
	case ActionAnnouncement:
		if f.Enabled == nil {
			return Errorf(CodeInvalidField, "enabled is required")
		}
	case ActionSlowMode:
		if f.Seconds < 0 || f.Seconds > MaxSlowModeSeconds {
			return Errorf(CodeInvalidField, "seconds must be 0 to %d", MaxSlowModeSeconds)
		}
	case ActionPin, ActionUnpin:
		if f.Seq < 1 {
			return Errorf(CodeInvalidField, "seq must be at least 1")
		}
	case ActionCreateInvite:
		if f.Seconds < 0 || f.MaxUses < 0 {
			return Errorf(CodeInvalidField, "seconds and maxUses must not be negative")
		}
	case ActionRevokeInvite:
		if !ValidInviteToken(f.Token) {
			return Errorf(CodeInvalidField, "token is not an invite link's")
		}
	case ActionDismissReport:
		return requireID("reportId", f.ReportID)
	case "":
		return Errorf(CodeInvalidField, "action is required")
	default:
		return Errorf(CodeInvalidField, "unknown action %q", truncate(f.Action, 40))
	}
	return nil
}
