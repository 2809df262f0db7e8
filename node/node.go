// Package node assembles one chat node: it connects to NATS and MongoDB, takes its share of the
// sequencer partitions, starts the bus, the hub, the chat service and the HTTP server, and on shutdown stops them in the
// order that loses nothing: stop accepting, close sessions with going-away, hand partitions over,
// flush read cursors, disconnect.
package node

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/bus"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/indexing"
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/server"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/webhook"
)

// Defaults, each with its reason.
const (
	// DefaultAddr is where the node listens when nothing is configured.
	DefaultAddr = ":8080"
	// DefaultAdminAddr is where cmd/chatd serves metrics, debug and the admin API when nothing is
	// configured: loopback only, so nothing of it is reachable from another machine by default.
	DefaultAdminAddr = "127.0.0.1:9090"
	// DefaultDatabase is the MongoDB database name.
	DefaultDatabase = "chat"
	// shutdownTimeout bounds each stage of a graceful stop.
	shutdownTimeout = 10 * time.Second
	// natsReconnectBuffer is how much a node buffers while NATS reconnects: enough for a few
	// seconds of sends without unbounded memory.
	natsReconnectBuffer = 32 << 20
)

// Config describes one node. cmd/chatd fills it from flags and environment.
type Config struct {
	// Addr is the public HTTP listen address.
	Addr string
	// AdminAddr is the admin listener's address: /metrics, health, /debug/ and the admin API.
	// Empty means no admin listener. Keep it off the public network.
	AdminAddr string
	// NodeID names the node in logs and in partition leases and must be unique in the cluster;
	// default a random id.
	NodeID string
	// MongoURI and Database locate the store.
	MongoURI string
	Database string
	// NATSURL is a comma-separated list of NATS servers.
	NATSURL string
	// JWTSecret verifies tokens; when DevMode is set the node also issues them.
	JWTSecret []byte
	DevMode   bool
	// JWTIssuer and JWTAudience, if set, must be a token's iss and one of its aud; JWTMaxLifetime
	// bounds a token's lifetime (0 means auth.DefaultMaxLifetime). See auth.Config.
	JWTIssuer, JWTAudience string
	JWTMaxLifetime         time.Duration
	// AdminSecret turns on the admin API under /admin/ (at least 32 bytes); empty means off.
	AdminSecret []byte
	// ReadWindow is how long read-cursor moves are coalesced before they are written.
	ReadWindow time.Duration
	// AllowedOrigins are extra page origins allowed to open WebSockets.
	AllowedOrigins []string
	// StoreMonitor, if set, sees every command sent to MongoDB (tests count and inspect them).
	StoreMonitor *event.CommandMonitor
	// StoreTimeout bounds one MongoDB round trip; 0 means storage.DefaultOperationTimeout.
	StoreTimeout time.Duration
	Sequencer    sequencer.Config
	Leases       sequencer.LeaseConfig
	Chat         chat.Config
	Session      session.Config
	// SearchDir is the directory of the node's search index (package indexing), derived from the
	// store and rebuilt from it when missing; empty turns search off.
	SearchDir string
	// Push turns on Web Push notifications when it has a VAPID key pair (node/push.go).
	Push push.Config
	// Webhooks tunes the delivery of outgoing webhooks.
	Webhooks webhook.Config
	// Blobs keeps attachments' files (Dir under the data directory, or S3); nil turns
	// attachments off. The node does not close it. Files tunes them; its LinkSecret is derived
	// from JWTSecret.
	Blobs blob.Store
	Files attach.Config
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MongoURI == "":
		return errors.New("node: a MongoDB URI is required")
	case c.NATSURL == "":
		return errors.New("node: a NATS URL is required")
	case len(c.JWTSecret) < auth.MinSecretBytes:
		return fmt.Errorf("node: the JWT secret must be at least %d bytes", auth.MinSecretBytes)
	case len(c.AdminSecret) > 0 && len(c.AdminSecret) < auth.MinSecretBytes:
		return fmt.Errorf("node: the admin secret must be at least %d bytes", auth.MinSecretBytes)
	}
	if err := c.authConfig().Validate(); err != nil {
		return err
	}
	if err := c.Sequencer.Validate(); err != nil {
		return err
	}
	if err := c.Leases.Validate(); err != nil {
		return err
	}
	if err := c.Chat.Validate(); err != nil {
		return err
	}
	return c.Session.Validate()
}

