package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: a connection's reader must end
// when it is closed. (The package has no tests yet; this covers the first ones.)
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
