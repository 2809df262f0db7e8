// Command chatd runs one chat node. With no configuration it starts an in-process NATS server and
// an embedded MongoDB-wire store (FerretDB on SQLite) under ./data, so it runs with nothing
// installed; with CHAT_MONGO_URI and CHAT_NATS_URL it uses real ones and embeds nothing.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/embedded"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/session"
)

// defaultGCPercent is the collector's setting unless GOGC says otherwise. Most of a node's heap is
// long-lived per-connection state (socket buffers, sessions, routes) that needs no room to grow,
// yet Go's default (100) lets the heap reach twice that live heap before it collects, and RSS
// follows the heap's peak: at 50 an idle connection costs about a fifth less memory, and the
// CPU per delivered message did not move (docs/BENCHMARKS.md, "Memory per idle connection").
const defaultGCPercent = 50

func main() {
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	if err := run(os.Args[1:], log); err != nil {
		log.Error().Err(err).Msg("chatd stopped")
		os.Exit(1)
	}
}

// options are the command line and environment settings; every flag has a CHAT_* twin.
type options struct {
	addr, adminAddr, dataDir, mongoURI, mongoDB, natsURL, jwtSecret, logLevel, nodeID, origins string
	jwtIssuer, jwtAudience, adminSecret, addrFile, storeSync                                   string
	searchDir                                                                                  string
	devMode                                                                                    bool
	partitions, leaseReplicas, pooledWriters                                                   int
	sendRate                                                                                   float64
	readWindow, leaseTTL, jwtMaxLifetime                                                       time.Duration
	push                                                                                       pushOptions
	files                                                                                      fileOptions
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chatd", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", env("CHAT_ADDR", node.DefaultAddr), "HTTP listen address (CHAT_ADDR)")
	fs.StringVar(&o.adminAddr, "admin-addr", env("CHAT_ADMIN_ADDR", node.DefaultAdminAddr), "admin listener: /metrics, /healthz, /readyz, /debug/, the admin API; keep it off the public network; empty: none (CHAT_ADMIN_ADDR)")
	fs.StringVar(&o.addrFile, "addr-file", env("CHAT_ADDR_FILE", ""), "file to write the listeners' addresses to once they listen, as JSON; for whoever starts chatd on port 0 (CHAT_ADDR_FILE)")
	fs.StringVar(&o.dataDir, "data-dir", env("CHAT_DATA_DIR", "./data"), "directory for the embedded store and NATS (CHAT_DATA_DIR)")
	fs.StringVar(&o.searchDir, "search-dir", env("CHAT_SEARCH_DIR", ""), "directory of this node's search index, derived from the store and rebuilt from it when missing; empty: search under the data directory; off: no search (CHAT_SEARCH_DIR)")
	fs.StringVar(&o.mongoURI, "mongo-uri", env("CHAT_MONGO_URI", ""), "MongoDB URI; empty starts the embedded store (CHAT_MONGO_URI)")
	fs.StringVar(&o.storeSync, "store-sync", env("CHAT_STORE_SYNC", embedded.SyncInterval), "how the embedded store waits for the disk: interval (commits synced to disk every 100 ms: survives a killed process at once, a power loss after 100 ms), full (every commit synced) or normal (synced at checkpoints only) (CHAT_STORE_SYNC)")
	fs.StringVar(&o.mongoDB, "mongo-db", env("CHAT_MONGO_DB", node.DefaultDatabase), "MongoDB database (CHAT_MONGO_DB)")
	fs.StringVar(&o.natsURL, "nats-url", env("CHAT_NATS_URL", ""), "NATS server URLs, comma-separated; empty starts an in-process server (CHAT_NATS_URL)")
	fs.StringVar(&o.jwtSecret, "jwt-secret", env("CHAT_JWT_SECRET", ""), "HS256 secret for tokens; empty means dev mode (CHAT_JWT_SECRET)")
	fs.StringVar(&o.jwtIssuer, "jwt-issuer", env("CHAT_JWT_ISSUER", ""), "required token issuer (iss); empty: not checked (CHAT_JWT_ISSUER)")
	fs.StringVar(&o.jwtAudience, "jwt-audience", env("CHAT_JWT_AUDIENCE", ""), "required token audience (aud); empty: not checked (CHAT_JWT_AUDIENCE)")
	fs.StringVar(&o.adminSecret, "admin-secret", env("CHAT_ADMIN_SECRET", ""), "bearer secret of the admin API under /admin/ on the admin listener, at least 32 bytes; empty: no admin API (CHAT_ADMIN_SECRET)")
	maxLifetime, err := envDuration("CHAT_JWT_MAX_LIFETIME", auth.DefaultMaxLifetime)
	if err != nil {
		return o, err
	}
	fs.DurationVar(&o.jwtMaxLifetime, "jwt-max-lifetime", maxLifetime, "longest token lifetime accepted, exp - iat (CHAT_JWT_MAX_LIFETIME)")
	fs.StringVar(&o.logLevel, "log-level", env("CHAT_LOG_LEVEL", "info"), "debug, info, warn or error (CHAT_LOG_LEVEL)")
	fs.StringVar(&o.nodeID, "node-id", env("CHAT_NODE_ID", ""), "name of this node; default the host name (CHAT_NODE_ID)")
	fs.StringVar(&o.origins, "allowed-origins", env("CHAT_ALLOWED_ORIGINS", ""), "extra page origins allowed to open WebSockets, comma-separated host patterns (CHAT_ALLOWED_ORIGINS)")
	partitions, err := envInt("CHAT_PARTITIONS", sequencer.DefaultPartitions)
	if err != nil {
		return o, err
	}
	fs.IntVar(&o.partitions, "partitions", partitions, "sequencer partitions; the same on every node (CHAT_PARTITIONS)")
	window, err := envDuration("CHAT_READ_WINDOW", readstate.DefaultWindow)
	if err != nil {
		return o, err
	}
	fs.DurationVar(&o.readWindow, "read-window", window, "how long read-cursor moves are coalesced (CHAT_READ_WINDOW)")
	leaseTTL, err := envDuration("CHAT_LEASE_TTL", sequencer.DefaultLeaseTTL)
	if err != nil {
		return o, err
	}
	fs.DurationVar(&o.leaseTTL, "lease-ttl", leaseTTL, "how long a node may go unheard before its partitions move; bounds failover (CHAT_LEASE_TTL)")
	replicas, err := envInt("CHAT_LEASE_REPLICAS", sequencer.DefaultLeaseReplicas)
	if err != nil {
		return o, err
	}
	fs.IntVar(&o.leaseReplicas, "lease-replicas", replicas, "replicas of the lease KV buckets; 3 on a NATS cluster (CHAT_LEASE_REPLICAS)")
	sendRate, err := envFloat("CHAT_SEND_RATE", session.DefaultSendRate)
	if err != nil {
		return o, err
	}
	fs.Float64Var(&o.sendRate, "send-rate", sendRate, "sends per second allowed per user on this node; negative disables the limit (CHAT_SEND_RATE)")
	pooled, err := envInt("CHAT_POOLED_WRITERS", 0)
	if err != nil {
		return o, err
	}
	fs.IntVar(&o.pooledWriters, "pooled-writers", pooled, "goroutines writing a large fan-out's frames at once, so that the rest of the node keeps a core; 0: one fewer than GOMAXPROCS, at least 1 (CHAT_POOLED_WRITERS)")
	dev, err := envBool("CHAT_DEV_MODE", false)
	if err != nil {
		return o, err
	}
	fs.BoolVar(&o.devMode, "dev-mode", dev, "issue tokens for display names even with a secret set, e.g. for a local cluster (CHAT_DEV_MODE)")
	if err := o.push.register(fs); err != nil {
		return o, err
	}
	if err := o.files.register(fs); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.pooledWriters < 0 {
		return o, fmt.Errorf("pooled writers %d: must not be negative", o.pooledWriters)
	}
	return o, nil
}

