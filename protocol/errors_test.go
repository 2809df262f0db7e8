package protocol_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/chatd/chatd/protocol"
)

// TestErrorKinds: a refusal is of its kind whatever its message and however it is wrapped, and
// of no other; its error frame carries its own code, message and retryability, and anything
// that is not an *Error is answered as internal without its details.
func TestErrorKinds(t *testing.T) {
	kinds := []*protocol.Error{protocol.ErrNotMember, protocol.ErrNotFound, protocol.ErrForbidden,
		protocol.ErrInvalid, protocol.ErrLimit, protocol.ErrRateLimited, protocol.ErrUnavailable}
	for _, kind := range kinds {
		refusal := fmt.Errorf("change c/3: %w", protocol.Refuse(kind, "no %s here", "thing"))
		for _, other := range kinds {
			if got := errors.Is(refusal, other); got != (other == kind) {
				t.Errorf("a %s refusal is %s: %v", kind.Code, other.Code, got)
			}
		}
		f := protocol.ErrorFrame("r1", protocol.AsError(refusal))
		if f.Type != protocol.TypeError || f.ID != "r1" || f.Code != kind.Code || f.Message != "no thing here" ||
			f.Retryable != kind.Retryable {
			t.Errorf("frame of a %s refusal: %+v", kind.Code, f)
		}
	}
	if !protocol.ErrUnavailable.Retryable || !protocol.ErrRateLimited.Retryable || protocol.ErrNotMember.Retryable {
		t.Error("unavailable and rate_limited are retryable, the other kinds are not (PROTOCOL.md)")
	}
	f := protocol.ErrorFrame("r2", protocol.AsError(fmt.Errorf("store: %w", errors.New("connection refused"))))
	if f.Code != protocol.CodeInternal || f.Message != "internal error" || f.Retryable {
		t.Errorf("frame of a failure: %+v, want internal with no details", f)
	}
}
