package testenv

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs a package's tests and then fails the package if any goroutine outlives
// them (go.uber.org/goleak); a package's TestMain calls it. Every node, session, subscription,
// store client, child-process waiter and client reader a test starts must be stopped by whoever
// started it. The keep-alive connections of http.DefaultClient, which tests sign in with, are
// closed first: they belong to the test, not to the code under test. opts go to goleak.Find, an
// IgnoreTopFunction only for a third party's background goroutine, with the reason at the call.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	// Bleve's analysis workers (the search index) are process-wide, started when its package
	// initialises in any binary that links a node, and never stop.
	opts = append(opts, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
	code := m.Run()
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}
