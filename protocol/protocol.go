// Package protocol defines the JSON text frames that browsers and tools exchange with the chat
// server over a WebSocket, and validates what clients send. It is a leaf package: the server, the
// command-line client and the tests all speak through these types, so the wire format has one
// definition. docs/PROTOCOL.md describes every frame with an example.
package protocol

import "time"

// Client frame types: what a client may send.
const (
	TypeSend              = "send"
	TypeOpenDM            = "open_dm"
	TypeCreateGroup       = "create_group"
	TypeListConversations = "list_conversations"
	TypeSync              = "sync"
	TypeHistory           = "history"
	TypeRead              = "read"
	TypeReceipts          = "receipts"
	TypeTyping            = "typing"
	TypeDeleteMessage     = "delete_message"
	TypeHideConversation  = "hide_conversation"
	TypeAddMembers        = "add_members"
	TypeRemoveMember      = "remove_member"
	TypeLeave             = "leave"
	TypeSetPrivacy        = "set_privacy"
	TypePing              = "ping"
	TypeBlockUser         = "block_user"
	TypeUnblockUser       = "unblock_user"
	TypeListBlocks        = "list_blocks"
	TypeEditMessage       = "edit_message"
	TypeReact             = "react"
	TypeReactions         = "reactions"
	TypeFocus             = "focus"
	TypeSetName           = "set_name"
	TypeFindUsers         = "find_users"
	// TypeProfiles is also a server frame: the answer to profiles and find_users.
	TypeProfiles = "profiles"
	// TypeDelivered is also a server frame: how far another member's devices have received.
	TypeDelivered = "delivered"
	// TypePresence is also a server frame: a peer came online or went offline.
	TypePresence = "presence"
	TypeSearch   = "search"
	// TypeSetNotify sets a conversation's notification setting; TypeNotify is also a server
	// frame: the setting changed (on any of the user's devices).
	TypeSetNotify = "set_notify"
	TypeNotify    = "notify"
)

// Server frame types: what the server sends. Replies carry the request's id.
const (
	TypeHello         = "hello"
	TypeAck           = "ack"
	TypeError         = "error"
	TypeMessage       = "message"
	TypeConversation  = "conversation"
	TypeConversations = "conversations"
	TypeSynced        = "synced"
	TypePage          = "page"
	TypeCursor        = "cursor"
	TypeBadge         = "badge"
	TypeReceipt       = "receipt"
	TypeReceiptCount  = "receipt_count"
	TypeOK            = "ok"
	TypeRemoved       = "removed"
	TypeHidden        = "hidden"
	TypeDeleted       = "deleted"
	TypePong          = "pong"
	TypeBlocks        = "blocks"
	TypeEdited        = "edited"
	TypeReaction      = "reaction"
	TypeReactionList  = "reaction_list"
	TypeChanges       = "changes"
	TypePresenceList  = "presence_list"
	TypeProfile       = "profile"
	TypeSearchResults = "search_results"
)

// Notification settings of a member for one conversation (set_notify, Conversation.Notify).
const (
	NotifyAll      = "all"
	NotifyMentions = "mentions"
	NotifyNothing  = "nothing"
)

// Message kinds.
const (
	KindText    = "text"
	KindDeleted = "deleted"
	KindSystem  = "system"
)

// Conversation kinds.
const (
	ConversationDM    = "dm"
	ConversationGroup = "group"
)

