// Package testenv starts the real servers that tests run against: in-process NATS servers (alone
// or clustered) and nodes, and as child processes (Process) the embedded MongoDB-wire store,
// chatd, nginx and an S3 server (versitygw), each on a random port in its own temporary directory, stopped when the test
// ends; and it holds the tests' other shared helpers, so that each is written once. Its
// subpackages import nothing of chatd, for the internal tests of packages testenv itself imports:
// poll waits for a condition (testenv.CheckFor is poll.CheckFor), promtest reads metrics and
// logtest collects log lines.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/embedded"
	"github.com/chatd/chatd/storage"
)

// MongoURIEnv names a real MongoDB to test against instead of the embedded store.
const MongoURIEnv = "CHAT_TEST_MONGO_URI"

// MongoURI starts the embedded store in a child process for the test, or returns
// CHAT_TEST_MONGO_URI when it is set.
func MongoURI(t testing.TB) string {
	t.Helper()
	if uri := os.Getenv(MongoURIEnv); uri != "" {
		return uri
	}
	return StartStoreProcess(t, t.TempDir()).URI
}

// StoreConfig returns a storage configuration with a fresh database on a store started for the test.
func StoreConfig(t testing.TB) storage.Config {
	t.Helper()
	return storage.Config{URI: MongoURI(t), Database: "test_" + uuid.NewString()[:8]}
}

// Store opens a store on a fresh database.
func Store(t testing.TB) *storage.Store {
	t.Helper()
	return OpenStore(t, StoreConfig(t))
}

// OpenStore opens a store with cfg and closes it when the test ends.
func OpenStore(t testing.TB, cfg storage.Config) *storage.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := storage.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// NATS starts a standalone NATS server with JetStream and returns its client URL.
func NATS(t testing.TB) string {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(n.Shutdown)
	return n.ClientURL()
}

// NATSCluster starts size NATS servers routed into one JetStream cluster. The servers are
// returned so a test can kill one; each is shut down when the test ends. Their client ports are
// the kernel's pick; their cluster ports are StartOnPorts', since every server's routes name all
// of them before any starts.
func NATSCluster(t testing.TB, size int) []*embedded.NATS {
	t.Helper()
	var servers []*embedded.NATS
	StartOnPorts(t, size, func(ports []int) error {
		routes := make([]string, size)
		for i, p := range ports {
			routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
		}
		servers = make([]*embedded.NATS, size)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for i := range size {
			dir := t.TempDir() // afresh on each try: nothing of a failed cluster is left in it
			wg.Go(func() {
				servers[i], errs[i] = embedded.StartNATS(embedded.NATSConfig{
					Name:        fmt.Sprintf("n%d", i+1),
					StoreDir:    dir,
					ClusterName: "test",
					ClusterPort: ports[i],
					Routes:      routes,
				})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, n := range servers {
				if n != nil {
					n.Shutdown()
				}
			}
			return fmt.Errorf("start nats cluster: %w", err)
		}
		return nil
	})
	for _, n := range servers {
		t.Cleanup(n.Shutdown)
	}
	return servers
}
