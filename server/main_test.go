package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: every session, handler and
// background logger a test starts must be stopped by whoever started it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
