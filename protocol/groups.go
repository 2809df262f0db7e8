package protocol

import "time"

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
)

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
	case "":
		return Errorf(CodeInvalidField, "action is required")
	default:
		return Errorf(CodeInvalidField, "unknown action %q", truncate(f.Action, 40))
	}
	return nil
}
