package storage_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: every store a test opens must be
// closed, with the driver's connection pools and monitors.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