// Message is one sequenced message as clients see it. A deleted message keeps its seq and comes
// back with Kind "deleted" and no body, so a page of N seqs always has N entries.
type Message struct {
	ConversationID string    `json:"conversationId"`
	Seq            int64     `json:"seq"`
	SenderID       string    `json:"senderId"`
	Kind           string    `json:"kind"`
	Body           string    `json:"body,omitempty"`
	CreatedAt      time.Time `json:"createdAt"`
	ClientMsgID    string    `json:"clientMsgId,omitempty"`
	ReplyTo        int64     `json:"replyTo,omitempty"`
	// Quote is a short copy of the message ReplyTo answers, so clients render a reply without
	// loading that message.
	Quote *Quote `json:"quote,omitempty"`
	// Version is the conversation's change number of this message's last edit, reaction or
	// deletion; 0 for a message never changed. A client keeps the state with the higher version.
	Version  int64      `json:"version,omitempty"`
	EditedAt *time.Time `json:"editedAt,omitempty"`
	// Reactions are the counts per emoji, in the order each emoji was first used.
	Reactions []Reaction `json:"reactions,omitempty"`
	// RemovedBy is the admin who deleted this message of another member (a tombstone).
	RemovedBy string `json:"removedBy,omitempty"`
	// Mentions are the members the body mentions with @[userId] tokens, as the conversation's
	// owner found them when it stored (or last edited) the message.
	Mentions []string `json:"mentions,omitempty"`
	// Attachments are the files sent with the message (attachments.go), in the order sent.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Quote is the start of a replied-to message as it was when the reply was sent; Deleted says the
// message has been deleted for everyone since (or was already), and then Body is empty.
type Quote struct {
	SenderID string `json:"senderId"`
	Body     string `json:"body,omitempty"`
	Deleted  bool   `json:"deleted,omitempty"`
	// Attachment names the replied-to message's first file, for "Photo" or its name.
	Attachment *AttachmentRef `json:"attachment,omitempty"`
}

// Reaction is one emoji on a message: how many members used it, whether the viewer is one of
// them (Me, in pages, sync replays and catch-ups), and who (UserIDs, only in a reaction_list
// answer for one message).
type Reaction struct {
	Emoji   string   `json:"emoji"`
	Count   int64    `json:"count"`
	Me      bool     `json:"me,omitempty"`
	UserIDs []string `json:"userIds,omitempty"`
}

// Conversation is a conversation as one member sees it: Unread is LastSeq minus the member's
// ReadSeq, less the tombstones after it.
type Conversation struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"`
	Name    string   `json:"name,omitempty"`
	Members []string `json:"members"`
	// FirstSeq is the first seq this member may read: 1, or later after they deleted the
	// conversation for themselves; 0 while there is nothing to read.
	FirstSeq  int64     `json:"firstSeq"`
	LastSeq   int64     `json:"lastSeq"`
	ReadSeq   int64     `json:"readSeq"`
	Unread    int64     `json:"unread"`
	CreatedAt time.Time `json:"createdAt"`
	// LastMessage is the start of the newest message, for the conversation list.
	LastMessage *MessagePreview `json:"lastMessage,omitempty"`
	// CreatedBy is who created a group, or opened a DM.
	CreatedBy string `json:"createdBy,omitempty"`
	// Version is the conversation's latest change number (edits, reactions, deletions); a sync
	// with versions catches up on the changes after the one a client holds.
	Version int64 `json:"version,omitempty"`
	// Group is how a group is run: roles, settings, pins (see groups.go); nil on a DM.
	Group *GroupInfo `json:"group,omitempty"`
	// UnreadMentions counts the unread messages that mention this member.
	UnreadMentions int64 `json:"unreadMentions,omitempty"`
	// Notify is this member's notification setting for the conversation: NotifyMentions or
	// NotifyNothing; absent means NotifyAll.
	Notify string `json:"notify,omitempty"`
}

