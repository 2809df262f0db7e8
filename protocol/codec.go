package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits on what a client frame may carry. They bound the work and memory one frame can cause.
const (
	// MaxBodyBytes bounds a message body; long enough for a pasted paragraph, short enough that a
	// 5,000-member fan-out of one message stays cheap.
	MaxBodyBytes = 16 << 10
	// MaxIDBytes bounds user, conversation and request ids.
	MaxIDBytes = 128
	// MaxNameBytes bounds a group name.
	MaxNameBytes = 200
	// MaxGroupMembers bounds a group created or extended in one frame.
	MaxGroupMembers = 10000
	// MaxSince bounds the conversations one sync frame may name.
	MaxSince = 10000
	// MaxPageSize caps a history page; DefaultPageSize is used when a request gives no limit.
	MaxPageSize     = 200
	DefaultPageSize = 50
	// MaxEmojiBytes bounds one reaction: enough for any emoji sequence (a family with skin tones
	// is 25 bytes) or a short name such as ":thumbsup:".
	MaxEmojiBytes = 32
	// MaxReactionKinds bounds the distinct emoji on one message, and MaxReactionsPerUser the
	// emoji one member has on it, so a message's state stays small however large its group.
	MaxReactionKinds    = 20
	MaxReactionsPerUser = 10
	// QuoteBytes bounds the copy of a replied-to message that a reply carries.
	QuoteBytes = 200
	// MaxPresenceUsers bounds the users one presence or profiles request asks about: a screen's
	// worth.
	MaxPresenceUsers = 100
	// MaxFoundUsers bounds the answer of find_users: a short list to pick from while typing.
	MaxFoundUsers = 20
	// MaxSearchRunes bounds a search's words: a sentence, not a message to match whole.
	MaxSearchRunes = 200
	// MaxSearchHits caps a page of search hits (each costs a highlight); DefaultSearchHits is the
	// page when a search gives no limit: about a screen.
	MaxSearchHits     = 100
	DefaultSearchHits = 20
	// MaxCursorBytes bounds a search cursor, which the server made: a time, an id and a seq.
	MaxCursorBytes = 512
)

// DecodeClientFrame parses and validates one client frame. The error is always an *Error; when
// the frame had a readable id the returned frame carries it, so the error can answer it.
func DecodeClientFrame(data []byte) (ClientFrame, error) {
	var f ClientFrame
	if !utf8.Valid(data) {
		return f, Errorf(CodeBadFrame, "frame is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return f, Errorf(CodeBadFrame, "frame must be a JSON object")
	}
	if err := json.Unmarshal(trimmed, &f); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			f = ClientFrame{ID: peekID(trimmed)}
			return f, Errorf(CodeInvalidField, "field %q has the wrong type or is out of range", typeErr.Field)
		}
		return ClientFrame{}, Errorf(CodeBadFrame, "frame is not valid JSON")
	}
	if err := f.Validate(); err != nil {
		return f, err
	}
	return f, nil
}

// peekID recovers the request id from a frame whose other fields did not decode.
func peekID(data []byte) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &probe) != nil || len(probe.ID) > MaxIDBytes {
		return ""
	}
	return probe.ID
}

