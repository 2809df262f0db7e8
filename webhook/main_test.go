package webhook_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: every dispatcher a test starts,
// with its deliverers and list reads, must be stopped by the test that started it.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