func run(args []string, log zerolog.Logger) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if o.push.printKeys {
		return printNewKeys(os.Stdout)
	}
	level, err := zerolog.ParseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("log level %q: %w", o.logLevel, err)
	}
	log = log.Level(level)
	if o.nodeID == "" {
		if o.nodeID, err = os.Hostname(); err != nil {
			return fmt.Errorf("read host name: %w", err)
		}
	}
	log = log.With().Str("node", o.nodeID).Logger()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := node.Config{
		Addr:           o.addr,
		AdminAddr:      o.adminAddr,
		NodeID:         o.nodeID,
		MongoURI:       o.mongoURI,
		Database:       o.mongoDB,
		NATSURL:        o.natsURL,
		JWTSecret:      []byte(o.jwtSecret),
		JWTIssuer:      o.jwtIssuer,
		JWTAudience:    o.jwtAudience,
		JWTMaxLifetime: o.jwtMaxLifetime,
		AdminSecret:    []byte(o.adminSecret),
		ReadWindow:     o.readWindow,
		DevMode:        o.devMode,
		SearchDir:      searchDir(o),
		Sequencer:      sequencer.Config{Partitions: o.partitions},
		Leases:         sequencer.LeaseConfig{TTL: o.leaseTTL, RenewInterval: o.leaseTTL / 5, Replicas: o.leaseReplicas},
		Session: session.Config{SendRate: o.sendRate,
			Writers: session.NewWriters(session.WritersConfig{Pooled: o.pooledWriters})},
	}
	if o.origins != "" {
		cfg.AllowedOrigins = strings.Split(o.origins, ",")
	}
	if o.jwtSecret == "" {
		cfg.DevMode = true
		if cfg.JWTSecret, err = devSecret(o.dataDir); err != nil {
			return err
		}
	}
	if cfg.Push, err = o.push.config(o.dataDir); err != nil {
		return err
	}
	if cfg.DevMode {
		log.Warn().Msg("DEV MODE: anyone can sign in with any name (no CHAT_JWT_SECRET, or CHAT_DEV_MODE set). Never run this in production.")
	}
	if cfg.MongoURI == "" {
		store, err := embedded.StartMongo(embedded.MongoConfig{Dir: filepath.Join(o.dataDir, "store"), Sync: o.storeSync})
		if err != nil {
			return err
		}
		defer store.Stop()
		cfg.MongoURI = store.URI()
		log.Info().Str("dir", o.dataDir).Msg("embedded store (FerretDB on SQLite) started; for trying and testing, not production")
	}
	if cfg.NATSURL == "" {
		ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: filepath.Join(o.dataDir, "nats")})
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		cfg.NATSURL = ns.ClientURL()
		log.Info().Str("url", cfg.NATSURL).Msg("in-process NATS server started")
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	blobs, closeBlobs, err := o.files.openBlobs(startCtx, o.dataDir, log)
	if err != nil {
		cancel()
		return err
	}
	defer closeBlobs()
	cfg.Blobs, cfg.Files = blobs, o.files.cfg
	n, err := node.Start(startCtx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	addrErr := writeAddrFile(o.addrFile, n.Addr(), n.AdminAddr())
	if addrErr != nil {
		stop() // whoever waits for the file would wait for nothing: stop at once
	}
	<-ctx.Done()
	log.Info().Msg("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(addrErr, n.Shutdown(shutdownCtx))
}

// searchOff is the -search-dir that turns search off: the index holds every message's text on
// the node's disk, which an operator may not want there.
const searchOff = "off"

// searchDir is where the node keeps its search index: -search-dir, by default under the data
// directory, or "" (no search) for searchOff.
func searchDir(o options) string {
	if o.searchDir == searchOff {
		return ""
	}
	return cmp.Or(o.searchDir, filepath.Join(o.dataDir, "search"))
}

// listenAddrs is what -addr-file holds.
type listenAddrs struct {
	Addr      string `json:"addr"`
	AdminAddr string `json:"adminAddr,omitempty"` // none without an admin listener
}

// writeAddrFile writes the listeners' addresses to path ("" writes nothing). It writes a
// temporary file and renames it, so that a reader polling for path never sees half of it.
func writeAddrFile(path, addr, adminAddr string) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(listenAddrs{Addr: addr, AdminAddr: adminAddr})
	if err != nil {
		return fmt.Errorf("encode listen addresses: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	return nil
}

// devSecret returns the dev-mode signing secret, kept in the data directory so tokens survive a
// restart of the server.
func devSecret(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "dev-jwt-secret")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read dev secret: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generate dev secret: %w", err)
	}
	secret := []byte(hex.EncodeToString(raw))
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		return nil, fmt.Errorf("write dev secret: %w", err)
	}
	return secret, nil
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envInt(key string, def int) (int, error) {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", key, v, err)
	}
	return n, nil
}

func envFloat(key string, def float64) (float64, error) {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", key, v, err)
	}
	return f, nil
}

func envBool(key string, def bool) (bool, error) {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: %w", key, v, err)
	}
	return b, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", key, v, err)
	}
	return d, nil
}