// Validate checks the fields a frame of f.Type needs.
func (f *ClientFrame) Validate() error {
	if len(f.ID) > MaxIDBytes {
		f.ID = ""
		return Errorf(CodeInvalidField, "id is longer than %d bytes", MaxIDBytes)
	}
	switch f.Type {
	case TypeSend:
		if err := requireID("conversationId", f.ConversationID); err != nil {
			return err
		}
		if _, err := uuid.Parse(f.ClientMsgID); err != nil {
			return Errorf(CodeInvalidField, "clientMsgId must be a uuid")
		}
		if err := validAttachments(f.Attachments); err != nil {
			return err
		}
		if f.Body != "" || len(f.Attachments) == 0 { // a file alone needs no text
			if err := validBody(f.Body); err != nil {
				return err
			}
		}
		return nonNegative("replyTo", f.ReplyTo)
	case TypeOpenDM, TypeBlockUser, TypeUnblockUser:
		return requireID("userId", f.UserID)
	case TypeCreateGroup:
		if len(f.Name) > MaxNameBytes {
			return Errorf(CodeInvalidField, "name is longer than %d bytes", MaxNameBytes)
		}
		return validMembers(f.Members)
	case TypeAddMembers:
		if err := requireID("conversationId", f.ConversationID); err != nil {
			return err
		}
		if len(f.Members) == 0 {
			return Errorf(CodeInvalidField, "members is empty")
		}
		return validMembers(f.Members)
	case TypeRemoveMember:
		if err := requireID("conversationId", f.ConversationID); err != nil {
			return err
		}
		return requireID("userId", f.UserID)
	case TypeLeave, TypeHideConversation, TypeTyping:
		return requireID("conversationId", f.ConversationID)
	case TypeFocus:
		if f.ConversationID == "" {
			return nil // nothing in focus
		}
		return requireID("conversationId", f.ConversationID)
	case TypeEditMessage:
		if err := requireMessage(f); err != nil {
			return err
		}
		return validBody(f.Body)
	case TypeReact:
		if err := requireMessage(f); err != nil {
			return err
		}
		return validEmoji(f.Emoji)
	case TypeListConversations, TypePing, TypeListBlocks:
		return nil
	case TypeSync:
		if err := validPositions("since", f.Since); err != nil {
			return err
		}
		return validPositions("versions", f.Versions)
	case TypeHistory:
		return f.validateHistory()
	case TypeRead, TypeDelivered, TypeReceipts, TypeDeleteMessage, TypeReactions:
		return requireMessage(f)
	case TypeSetPrivacy:
		if f.HideReceipts == nil && f.HidePresence == nil {
			return Errorf(CodeInvalidField, "give hideReceipts, hidePresence or both")
		}
		return nil
	case TypeSetName:
		return validName(f.Name)
	case TypeFindUsers:
		if f.Query = strings.TrimSpace(f.Query); f.Query == "" || utf8.RuneCountInString(f.Query) > MaxDisplayNameRunes {
			return Errorf(CodeInvalidField, "query must be 1 to %d characters", MaxDisplayNameRunes)
		}
		return nil
	case TypeSearch:
		return f.validateSearch()
	case TypeSetNotify:
		if err := requireID("conversationId", f.ConversationID); err != nil {
			return err
		}
		if f.Notify != NotifyAll && f.Notify != NotifyMentions && f.Notify != NotifyNothing {
			return Errorf(CodeInvalidField, "notify must be %q, %q or %q", NotifyAll, NotifyMentions, NotifyNothing)
		}
		return nil
	case TypePresence, TypeProfiles:
		if len(f.UserIDs) == 0 || len(f.UserIDs) > MaxPresenceUsers {
			return Errorf(CodeInvalidField, "userIds must name 1 to %d users", MaxPresenceUsers)
		}
		for _, id := range f.UserIDs {
			if err := requireID("userIds", id); err != nil {
				return err
			}
		}
		return nil
	case TypeModerate:
		return f.validateModerate()
	case TypeListInvites, TypeInvitePreview, TypeJoinInvite, TypeReport, TypeListReports:
		return f.validateGroupFrame()
	case "":
		return Errorf(CodeInvalidField, "type is required")
	default:
		return Errorf(CodeUnknownType, "unknown frame type %q", truncate(f.Type, 40))
	}
}

// validateSearch checks a search: its words, the optional conversation, cursor and page size.
func (f *ClientFrame) validateSearch() error {
	if f.Query = strings.TrimSpace(f.Query); f.Query == "" || utf8.RuneCountInString(f.Query) > MaxSearchRunes {
		return Errorf(CodeInvalidField, "query must be 1 to %d characters", MaxSearchRunes)
	}
	if f.ConversationID != "" {
		if err := requireID("conversationId", f.ConversationID); err != nil {
			return err
		}
	}
	if len(f.Cursor) > MaxCursorBytes {
		return Errorf(CodeInvalidField, "cursor is longer than %d bytes", MaxCursorBytes)
	}
	if f.Limit < 0 || f.Limit > MaxSearchHits {
		return Errorf(CodeInvalidField, "limit must be 0 to %d", MaxSearchHits)
	}
	return nil
}

// validName checks a display name (see DisplayName).
func validName(name string) error {
	if _, err := DisplayName(name); err != nil {
		return Errorf(CodeInvalidField, "%s", err.Error())
	}
	return nil
}

// requireMessage checks the conversation and seq that name one message.
func requireMessage(f *ClientFrame) error {
	if err := requireID("conversationId", f.ConversationID); err != nil {
		return err
	}
	if f.Seq < 1 {
		return Errorf(CodeInvalidField, "seq must be at least 1")
	}
	return nil
}

func validBody(body string) error {
	if body == "" {
		return Errorf(CodeInvalidField, "body is empty")
	}
	if len(body) > MaxBodyBytes {
		return Errorf(CodeTooLarge, "body is longer than %d bytes", MaxBodyBytes)
	}
	return nil
}

