package sequencer_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: every partition owner, lease
// keeper and NATS connection a test starts must be stopped by whoever started it.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