// authConfig is the token configuration of the node.
func (c Config) authConfig() auth.Config {
	a := auth.DefaultConfig()
	a.Secret, a.DevMode, a.Issuer, a.Audience = c.JWTSecret, c.DevMode, c.JWTIssuer, c.JWTAudience
	if c.JWTMaxLifetime != 0 {
		a.MaxLifetime = c.JWTMaxLifetime
		a.TokenTTL = min(a.TokenTTL, a.MaxLifetime)
	}
	return a
}

// Node is a running chat node.
type Node struct {
	cfg      Config
	log      zerolog.Logger
	nc       *nats.Conn
	store    *storage.Store
	seq      *sequencer.Sequencer
	leases   *sequencer.Leases
	reads    *readstate.Coalescer
	bus      *bus.Bus
	chat     *chat.Service
	search   *indexing.Feed // nil without a SearchDir
	srv      *server.Server
	push     *push.Notifier // nil without Web Push
	webhooks *webhook.Dispatcher
	http     *http.Server
	listener net.Listener
	served   chan error
	metrics  *prometheus.Registry
	// files is the node's attachments; nil without Blobs.
	files *attach.Service

	// admin is the admin listener's server; nil without an AdminAddr.
	admin         *http.Server
	adminListener net.Listener
	adminServed   chan error

	// reconnected is signalled by NATS reconnects; resync delivers what was missed meanwhile.
	reconnected chan struct{}
	stopResync  chan struct{}
	resyncDone  chan struct{}
}

