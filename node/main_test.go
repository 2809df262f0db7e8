package node_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if any goroutine outlives the tests: every node, session, partition,
// coalescer and subscription must be stopped by whoever started it.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
