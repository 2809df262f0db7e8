package cluster

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: every child process's waiter,
// every client's reader and every traffic generator must be stopped by whoever started it.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
