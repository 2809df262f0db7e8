package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: every session, handler and
// background logger a test starts must be stopped by whoever started it.
// Bleve's analysis workers (the search index, linked through chat) are process-wide, started
// when its package initialises, and never stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}
