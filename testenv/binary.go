package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Binary is a Go main package that tests run as a child process, built once per test binary
// without the race detector: the children are the system under test, and under -race they would
// be several times slower (FerretDB's pure-Go SQLite about ten times). Env may name a prebuilt one;
// scripts/test builds them all up front.
type Binary struct {
	Env, Package, Name string

	once sync.Once
	path string
	err  error
}

// The binaries tests run.
var (
	StoreBinary = &Binary{Env: "CHAT_TEST_STORE_BIN", Package: "github.com/chatd/chatd/cmd/chatstore", Name: "chatstore"}
	ChatdBinary = &Binary{Env: "CHAT_TEST_CHATD_BIN", Package: "github.com/chatd/chatd/cmd/chatd", Name: "chatd"}
	NATSBinary  = &Binary{Env: "CHAT_TEST_NATS_BIN", Package: "github.com/nats-io/nats-server/v2", Name: "nats-server"}
)

// Path returns the binary, building it on first use; a build failure fails the test.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		if p := os.Getenv(b.Env); p != "" {
			b.path = p
			return
		}
		dir, err := os.MkdirTemp("", "chatd-test-bin-")
		if err != nil {
			b.err = fmt.Errorf("make build dir: %w", err)
			return
		}
		b.path = filepath.Join(dir, b.Name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.path, b.Package).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %w: %s", b.Package, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
