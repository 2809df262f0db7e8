package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: a connection's reader must end
// when it is closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