// Start connects everything and begins serving. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config, log zerolog.Logger) (_ *Node, err error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	if cfg.NodeID == "" {
		cfg.NodeID = uuid.NewString()
	}
	cfg.Leases.NodeID = cfg.NodeID
	cfg.Chat.NodeID = cfg.NodeID
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, served: make(chan error, 1), reconnected: make(chan struct{}, 1),
		stopResync: make(chan struct{}), resyncDone: make(chan struct{}), metrics: newRegistry(),
		adminServed: make(chan error, 1)}
	natsStats := newNATSMetrics(n.metrics)
	cfg.Session.Metrics = session.NewMetrics(n.metrics)
	cfg.Chat.Metrics = chat.NewMetrics(n.metrics)
	cfg.Sequencer.Metrics = sequencer.NewMetrics(n.metrics)
	defer func() {
		if err != nil {
			n.stopParts()
		}
	}()

	n.nc, err = nats.Connect(cfg.NATSURL,
		nats.Name("chatd "+cfg.NodeID),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(natsReconnectBuffer),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil is our own Close at shutdown
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info().Str("server", c.ConnectedUrl()).Msg("nats reconnected")
			natsStats.reconnects.Inc()
			if n.seq != nil {
				n.seq.Reconnected()
			}
			if n.search != nil {
				n.search.Reconnected()
			}
			if n.push != nil {
				n.push.ForgetAllDevices() // announcements may have been missed meanwhile
			}
			select {
			case n.reconnected <- struct{}{}:
			default: // a resync is already due
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				natsStats.slowConsumers.Inc()
			}
			log.Error().Err(err).Str("subject", subject).Msg("nats error")
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to nats at %s: %w", cfg.NATSURL, err)
	}
	n.store, err = storage.Open(ctx, storage.Config{URI: cfg.MongoURI, Database: cfg.Database, Monitor: cfg.StoreMonitor,
		OperationTimeout: cfg.StoreTimeout, Metrics: storage.NewMetrics(n.metrics)})
	if err != nil {
		return nil, err
	}
	if err := n.startObservers(&cfg); err != nil {
		return nil, err
	}
	if cfg.Blobs != nil {
		cfg.Files.LinkSecret, cfg.Files.Metrics = linkSecret(cfg.JWTSecret), attach.NewMetrics(n.metrics)
		if n.files, err = attach.New(cfg.Files, n.store, cfg.Blobs, log); err != nil {
			return nil, err
		}
		n.files.StartCollector()
		cfg.Sequencer.Files, cfg.Chat.Files = n.files, n.files
	}
	n.seq, err = sequencer.New(cfg.Sequencer, n.nc, n.store, log)
	if err != nil {
		return nil, err
	}
	if n.leases, err = sequencer.StartLeases(ctx, cfg.Leases, n.seq, log); err != nil {
		return nil, err
	}
	cfg.Chat.Nodes = n.leases
	// A node restarted under its old id holds none of the connections it held before.
	if err := n.store.ForgetNodePresence(ctx, cfg.NodeID); err != nil {
		return nil, err
	}
	n.reads = readstate.New(n.store, readstate.Config{Window: cfg.ReadWindow, Metrics: readstate.NewMetrics(n.metrics)}, log)
	n.bus = bus.New(bus.Config{SubjectPrefix: cmp.Or(cfg.Sequencer.SubjectPrefix, sequencer.DefaultSubjectPrefix),
		Metrics: bus.NewMetrics(n.metrics)}, n.nc, log)
	cfg.Chat.Hub.Metrics = hub.NewMetrics(n.metrics)
	searchMetrics := indexing.NewMetrics(n.metrics) // registered without search too: one list of metrics
	if cfg.SearchDir != "" {
		if n.search, err = indexing.Start(indexing.Config{Dir: cfg.SearchDir, SubjectPrefix: cfg.Sequencer.SubjectPrefix,
			Metrics: searchMetrics}, n.nc, n.store, log); err != nil {
			return nil, err
		}
		cfg.Chat.Search = n.search
	}
	var reads chat.Reads = n.reads
	if n.push != nil {
		reads = readsWithPush{n.reads, n.push}
	}
	n.chat, err = chat.New(cfg.Chat, n.store, n.seq, reads, n.bus, log)
	if err != nil {
		return nil, err
	}
	n.bus.SetHandler(n.chat)
	go n.resyncOnReconnect()
	authenticator, err := auth.New(cfg.authConfig())
	if err != nil {
		return nil, err
	}
	n.srv, err = server.New(server.Config{
		AllowedOrigins: cfg.AllowedOrigins,
		Session:        cfg.Session,
		SendTimeout:    cfg.Chat.SendTimeout,
		OpTimeout:      cfg.Chat.OpTimeout,
		Ready:          n.ready,
		AdminSecret:    cfg.AdminSecret,
		NodeID:         cfg.NodeID,
		Owned:          n.seq.Owned,
		Metrics:        server.NewMetrics(n.metrics),
		Gatherer:       n.metrics,
		Push:           n.pushAPI(),
		Webhooks:       n.store,
		Bots:           n.store,
		Files:          n.files,
	}, authenticator, n.chat, n.store, log)
	if err != nil {
		return nil, err
	}
	n.listener, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	n.http = &http.Server{Handler: n.srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if cfg.AdminAddr != "" {
		if n.adminListener, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			_ = n.listener.Close()
			return nil, fmt.Errorf("listen on admin address %s: %w", cfg.AdminAddr, err)
		}
		n.admin = &http.Server{Handler: n.srv.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { n.adminServed <- n.admin.Serve(n.adminListener) }()
		log.Info().Str("addr", n.adminListener.Addr().String()).Msg("admin listener serving")
	}
	go func() { n.served <- n.http.Serve(n.listener) }()
	log.Info().Str("addr", n.listener.Addr().String()).Int("partitions", n.seq.Partitions()).Msg("chat node serving")
	return n, nil
}

