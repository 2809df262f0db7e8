// Package poll waits in tests for a condition to hold, like nats-server's checkFor: it checks
// every interval until the check returns nil, and when it gives up says why, with the check's
// last error. testenv.Poll and testenv.CheckFor are these functions; the package stands alone,
// importing nothing of chatd, so that the internal tests of any package (chat's, sequencer's) can
// wait the same way without an import cycle.
package poll

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrGiveUp marks a check's error after which waiting longer is pointless (the process or socket
// the condition depends on is gone): Until and CheckFor stop at once with it instead of waiting
// out their timeout. Wrap it: fmt.Errorf("%w: node exited", poll.ErrGiveUp).
var ErrGiveUp = errors.New("no point waiting")

// Until calls check every interval until it returns nil, and then returns nil. Once timeout has
// passed it returns check's last error, which says why the condition does not hold yet; it
// returns at once an error that wraps ErrGiveUp. Until does not touch a testing.T, so any
// goroutine may call it; see CheckFor for the test's own goroutine.
func Until(timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrGiveUp):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("still not so after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// CheckFor polls check like Until and fails the test with check's last error if it does not
// return nil within timeout. Call it from the test's goroutine only.
func CheckFor(t testing.TB, timeout, interval time.Duration, check func() error) {
	t.Helper()
	if err := Until(timeout, interval, check); err != nil {
		t.Fatal(err)
	}
}
