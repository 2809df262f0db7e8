// Package session owns one WebSocket connection: a read loop that decodes and validates client
// frames and hands them to a Handler one at a time, a single writer fed by a bounded queue, and a
// ping/pong keepalive. A client that cannot keep up is disconnected rather than allowed to stall
// whoever is writing to it.
package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/protocol"
)

// Close codes the server uses beyond the standard ones.
const (
	// StatusSlowConsumer closes a session whose write queue filled up.
	StatusSlowConsumer websocket.StatusCode = 4008
	// StatusRemoved closes a session whose user was removed or whose token was revoked.
	StatusRemoved websocket.StatusCode = 4003
	// StatusTooManyConnections refuses a session past the per-user connection cap.
	StatusTooManyConnections websocket.StatusCode = 4029
)

// Defaults, each with its reason.
const (
	// DefaultReadLimit bounds one client frame. A maximal message body must fit however it is
	// escaped: JSON encoders write a control character (and encoding/json also '<', '>', '&') as
	// six bytes, \u0001, so the limit is six bodies plus room for the other fields.
	DefaultReadLimit = 6*protocol.MaxBodyBytes + 4<<10
	// DefaultQueueSize bounds the pushed frames waiting to be written to one socket. A healthy
	// client drains it in milliseconds; a full queue means the client stopped reading. Replies to
	// the client's own requests wait for room instead (QueueReply), so a long sync cannot fill it.
	// Each slot costs 24 bytes on every connection, idle or not.
	DefaultQueueSize = 256
	// DefaultPingInterval keeps NAT and load-balancer idle timers (often 60 s) from cutting idle
	// connections, and finds dead peers within about a minute.
	DefaultPingInterval = 25 * time.Second
	// DefaultPongTimeout is how long a peer has to answer a ping before it is taken as dead.
	DefaultPongTimeout = 15 * time.Second
	// DefaultWriteTimeout bounds one frame write; a peer that accepts no bytes for this long is gone.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultSendRate and DefaultSendBurst bound a connection's sends: fast typing and pasting
	// bursts pass, a script flooding a group does not.
	DefaultSendRate  = 20
	DefaultSendBurst = 40
	// DefaultFrameRate and DefaultFrameBurst bound every frame a connection sends (typing and
	// read frames fan out too): far above what a page sends, far below a flood.
	DefaultFrameRate  = 100
	DefaultFrameBurst = 200
)

