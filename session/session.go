// Package session owns one WebSocket connection so that its user can never disturb another: a
// reader that keeps reading while frames are handled on a bounded set of goroutines, limits
// that refuse frames instead of cutting the socket, and a single writer fed by an output queue
// bounded in bytes that cuts only a client which stopped reading what it must receive, while
// typing, receipts and badges are coalesced for a reader who falls behind. Writers bounds the
// writers of a server's sessions running at once, so that a large fan-out leaves a core for the
// rest of the node.
package session

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/protocol"
)

// Close codes the server uses beyond the standard ones.
const (
	// StatusSlowConsumer closes a session whose client stopped reading frames it must receive.
	StatusSlowConsumer websocket.StatusCode = 4008
	// StatusPolicyAbuse closes a session whose client kept sending frames after being refused.
	StatusPolicyAbuse websocket.StatusCode = 4009
	// StatusRemoved closes a session whose user was removed or whose token was revoked.
	StatusRemoved websocket.StatusCode = 4003
	// StatusTooManyConnections refuses a session past the per-user connection cap.
	StatusTooManyConnections websocket.StatusCode = 4029
)

// Handler is what a session hands its frames to.
type Handler interface {
	// Opened is called once before the first frame; an error closes the session at once.
	Opened(ctx context.Context, s *Session) error
	// HandleFrame is called for each valid frame that passed the limits, on its own goroutine:
	// up to Config.MaxInFlight calls run at once for one session, and frames with the same
	// non-empty ConversationID are handled one at a time in arrival order, so a connection's
	// sends to one conversation keep their order. ctx is cancelled when the session ends, and
	// the session waits for every call to return, so a call must honour ctx. A returned error
	// is answered with an error frame; the session stays open. Ping frames never reach it.
	HandleFrame(ctx context.Context, s *Session, f protocol.ClientFrame) error
	// Closed is called once when the session has ended, after Opened succeeded and after every
	// HandleFrame call has returned.
	Closed(s *Session)
}

// Session is one live WebSocket connection of one authenticated user.
//
// An idle session holds one goroutine, its reader, the one that called Serve. The writer runs
// only while frames wait (or to close the socket), and the keepalive ping is a timer that takes
// a goroutine only while a ping waits for its pong: at tens of thousands of mostly idle sockets
// per node, a goroutine's stack is most of what a connection costs.
type Session struct {
	id     string
	userID string
	conn   *websocket.Conn
	gather *gatherConn // under conn: the writer gathers a round's frames into one write
	cfg    Config
	log    zerolog.Logger // shared; logAt adds the session's fields to each line
	peer   Peer
	limits *Limits // nil: per-user budgets are this connection's own

	// Read side; the limiters and refusal counts are used by the reader goroutine only.
	frames   *rate.Limiter // this connection's frames; nil when unlimited
	abuse    *rate.Limiter // this connection's refused frames; nil when unlimited
	user     *UserLimits   // the user's shared budget, set by Serve
	refused  refusals
	slots    chan struct{} // one token per frame in flight, MaxInFlight of them
	lanes    lanes
	handlers sync.WaitGroup // HandleFrame goroutines

	// Write side.
	out     outbox
	writers sync.WaitGroup // the writer, while one runs or waits for Writers' pool
	// watchdog bounds the write in progress (writeWatched). Only the writer stamps and arms
	// it, and writers run one at a time, each started under the outbox's lock after the last
	// one ended.
	watchdog watchdog
	pings    keepalive

	life      lifetime // the session's context, done when it closes; handlers run under it
	closeOnce sync.Once
	closeCode websocket.StatusCode // set before life ends
	closeMsg  string
}

// Peer is where a connection comes from, as the session's log lines name it.
type Peer struct {
	Addr         string // the remote address of the connection
	ForwardedFor string // X-Forwarded-For, as set by a load balancer; may be empty
}

// New wraps a connection of userID from peer, accepted by Accept. Sessions of one user that share limits
// share that user's send and frame budgets; with nil limits every budget is this connection's own.
func New(sock *Socket, userID string, peer Peer, cfg Config, limits *Limits, log zerolog.Logger) *Session {
	cfg = cfg.withDefaults()
	id := uuid.NewString()
	sock.SetReadLimit(cfg.ReadLimit)
	s := &Session{
		id:     id,
		userID: userID,
		conn:   sock.Conn,
		gather: sock.gather,
		cfg:    cfg,
		log:    log,
		peer:   peer,
		limits: limits,
		frames: limiter(cfg.FrameRate, cfg.FrameBurst),
		abuse:  limiter(cfg.AbuseRate, cfg.AbuseBurst),
		slots:  make(chan struct{}, cfg.MaxInFlight),
		life:   lifetime{done: make(chan struct{})},
		out:    outbox{limit: cfg.MaxQueuedBytes},
	}
	sock.gather.handOver = s.out.handedOver
	return s
}

