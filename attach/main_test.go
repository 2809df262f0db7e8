package attach_test

import (
	"testing"

	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests (the collector's loop).
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }
