package poll_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/testenv/poll"
)

func TestUntil(t *testing.T) {
	calls := 0
	if err := poll.Until(10*time.Second, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("only %d calls", calls)
		}
		return nil
	}); err != nil || calls != 3 {
		t.Errorf("a check that holds on its third call: %v after %d calls; want nil after 3", err, calls)
	}

	began := time.Now()
	err := poll.Until(30*time.Millisecond, time.Millisecond, func() error { return errors.New("the door is shut") })
	if err == nil || !strings.Contains(err.Error(), "still not so after 30ms: the door is shut") {
		t.Errorf("a check that never holds: %v; want the timeout and the check's own error", err)
	}
	if waited := time.Since(began); waited < 30*time.Millisecond {
		t.Errorf("a check that never holds gave up after %s, before its timeout", waited)
	}

	calls = 0
	gone := fmt.Errorf("%w: the server exited", poll.ErrGiveUp)
	if err := poll.Until(10*time.Second, time.Millisecond, func() error { calls++; return gone }); err != gone || calls != 1 {
		t.Errorf("a check that gives up: %v after %d calls; want its error after 1", err, calls)
	}
}