// ID identifies the session.
func (s *Session) ID() string { return s.id }

// UserID is the authenticated user; frames never override it.
func (s *Session) UserID() string { return s.userID }

// Context is cancelled when the session ends; work done for this session alone should use it.
// HandleFrame calls get it.
func (s *Session) Context() context.Context { return &s.life }

// Close ends the session with a close code; the first call wins. Frames already queued are
// still written (within WriteTimeout), except after a slow-consumer cut.
func (s *Session) Close(code websocket.StatusCode, reason string) {
	s.closeWith(code, reason)
}

// closeWith is Close that reports whether this call closed the session, so that a cut is logged
// and counted once however many goroutines find the reason for it at the same time.
func (s *Session) closeWith(code websocket.StatusCode, reason string) bool {
	won := false
	s.closeOnce.Do(func() {
		won = true
		s.closeCode, s.closeMsg = code, reason
		s.closeOutbox() // its writer flushes what waits and sends the close frame
		s.life.end()
	})
	return won
}

// logAt starts a log line of the session at level, or returns nil (on which zerolog's Event
// methods do nothing) when the level is off. The line names the session, the user and the peer,
// added per line rather than kept in a logger context of the session's own: a context costs
// every idle socket half a kibibyte, and sessions log rarely.
func (s *Session) logAt(level zerolog.Level) *zerolog.Event {
	ev := s.log.WithLevel(level)
	if ev == nil {
		return nil
	}
	ev = ev.Str("session", s.id).Str("user", s.userID).Str("remote", s.peer.Addr)
	if s.peer.ForwardedFor != "" {
		ev = ev.Str("forwardedFor", s.peer.ForwardedFor)
	}
	return ev
}

// cutLog returns a warn event for a session the server cuts (code says why), carrying the user,
// the session and what the caller of New put in the logger (the server puts the remote address).
// It returns nil, on which zerolog's Event methods do nothing, when the cut lines of the sessions
// sharing this session's Limits are over their budget; the next line written counts those.
func (s *Session) cutLog(code websocket.StatusCode) *zerolog.Event {
	suppressed, ok := s.limits.takeCutLog()
	if !ok {
		return nil
	}
	ev := s.logAt(zerolog.WarnLevel).Int("closeCode", int(code))
	if suppressed > 0 {
		ev = ev.Int64("suppressedCutLogs", suppressed)
	}
	return ev
}

// Done is closed when the session is closing.
func (s *Session) Done() <-chan struct{} { return s.life.done }

// Serve runs the session until the client goes away, the session is closed or ctx ends. It
// returns only after the reader, the writer and every HandleFrame call have finished.
func (s *Session) Serve(ctx context.Context, h Handler) error {
	if s.limits != nil {
		s.user = s.limits.Acquire(s.userID)
		defer s.limits.Release(s.user)
	} else {
		s.user = newUserLimits(s.userID, s.cfg)
	}
	if err := h.Opened(ctx, s); err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited {
			s.Close(StatusTooManyConnections, pe.Message)
		} else {
			s.Close(websocket.StatusInternalError, "could not open session")
		}
		_ = s.conn.Close(s.closeCode, s.closeMsg)
		s.cfg.Metrics.sessionClosed(s.closeCode) // not opened: the open gauge never counted it
		return fmt.Errorf("open session: %w", err)
	}
	s.cfg.Metrics.sessionOpened()
	// closeCode is read once the session has ended, when it is set for good.
	defer func() { s.cfg.Metrics.sessionEnded(s.closeCode) }()

	stopWatching := context.AfterFunc(ctx, func() { s.Close(websocket.StatusGoingAway, "server shutting down") })
	defer stopWatching()
	s.openOutbox()
	s.startPings()
	// The reader runs on this goroutine until the connection ends; the writer ends it after
	// the session closes.
	s.readLoop(h)
	s.stopPings()
	s.handlers.Wait()
	s.writers.Wait()
	s.watchdog.stop()
	h.Closed(s)
	return nil
}
