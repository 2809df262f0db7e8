package node_test

import (
	"os"
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if any goroutine outlives the tests: every node, session, partition,
// coalescer and subscription must be stopped by whoever started it. Run with receiverChildEnv set,
// the binary is instead the receivers' process of BenchmarkFanoutApart5000 and runs no tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(receiverChildEnv); spec != "" {
		os.Exit(runReceiverChild(spec))
	}
	testenv.VerifyTestMain(m)
}
