package protocol

import (
	"errors"
	"fmt"
	"time"
)

// Errors: one vocabulary from the partition owner to the wire. The sequencer, the message rules,
// the chat service and the server all refuse with an *Error: one of the kinds below, or an
// *Error of the same code with a message of its own for the user (Refuse). Callers branch on the
// kind with errors.Is, which compares codes, so no layer translates another's errors. The
// session answers a frame's error with ErrorFrame(id, AsError(err)): the one place an error
// becomes a frame, and anything that is not an *Error is answered as internal, its details kept
// for the server log.

// Error codes sent in error frames. They are stable: clients branch on them.
const (
	CodeBadFrame     = "bad_frame"      // not a JSON object, or invalid UTF-8
	CodeUnknownType  = "unknown_type"   // a type this server does not know
	CodeInvalidField = "invalid_field"  // a field is missing, of the wrong type or out of range
	CodeTooLarge     = "too_large"      // the body exceeds MaxBodyBytes
	CodeNotMember    = "not_member"     // the conversation does not exist or the user is not in it
	CodeNotFound     = "not_found"      // the user or message does not exist
	CodeForbidden    = "forbidden"      // the user may not do this (e.g. delete someone else's message)
	CodeLimit        = "limit_exceeded" // a bound on the message's state (reactions) would be passed
	CodeRateLimited  = "rate_limited"   // too many sends; retry later
	CodeUnavailable  = "unavailable"    // a dependency is down or ownership is moving; retry with the same clientMsgId
	CodeInternal     = "internal"       // a bug; the details are in the server log
)

// Kinds of refusal that callers branch on. Each is also an answer as it is, with its message;
// most refusals carry a message of their own (Refuse).
var (
	// ErrNotMember refuses an operation on a conversation that does not exist or that the user is
	// not in; the two are not told apart, so ids cannot be probed.
	ErrNotMember = &Error{Code: CodeNotMember, Message: "no such conversation, or you are not a member"}
	// ErrNotFound refuses naming a user or a message that does not exist.
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	// ErrForbidden refuses what this user may not do: change another's message, a tombstone or a
	// system message, remove members of a group they did not create, write across a block.
	ErrForbidden = &Error{Code: CodeForbidden, Message: "forbidden"}
	// ErrInvalid refuses a request that frame validation cannot catch alone (a DM with oneself,
	// a bad display name).
	ErrInvalid = &Error{Code: CodeInvalidField, Message: "invalid request"}
	// ErrLimit refuses a change that would pass a bound on a message's state (its reactions).
	ErrLimit = &Error{Code: CodeLimit, Message: "limit exceeded"}
	// ErrRateLimited refuses for now what a limit allows later: too many sends, frames or
	// connections.
	ErrRateLimited = &Error{Code: CodeRateLimited, Message: "too many requests; retry later", Retryable: true}
	// ErrUnavailable means nothing was stored: the owner is moving, the store is down or the
	// owner is overloaded. Retrying a send with the same clientMsgId is safe.
	ErrUnavailable = &Error{Code: CodeUnavailable, Message: "unavailable, retry", Retryable: true}
)

// Error is a refusal with a stable code and a message for the user; Retryable says the same
// request may succeed later (the error is temporary). It becomes an error frame.
type Error struct {
	Code      string
	Message   string
	Retryable bool
	// RetryAfter, when positive, tells the client how long to wait before retrying.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is reports whether target is an *Error with e's code, so that errors.Is(err, ErrNotFound)
// holds for every not_found refusal, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf builds an Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Refuse builds a refusal of kind (its code, and whether it is retryable) with a formatted
// message for the user.
func Refuse(kind *Error, format string, args ...any) *Error {
	return &Error{Code: kind.Code, Message: fmt.Sprintf(format, args...), Retryable: kind.Retryable}
}

// AsError returns err as an *Error, or an internal error frame that hides the details.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// ErrorFrame builds the error frame that answers request id.
// RetryAfter is carried as whole milliseconds, rounded up so that a client waiting that long is
// not refused again for having retried early.
func ErrorFrame(id string, err *Error) ServerFrame {
	f := ServerFrame{Type: TypeError, ID: id, Code: err.Code, Message: err.Message, Retryable: err.Retryable}
	if err.RetryAfter > 0 {
		f.RetryAfterMs = int64((err.RetryAfter + time.Millisecond - 1) / time.Millisecond)
	}
	return f
}