// resyncOnReconnect runs until shutdown: after each NATS reconnect the service delivers what its live
// conversations stored while the node was cut off.
func (n *Node) resyncOnReconnect() {
	defer close(n.resyncDone)
	for {
		select {
		case <-n.reconnected:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			n.chat.Resync(ctx)
			cancel()
		case <-n.stopResync:
			return
		}
	}
}

// Addr is the address the node listens on.
func (n *Node) Addr() string { return n.listener.Addr().String() }

// AdminAddr is the admin listener's address, or "" when there is none.
func (n *Node) AdminAddr() string {
	if n.adminListener == nil {
		return ""
	}
	return n.adminListener.Addr().String()
}

// ready names the dependency that does not answer in words fit for /readyz; the details are
// for the log only.
func (n *Node) ready(ctx context.Context) error {
	if !n.nc.IsConnected() {
		return server.NotReady("NATS not connected", errors.New(n.nc.Status().String()))
	}
	if err := n.store.Ping(ctx); err != nil {
		return server.NotReady("store not reachable", err)
	}
	return nil
}

// Shutdown stops the node gracefully: no new connections, sessions closed with going-away,
// partitions released after their queued sends are answered, read cursors flushed.
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	stageCtx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	if err := n.srv.CloseSessions(stageCtx); err != nil {
		errs = append(errs, err)
	}
	if err := n.http.Shutdown(stageCtx); err != nil {
		errs = append(errs, fmt.Errorf("stop http: %w", err))
	}
	if err := <-n.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	}
	// The admin listener stays up while sessions drain, so operators watch the shutdown.
	if n.admin != nil {
		if err := n.admin.Shutdown(stageCtx); err != nil {
			errs = append(errs, fmt.Errorf("stop admin http: %w", err))
		}
		if err := <-n.adminServed; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve admin http: %w", err))
		}
	}
	n.stopParts()
	return errors.Join(errs...)
}

// stopParts stops what Start started, in reverse order; parts not started are nil.
func (n *Node) stopParts() {
	if n.bus != nil {
		if n.chat != nil {
			close(n.stopResync)
			<-n.resyncDone
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			n.chat.Stop(ctx) // its last presence records, while the store is still there
			cancel()
		}
		n.bus.Close()
	}
	if n.search != nil {
		if err := n.search.Close(); err != nil {
			n.log.Warn().Err(err).Msg("close search index")
		}
	}
	if n.leases != nil {
		n.leases.Close()
	}
	if n.seq != nil {
		n.seq.Close()
	}
	if n.push != nil {
		n.push.Stop() // after the partitions: nothing hears new messages any more
	}
	if n.webhooks != nil {
		n.webhooks.Stop() // the next owners resume from the cursors
	}
	if n.reads != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		if err := n.reads.Close(ctx); err != nil {
			n.log.Error().Err(err).Msg("flush read cursors at shutdown")
		}
		cancel()
	}
	if n.files != nil {
		n.files.Close()
	}
	if n.nc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		if err := n.nc.FlushWithContext(ctx); err != nil {
			n.log.Warn().Err(err).Msg("flush nats")
		}
		cancel()
		n.nc.Close()
	}
	if n.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := n.store.Close(ctx); err != nil {
			n.log.Warn().Err(err).Msg("close store")
		}
	}
}

// linkSecret derives the key that signs download links from the JWT secret, so the operator
// configures one secret and a link's signature can never pass as a token's, nor the reverse.
func linkSecret(jwtSecret []byte) []byte {
	mac := hmac.New(sha256.New, jwtSecret)
	mac.Write([]byte("chatd file links v1"))
	return mac.Sum(nil)
}
