package testenv

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
)

// TestSecret signs tokens in tests.
var TestSecret = []byte("test-secret-test-secret-test-secret!")

// Env is the NATS, store and blob store (of attachments) a test's nodes share.
type Env struct {
	NATSURL  string
	MongoURI string
	Database string
	// Blobs is a directory of the test's: every node of the env keeps its files there.
	Blobs blob.Store
}

// NewEnv starts a NATS server and a store for the test.
func NewEnv(t testing.TB) Env {
	t.Helper()
	cfg := StoreConfig(t)
	blobs, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatalf("open the blob directory: %v", err)
	}
	return Env{NATSURL: NATS(t), MongoURI: cfg.URI, Database: cfg.Database, Blobs: blobs}
}

// NodeConfig is a dev-mode node configuration on env, listening on random loopback ports, with
// the rate limits off so tests can send as fast as they like.
func (e Env) NodeConfig() node.Config {
	cfg := node.Config{
		Addr:      "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0",
		NodeID:    "test",
		MongoURI:  e.MongoURI,
		Database:  e.Database,
		NATSURL:   e.NATSURL,
		JWTSecret: TestSecret,
		DevMode:   true,
		Blobs:     e.Blobs,
	}
	cfg.Session.SendRate = -1
	cfg.Session.FrameRate = -1
	return cfg
}

// Node is a node started for a test.
type Node struct {
	*node.Node
	t       testing.TB
	cfg     node.Config
	stopped bool
}

// StartNode starts a node with cfg; it is shut down when the test ends unless the test stopped it.
func StartNode(t testing.TB, cfg node.Config) *Node {
	t.Helper()
	n, err := startNode(t, cfg)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	return n
}

// StartRestartableNode is StartNode on a public address picked by StartOnPorts, so that Restart
// finds it free again.
func StartRestartableNode(t testing.TB, cfg node.Config) *Node {
	t.Helper()
	var n *Node
	StartOnPorts(t, 1, func(ports []int) (err error) {
		cfg.Addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		n, err = startNode(t, cfg)
		return err
	})
	return n
}

func startNode(t testing.TB, cfg node.Config) (*Node, error) {
	tn := &Node{t: t, cfg: cfg}
	if err := tn.start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if !tn.stopped {
			tn.Stop()
		}
	})
	return tn, nil
}

func (n *Node) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := zerolog.New(zerolog.NewTestWriter(n.t)).Level(zerolog.WarnLevel).With().Str("node", n.cfg.NodeID).Logger()
	started, err := node.Start(ctx, n.cfg, log)
	if err != nil {
		return err
	}
	n.Node, n.stopped = started, false
	return nil
}

// Restart starts the stopped node again with the same configuration, as an operator restarts a
// node: on the same public address (see StartRestartableNode), the same store and NATS.
func (n *Node) Restart() {
	n.t.Helper()
	if !n.stopped {
		n.t.Fatal("restart a node that was not stopped")
	}
	if err := n.start(); err != nil {
		n.t.Fatalf("restart node: %v", err)
	}
}

// Stop shuts the node down gracefully.
func (n *Node) Stop() {
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		n.t.Errorf("shut down node: %v", err)
	}
}

// URL is the node's HTTP base URL.
func (n *Node) URL() string { return "http://" + n.Addr() }

// AdminURL is the base URL of the node's admin listener (metrics, debug, admin API).
func (n *Node) AdminURL() string { return "http://" + n.AdminAddr() }

// WSURL is the node's WebSocket endpoint.
func (n *Node) WSURL() string { return "ws://" + n.Addr() + "/ws" }

// Connect signs in as name and opens a WebSocket, closed when the test ends.
func Connect(t testing.TB, baseURL, name string) *client.Conn {
	t.Helper()
	c, _ := ConnectWithToken(t, baseURL, name)
	return c
}

// ConnectWithToken is Connect that also returns the token, for tests that call the HTTP API.
func ConnectWithToken(t testing.TB, baseURL, name string) (*client.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, _, err := client.Login(ctx, http.DefaultClient, baseURL, name)
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	c, err := client.Dial(ctx, "ws"+baseURL[len("http"):]+"/ws", token, nil)
	if err != nil {
		t.Fatalf("dial as %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.Close() }) // the test may have closed it already
	return c, token
}
