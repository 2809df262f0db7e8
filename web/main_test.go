package web_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: every node, browser, page
// listener and fault proxy a test starts must be stopped by whoever started it.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