// MessagePreview is the start of a message (at most QuoteBytes of its body) as a conversation list
// shows it; a deleted message has kind "deleted" and no body.
type MessagePreview struct {
	Seq       int64     `json:"seq"`
	SenderID  string    `json:"senderId"`
	Kind      string    `json:"kind"`
	Body      string    `json:"body,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Attachment names the message's first file, for "Photo" or its name.
	Attachment *AttachmentRef `json:"attachment,omitempty"`
}

// Presence is whether a user is online, and when they were last seen if not (absent when not
// known: never seen since presence was kept).
type Presence struct {
	UserID   string     `json:"userId"`
	Online   bool       `json:"online"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// Profile is how a user shows to others: their display name, or Deleted for a deleted account
// (then Name is empty).
type Profile struct {
	UserID  string `json:"userId"`
	Name    string `json:"name"`
	Deleted bool   `json:"deleted,omitempty"`
}

// Reader is one member's read position, used in receipts.
type Reader struct {
	UserID  string `json:"userId"`
	ReadSeq int64  `json:"readSeq"`
}

// SearchHit is one message a search found: where it is, who sent it when, and the part of its
// body around the matched words.
type SearchHit struct {
	ConversationID string    `json:"conversationId"`
	Seq            int64     `json:"seq"`
	SenderID       string    `json:"senderId"`
	CreatedAt      time.Time `json:"createdAt"`
	// Snippet is plain text in runs; Match marks the matched words. Never markup.
	Snippet []SnippetRun `json:"snippet"`
}

// SnippetRun is a stretch of a snippet's text, matched or not.
type SnippetRun struct {
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}

// ClientFrame is every frame a client may send; Type says which fields matter. Validate checks
// them per type.
type ClientFrame struct {
	Type string `json:"type"`
	// ID is chosen by the client and echoed on the reply so it can match replies to requests.
	ID             string `json:"id,omitempty"`
	ConversationID string `json:"conversationId,omitempty"`
	// ClientMsgID is a uuid per send; a retry with the same value is stored once.
	ClientMsgID string   `json:"clientMsgId,omitempty"`
	Body        string   `json:"body,omitempty"`
	ReplyTo     int64    `json:"replyTo,omitempty"`
	UserID      string   `json:"userId,omitempty"`
	Name        string   `json:"name,omitempty"`
	Members     []string `json:"members,omitempty"`
	// Since maps conversation id to the highest seq the client holds (sync).
	Since map[string]int64 `json:"since,omitempty"`
	// Versions maps conversation id to the highest change version the client holds (sync).
	Versions map[string]int64 `json:"versions,omitempty"`
	// Emoji is the reaction a react frame adds, or removes with Remove.
	Emoji  string `json:"emoji,omitempty"`
	Remove bool   `json:"remove,omitempty"`
	// Seq is the message a read, receipts, delete_message, edit_message, react or reactions frame
	// is about.
	Seq int64 `json:"seq,omitempty"`
	// History anchors: at most one of Before, After, Around, At, Fraction; none means the latest page.
	Before   *int64   `json:"before,omitempty"`
	After    *int64   `json:"after,omitempty"`
	Around   *int64   `json:"around,omitempty"`
	Fraction *float64 `json:"fraction,omitempty"`
	Limit    int      `json:"limit,omitempty"`
	// HideReceipts and HidePresence are the set_privacy settings: true hides this user's read
	// position, or their online state and last seen time, from others.
	HideReceipts *bool `json:"hideReceipts,omitempty"`
	HidePresence *bool `json:"hidePresence,omitempty"`
	// UserIDs are the users a presence or profiles request asks about.
	UserIDs []string `json:"userIds,omitempty"`
	// Query is the start of a name find_users looks for, or the words a search looks for.
	Query string `json:"query,omitempty"`
	// Action, Topic, Enabled and Seconds are a moderate frame's (see groups.go).
	Action  string `json:"action,omitempty"`
	Topic   string `json:"topic,omitempty"`
	Enabled *bool  `json:"enabled,omitempty"`
	Seconds int64  `json:"seconds,omitempty"`
	// Cursor continues a search after the page that returned it.
	Cursor string `json:"cursor,omitempty"`
	// MaxUses, Token, ReportID and Reason are those of invite links and reports (groups.go).
	MaxUses  int64  `json:"maxUses,omitempty"`
	Token    string `json:"token,omitempty"`
	ReportID string `json:"reportId,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Notify is the set_notify setting: NotifyAll, NotifyMentions or NotifyNothing.
	Notify string `json:"notify,omitempty"`
	// Attachments are the ids of the sender's pending uploads a send attaches (attachments.go).
	Attachments []string `json:"attachments,omitempty"`
}

// ServerFrame is every frame the server sends; fields not used by a type are omitted. A message
// push carries the message's fields at the top level next to "type".
type ServerFrame struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`

	// Error frames.
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	// RetryAfterMs, on a retryable refusal, is how long the client should wait before retrying.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`

	// Hello (and profile pushes: UserID and Name).
	UserID    string `json:"userId,omitempty"`
	Name      string `json:"name,omitempty"`
	SessionID string `json:"sessionId,omitempty"`

	// Ack, cursor, receipt and page frames.
	ConversationID string `json:"conversationId,omitempty"`
	Seq            int64  `json:"seq,omitempty"`
	ClientMsgID    string `json:"clientMsgId,omitempty"`
	ReadSeq        int64  `json:"readSeq,omitempty"`

	Conversation  *Conversation  `json:"conversation,omitempty"`
	Conversations []Conversation `json:"conversations,omitempty"`

	// Page frames: the messages in seq order and where the conversation's ends are.
	Messages  []Message `json:"messages,omitempty"`
	FirstSeq  int64     `json:"firstSeq,omitempty"`
	LastSeq   int64     `json:"lastSeq,omitempty"`
	HasBefore bool      `json:"hasBefore,omitempty"`
	HasAfter  bool      `json:"hasAfter,omitempty"`

	// Badge frames: total unread over all conversations, and this conversation's unread.
	Total  *int64 `json:"total,omitempty"`
	Unread *int64 `json:"unread,omitempty"`
	// Badge frames: unread messages that mention the user, over all conversations and in this one.
	TotalMentions  *int64 `json:"totalMentions,omitempty"`
	UnreadMentions *int64 `json:"unreadMentions,omitempty"`

	// Delivered frames: how far a member's devices have received.
	DeliveredSeq int64 `json:"deliveredSeq,omitempty"`

	// Receipt counts: DeliveredTo counts the members who received the message, ReadBy those who
	// read it.
	DeliveredTo *int64   `json:"deliveredTo,omitempty"`
	ReadBy      *int64   `json:"readBy,omitempty"`
	Readers     []Reader `json:"readers,omitempty"`

	// UserIDs lists the users the caller blocks (blocks frames), sorted; omitted when none.
	UserIDs []string `json:"userIds,omitempty"`

	// Presence frames: a peer's presence changed (Online, and LastSeen when offline), or the
	// answer to a presence request (Presence).
	Online   *bool      `json:"online,omitempty"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
	Presence []Presence `json:"presence,omitempty"`

	// Users answers profiles and find_users requests; never omitted there (an empty list).
	Users *[]Profile `json:"users,omitempty"`

	// Changes: the version of an edited, reaction or deleted frame, or the highest one a changes
	// frame carries; HasMore says a changes frame stopped at the sync limit.
	Version int64 `json:"version,omitempty"`
	HasMore bool  `json:"hasMore,omitempty"`
	// Reaction frames: the emoji, whether it was taken away, and how many have it now.
	Emoji     string     `json:"emoji,omitempty"`
	Remove    bool       `json:"remove,omitempty"`
	Count     *int64     `json:"count,omitempty"`
	EditedAt  *time.Time `json:"editedAt,omitempty"`
	Reactions []Reaction `json:"reactions,omitempty"`

	// Message pushes (type "message") are encoded from Message directly; see EncodeMessagePush.
	Body      string     `json:"body,omitempty"`
	SenderID  string     `json:"senderId,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	ReplyTo   int64      `json:"replyTo,omitempty"`
	Quote     *Quote     `json:"quote,omitempty"`
	// Edited frames: whom the new text mentions.
	Mentions []string `json:"mentions,omitempty"`
	// Notify frames: the user's new notification setting for the conversation.
	Notify string `json:"notify,omitempty"`

	// Search results: the page's hits, newest first (never omitted there: an empty list), and
	// the cursor of the next page, omitted on the last.
	Hits   *[]SearchHit `json:"hits,omitempty"`
	Cursor string       `json:"cursor,omitempty"`
	// Invite links and reports (groups.go): invite, invites and reports frames.
	Invite  *Invite   `json:"invite,omitempty"`
	Invites *[]Invite `json:"invites,omitempty"`
	Reports *[]Report `json:"reports,omitempty"`
	// Attachments of a message push (attachments.go).
	Attachments []Attachment `json:"attachments,omitempty"`
}