// validPositions checks a sync map of conversation id to seq or version.
func validPositions(field string, m map[string]int64) error {
	if len(m) > MaxSince {
		return Errorf(CodeInvalidField, "%s names more than %d conversations", field, MaxSince)
	}
	for id, v := range m {
		if err := requireID(field+" key", id); err != nil {
			return err
		}
		if err := nonNegative(field+" value", v); err != nil {
			return err
		}
	}
	return nil
}

// validEmoji checks a reaction: 1 to MaxEmojiBytes bytes with no white space or control
// characters. Which emoji exist is the clients' business; the bound keeps a message's state small.
func validEmoji(e string) error {
	if e == "" {
		return Errorf(CodeInvalidField, "emoji is required")
	}
	if len(e) > MaxEmojiBytes {
		return Errorf(CodeInvalidField, "emoji is longer than %d bytes", MaxEmojiBytes)
	}
	for _, r := range e {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return Errorf(CodeInvalidField, "emoji may not hold white space or control characters")
		}
	}
	return nil
}

// QuoteText cuts a message body to at most QuoteBytes, at a character boundary, marking a cut with
// an ellipsis.
func QuoteText(body string) string {
	if len(body) <= QuoteBytes {
		return body
	}
	cut := QuoteBytes - len("…")
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return body[:cut] + "…"
}

func (f *ClientFrame) validateHistory() error {
	if err := requireID("conversationId", f.ConversationID); err != nil {
		return err
	}
	anchors := 0
	for _, p := range []*int64{f.Before, f.After, f.Around} {
		if p != nil {
			anchors++
			if *p < 0 {
				return Errorf(CodeInvalidField, "history anchors must not be negative")
			}
		}
	}
	if f.Fraction != nil {
		anchors++
		if math.IsNaN(*f.Fraction) || *f.Fraction < 0 || *f.Fraction > 1 {
			return Errorf(CodeInvalidField, "fraction must be between 0 and 1")
		}
	}
	if anchors > 1 {
		return Errorf(CodeInvalidField, "give at most one of before, after, around, fraction")
	}
	if f.Limit < 0 {
		return Errorf(CodeInvalidField, "limit must not be negative")
	}
	return nil
}

// WritesMessage reports whether the frame writes a message through the sequencer: a send, an
// edit or a reaction. These share the per-user send rate and the send timeout.
func (f *ClientFrame) WritesMessage() bool {
	return f.Type == TypeSend || f.Type == TypeEditMessage || f.Type == TypeReact
}

// PageLimit returns the page size a history request asked for, defaulted and capped.
func (f *ClientFrame) PageLimit() int {
	switch {
	case f.Limit <= 0:
		return DefaultPageSize
	case f.Limit > MaxPageSize:
		return MaxPageSize
	default:
		return f.Limit
	}
}

// requireID checks a user or conversation id: ids become NATS subject tokens, so only letters,
// digits, '-' and '_' are allowed.
func requireID(field, v string) error {
	if v == "" {
		return Errorf(CodeInvalidField, "%s is required", field)
	}
	if len(v) > MaxIDBytes {
		return Errorf(CodeInvalidField, "%s is longer than %d bytes", field, MaxIDBytes)
	}
	if !ValidID(v) {
		return Errorf(CodeInvalidField, "%s may only hold letters, digits, '-' and '_'", field)
	}
	return nil
}

// ValidID reports whether v is a well-formed user or conversation id.
func ValidID(v string) bool {
	if v == "" || len(v) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return Errorf(CodeInvalidField, "%s must not be negative", field)
	}
	return nil
}

func validMembers(members []string) error {
	if len(members) > MaxGroupMembers {
		return Errorf(CodeInvalidField, "more than %d members", MaxGroupMembers)
	}
	for _, m := range members {
		if err := requireID("member", m); err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// EncodeMessagePush encodes the "message" frame for m once, so a hub can write the same bytes to
// every socket that should see it.
func EncodeMessagePush(m Message) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode message %s/%d: %w", m.ConversationID, m.Seq, err)
	}
	return PushFromEncodedMessage(body), nil
}

// PushFromEncodedMessage turns the JSON object of a Message into a "message" frame by adding the
// type field in front, without decoding it again.
func PushFromEncodedMessage(encoded []byte) []byte {
	const prefix = `{"type":"message",`
	out := make([]byte, 0, len(prefix)+len(encoded))
	out = append(out, prefix...)
	return append(out, encoded[1:]...)
}

// Encode encodes a server frame.
func Encode(f ServerFrame) ([]byte, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	return b, nil
}
