// Package embedded starts the in-process NATS server and the MongoDB-wire-compatible store
// (FerretDB v1 on SQLite) that let chatd run with nothing installed. Only cmd and tests use it;
// the chat core never knows whether its NATS and MongoDB are embedded or real.
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/nats-io/nats-server/v2/server"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 10 * time.Second

// NATSConfig describes an in-process NATS server. Zero ports mean random free ports.
type NATSConfig struct {
	// Name identifies the server in a cluster; default is chosen by nats-server.
	Name string
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port for clients; 0 picks a free port.
	Port int
	// StoreDir holds JetStream data; required.
	StoreDir string
	// ClusterName, ClusterPort and Routes join servers into a cluster; empty means standalone.
	ClusterName string
	ClusterPort int
	Routes      []string
}

// NATS is a running in-process NATS server with JetStream.
type NATS struct {
	srv *server.Server
}

// StartNATS starts a NATS server and waits until it accepts clients.
func StartNATS(cfg NATSConfig) (*NATS, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("start nats: StoreDir is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: cfg.ClusterPort}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("start nats: parse route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	fatal := make(chan string, 1)
	srv.SetLoggerV2(startLog{fatal: fatal}, false, false, false)
	go srv.Start()
	deadline := time.Now().Add(startTimeout)
	for !srv.ReadyForConnections(readyPoll) {
		select {
		case msg := <-fatal: // a listener failed: it will never be ready
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, fmt.Errorf("start nats: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, fmt.Errorf("start nats: not ready after %s", startTimeout)
		}
	}
	return &NATS{srv: srv}, nil
}

// readyPoll is how long StartNATS waits for the server to be ready before it looks for a fatal
// error again.
const readyPoll = 100 * time.Millisecond

// startLog is the in-process server's logger. It keeps the first fatal error, such as a port
// that is already in use (the server only logs that, and would leave StartNATS waiting out
// startTimeout for nothing), and drops everything else as NoLog does.
type startLog struct{ fatal chan string }

func (l startLog) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default: // one is enough to say why
	}
}

func (startLog) Noticef(string, ...any) {}
func (startLog) Warnf(string, ...any)   {}
func (startLog) Errorf(string, ...any)  {}
func (startLog) Debugf(string, ...any)  {}
func (startLog) Tracef(string, ...any)  {}

// ClientURL is the URL clients connect to.
func (n *NATS) ClientURL() string { return n.srv.ClientURL() }

// ClusterAddr is the address other servers route to, empty when standalone.
func (n *NATS) ClusterAddr() string {
	if a := n.srv.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Shutdown stops the server and waits for it.
func (n *NATS) Shutdown() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// Mongo is a running FerretDB speaking the MongoDB wire protocol over TCP, storing in SQLite.
type Mongo struct {
	uri    string
	cancel context.CancelFunc
	done   chan struct{}
}

// MongoConfig describes the embedded store.
type MongoConfig struct {
	// Dir holds the SQLite files; it is created if missing.
	Dir string
	// Addr is the TCP address to listen on; default 127.0.0.1:0 (a free port).
	Addr string
	// Logger receives FerretDB's own logs; nil discards them (FerretDB logs every connection at INFO).
	Logger *slog.Logger
	// Sync is how the store waits for the disk: SyncInterval (the default), SyncFull or
	// SyncNormal.
	Sync string
}

// How the store waits for the disk, for MongoConfig.Sync: SQLite's synchronous settings
// (https://sqlite.org/pragma.html#pragma_synchronous), in WAL mode, and SyncInterval.
const (
	// SyncInterval commits without waiting for the disk and syncs the write-ahead log every
	// 100 ms (walsync.go): an acknowledged write survives a killed process at once and a power
	// loss or an operating system crash after at most 100 ms, as with MongoDB's default journal.
	SyncInterval = "interval"
	// SyncFull syncs the write-ahead log to disk at every commit: an acknowledged write survives
	// a power loss or an operating system crash. Each commit waits for the disk.
	SyncFull = "full"
	// SyncNormal syncs the log only at checkpoints: an acknowledged write survives the store's
	// process being killed, but the last commits before a power loss or an operating system
	// crash may be lost (the database itself stays consistent). Commits wait for no disk.
	SyncNormal = "normal"
)

// sqliteURL is FerretDB's SQLite URL for the files under dir with SQLite's synchronous setting
// for sync. Temporary files (the statement journals of FerretDB's multi-row updates) are kept in
// memory: on disk they cost a tenth of the store's CPU in system calls under a send load.
func sqliteURL(dir, sync string) (string, error) {
	synchronous := sync
	switch sync {
	case "", SyncInterval:
		synchronous = SyncNormal
	case SyncFull, SyncNormal:
	default:
		return "", fmt.Errorf("store sync %q: want %q, %q or %q", sync, SyncInterval, SyncFull, SyncNormal)
	}
	return "file:" + dir + "/?_pragma=synchronous(" + synchronous + ")&_pragma=temp_store(memory)", nil
}

// StartMongo starts FerretDB and waits until it accepts connections.
func StartMongo(cfg MongoConfig) (*Mongo, error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("start store: resolve %s: %w", cfg.Dir, err)
	}
	sqlite, err := sqliteURL(dir, cfg.Sync)
	if err != nil {
		return nil, fmt.Errorf("start store: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start store: create %s: %w", dir, err)
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	logger := cfg.Logger
	if logger == nil {
		// A handler that is never enabled: FerretDB derives a logger per connection and command
		// (With), which a discarding text handler still formatted, at a fifth of the store's CPU
		// per first connect (docs/BENCHMARKS.md, "Third round").
		logger = slog.New(slog.DiscardHandler)
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: sqlite,
	})
	if err != nil {
		return nil, fmt.Errorf("start store: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mongo{uri: f.MongoDBURI(), cancel: cancel, done: make(chan struct{})}
	var loops sync.WaitGroup // the store's own: the _id indexer, and the log syncs of SyncInterval
	indexer := newIDIndexer(dir, logger)
	loops.Go(func() { indexer.run(ctx) })
	if cfg.Sync == "" || cfg.Sync == SyncInterval {
		loops.Go(func() { syncLogs(ctx, dir, logger) })
	}
	go func() {
		defer close(m.done)
		if err := f.Run(ctx); err != nil {
			logger.Error("ferretdb stopped", "error", err)
		}
		loops.Wait()
	}()
	if err := waitForTCP(m.uri); err != nil {
		m.Stop()
		return nil, fmt.Errorf("start store: %w", err)
	}
	return m, nil
}

// URI is the MongoDB connection string for the store.
func (m *Mongo) URI() string { return m.uri }

// Stop shuts the store down and waits for it.
func (m *Mongo) Stop() {
	m.cancel()
	<-m.done
}

func waitForTCP(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("parse %s: %w", uri, err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		conn, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not reachable after %s: %w", u.Host, startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