// Config tunes sessions. Zero fields take the defaults above; a negative SendRate or FrameRate
// disables that limit.
type Config struct {
	ReadLimit    int64
	QueueSize    int
	PingInterval time.Duration
	PongTimeout  time.Duration
	WriteTimeout time.Duration
	SendRate     float64
	SendBurst    int
	FrameRate    float64
	FrameBurst   int
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		ReadLimit:    DefaultReadLimit,
		QueueSize:    DefaultQueueSize,
		PingInterval: DefaultPingInterval,
		PongTimeout:  DefaultPongTimeout,
		WriteTimeout: DefaultWriteTimeout,
		SendRate:     DefaultSendRate,
		SendBurst:    DefaultSendBurst,
		FrameRate:    DefaultFrameRate,
		FrameBurst:   DefaultFrameBurst,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.ReadLimit < 0 || c.QueueSize < 0 || c.PingInterval < 0 || c.PongTimeout < 0 || c.WriteTimeout < 0 {
		return errors.New("session: limits and timeouts must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ReadLimit == 0 {
		c.ReadLimit = d.ReadLimit
	}
	if c.QueueSize == 0 {
		c.QueueSize = d.QueueSize
	}
	if c.PingInterval == 0 {
		c.PingInterval = d.PingInterval
	}
	if c.PongTimeout == 0 {
		c.PongTimeout = d.PongTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.SendRate == 0 {
		c.SendRate = d.SendRate
	}
	if c.SendBurst == 0 {
		c.SendBurst = d.SendBurst
	}
	if c.FrameRate == 0 {
		c.FrameRate = d.FrameRate
	}
	if c.FrameBurst == 0 {
		c.FrameBurst = d.FrameBurst
	}
	return c
}

// Handler is what a session hands its frames to.
type Handler interface {
	// Opened is called once before the first frame; an error closes the session at once.
	Opened(ctx context.Context, s *Session) error
	// HandleFrame is called for each valid frame, one at a time in arrival order. A returned error
	// is answered with an error frame; the session stays open.
	HandleFrame(ctx context.Context, s *Session, f protocol.ClientFrame) error
	// Closed is called once when the session has ended, after Opened succeeded.
	Closed(s *Session)
}

// Session is one live WebSocket connection of one authenticated user.
type Session struct {
	id     string
	userID string
	conn   *websocket.Conn
	cfg    Config
	log    zerolog.Logger
	sends  *rate.Limiter
	frames *rate.Limiter

	queue     chan []byte
	closeOnce sync.Once
	closed    chan struct{}
	closeCode websocket.StatusCode
	closeMsg  string
}

// New wraps an accepted connection of userID.
func New(conn *websocket.Conn, userID string, cfg Config, log zerolog.Logger) *Session {
	cfg = cfg.withDefaults()
	id := uuid.NewString()
	conn.SetReadLimit(cfg.ReadLimit)
	return &Session{
		id:     id,
		userID: userID,
		conn:   conn,
		cfg:    cfg,
		log:    log.With().Str("session", id).Str("user", userID).Logger(),
		sends:  limiter(cfg.SendRate, cfg.SendBurst),
		frames: limiter(cfg.FrameRate, cfg.FrameBurst),
		queue:  make(chan []byte, cfg.QueueSize),
		closed: make(chan struct{}),
	}
}

// limiter allows perSecond events with bursts of burst; a negative rate allows everything.
func limiter(perSecond float64, burst int) *rate.Limiter {
	if perSecond < 0 {
		return rate.NewLimiter(rate.Inf, burst)
	}
	return rate.NewLimiter(rate.Limit(perSecond), burst)
}

// ID identifies the session.
func (s *Session) ID() string { return s.id }

// UserID is the authenticated user; frames never override it.
func (s *Session) UserID() string { return s.userID }

// Enqueue queues an encoded frame for the writer without blocking. If the queue is full the
// session is closed as a slow consumer and false is returned; the frame is dropped, and the
// client fills the gap from history when it reconnects.
func (s *Session) Enqueue(frame []byte) bool {
	select {
	case <-s.closed:
		return false
	default:
	}
	select {
	case s.queue <- frame:
		return true
	default:
		s.Close(StatusSlowConsumer, "slow consumer: write queue full")
		return false
	}
}

// QueueReply queues a frame that answers the client's own request, waiting for room: the client
// paces what it asked for by reading it. It fails when the session closes or ctx ends.
func (s *Session) QueueReply(ctx context.Context, frame []byte) error {
	select {
	case s.queue <- frame:
		return nil
	case <-s.closed:
		return errors.New("session closed")
	case <-ctx.Done():
		return fmt.Errorf("queue reply: %w", ctx.Err())
	}
}

// Reply encodes and queues a frame.
func (s *Session) Reply(f protocol.ServerFrame) {
	data, err := protocol.Encode(f)
	if err != nil {
		s.log.Error().Err(err).Msg("encode reply")
		return
	}
	s.Enqueue(data)
}

// Close ends the session with a close code; the first call wins.
func (s *Session) Close(code websocket.StatusCode, reason string) {
	s.closeOnce.Do(func() {
		s.closeCode, s.closeMsg = code, reason
		close(s.closed)
	})
}

// Done is closed when the session is closing.
func (s *Session) Done() <-chan struct{} { return s.closed }

// Serve runs the session until the client goes away, the session is closed or ctx ends.
func (s *Session) Serve(ctx context.Context, h Handler) error {
	if err := h.Opened(ctx, s); err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited {
			_ = s.conn.Close(StatusTooManyConnections, pe.Message)
		} else {
			_ = s.conn.Close(websocket.StatusInternalError, "could not open session")
		}
		return fmt.Errorf("open session: %w", err)
	}
	defer h.Closed(s)

	// The connection's own context outlives ctx: on shutdown the writer must still send the close
	// frame, and only then are the reader and any handler I/O cut off. The reader runs on this
	// goroutine (the HTTP server's, for the connection), so a session costs two goroutines.
	connCtx, cancelConn := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelConn()
	stopWatching := context.AfterFunc(ctx, func() { s.Close(websocket.StatusGoingAway, "server shutting down") })
	defer stopWatching()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeLoop(connCtx)
		cancelConn()
	}()
	s.readLoop(connCtx, h)
	<-writerDone
	return nil
}

func (s *Session) readLoop(ctx context.Context, h Handler) {
	defer s.Close(websocket.StatusNormalClosure, "")
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			if status := websocket.CloseStatus(err); status != -1 {
				s.Close(status, "")
			} else if !errors.Is(err, context.Canceled) {
				s.log.Debug().Err(err).Msg("read")
			}
			return
		}
		if typ != websocket.MessageText {
			s.Reply(protocol.ErrorFrame("", protocol.Errorf(protocol.CodeBadFrame, "frames must be text")))
			continue
		}
		if !s.frames.Allow() {
			s.Reply(protocol.ErrorFrame("", &protocol.Error{Code: protocol.CodeRateLimited,
				Message: "too many frames; slow down", Retryable: true}))
			continue
		}
		f, err := protocol.DecodeClientFrame(data)
		if err != nil {
			s.Reply(protocol.ErrorFrame(f.ID, protocol.AsError(err)))
			continue
		}
		if f.Type == protocol.TypePing {
			// Browsers cannot see WebSocket pings; this lets a page notice a dead connection.
			s.Reply(protocol.ServerFrame{Type: protocol.TypePong, ID: f.ID})
			continue
		}
		if f.Type == protocol.TypeSend && !s.sends.Allow() {
			s.Reply(protocol.ErrorFrame(f.ID, &protocol.Error{Code: protocol.CodeRateLimited,
				Message: "too many sends; slow down", Retryable: true}))
			continue
		}
		if err := h.HandleFrame(ctx, s, f); err != nil {
			pe := protocol.AsError(err)
			if pe.Code == protocol.CodeInternal {
				s.log.Error().Err(err).Str("type", f.Type).Msg("handle frame")
			}
			s.Reply(protocol.ErrorFrame(f.ID, pe))
		}
	}
}

// writeLoop is the only writer of the socket. It also pings, so a peer that stops answering is
// closed within PingInterval+PongTimeout.
func (s *Session) writeLoop(ctx context.Context) {
	ping := time.NewTicker(s.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case frame := <-s.queue:
			if err := s.write(ctx, frame); err != nil {
				s.log.Debug().Err(err).Msg("write")
				s.Close(websocket.StatusAbnormalClosure, "")
				s.finish()
				return
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PongTimeout)
			err := s.conn.Ping(pctx)
			cancel()
			if err != nil {
				s.log.Debug().Err(err).Msg("ping")
				s.Close(websocket.StatusPolicyViolation, "ping timeout")
				s.finish()
				return
			}
		case <-s.closed:
			s.finish()
			return
		}
	}
}

// finish flushes what is queued (best effort, bounded by WriteTimeout) and sends the close frame.
func (s *Session) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	if s.closeCode != StatusSlowConsumer && s.closeCode != websocket.StatusAbnormalClosure {
		for drained := false; !drained; {
			select {
			case frame := <-s.queue:
				if s.write(ctx, frame) != nil {
					drained = true
				}
			default:
				drained = true
			}
		}
	}
	if s.closeCode == websocket.StatusAbnormalClosure {
		_ = s.conn.CloseNow() // the connection is already broken; nothing to say
		return
	}
	if err := s.conn.Close(s.closeCode, s.closeMsg); err != nil {
		s.log.Debug().Err(err).Msg("close")
	}
}

func (s *Session) write(ctx context.Context, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}
