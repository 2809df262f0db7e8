package session

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
)

// refusalLogInterval spaces the log lines about one session's refused frames: a flood is one
// line a second with counts, not one line a frame.
const refusalLogInterval = time.Second

// readLoop reads frames until the connection fails or closes. It never waits for a frame's
// work, only for room to queue its own replies, so pongs, pings and cancellations are read
// while sends wait for their acks. Its Read has no context: a context would hold a callback
// registration for as long as the socket is idle, and the writer ends the Read by closing the
// connection once the session has closed.
func (s *Session) readLoop(h Handler) {
	defer s.Close(websocket.StatusNormalClosure, "")
	defer s.refused.flush(s)
	for {
		typ, data, err := s.conn.Read(context.Background())
		if err != nil {
			// The session ends with the code observed, so the close metrics tell clients that
			// left (1000, 1001) from connections that broke (1006).
			switch status := websocket.CloseStatus(err); {
			case status != -1:
				s.Close(status, "")
			case s.closing():
				// The writer has ended the connection, after the session was closed.
			case errors.Is(err, websocket.ErrMessageTooBig):
				s.Close(websocket.StatusMessageTooBig, "") // the library has sent this code
			default:
				s.logAt(zerolog.DebugLevel).Err(err).Msg("read")
				s.Close(websocket.StatusAbnormalClosure, "")
			}
			return
		}
		if s.life.Err() != nil {
			continue // closing: read on so the close handshake completes, start nothing new
		}
		s.admit(h, typ, data)
	}
}

// admit decodes one frame, applies the limits and either answers it, refuses it or starts it.
func (s *Session) admit(h Handler, typ websocket.MessageType, data []byte) {
	var f protocol.ClientFrame
	var decodeErr error
	if typ == websocket.MessageText {
		f, decodeErr = protocol.DecodeClientFrame(data)
	}
	s.cfg.Metrics.frameReceived(f.Type) // empty when the frame did not decode
	if retry, ok := take(s.frames, s.user.frames); !ok {
		s.refuse(&s.life, f.ID, "too many frames; slow down", retry, &s.refused.frames)
		return
	}
	switch {
	case typ != websocket.MessageText:
		s.answerError(&s.life, "", protocol.Errorf(protocol.CodeBadFrame, "frames must be text"))
		return
	case decodeErr != nil:
		s.answerError(&s.life, f.ID, protocol.AsError(decodeErr))
		return
	case f.Type == protocol.TypePing:
		// Browsers cannot see WebSocket pings; this lets a page notice a dead connection.
		s.replyInline(&s.life, protocol.ServerFrame{Type: protocol.TypePong, ID: f.ID})
		return
	}
	if f.WritesMessage() {
		if retry, ok := take(s.user.sends, nil); !ok {
			s.refuse(&s.life, f.ID, "too many sends; slow down", retry, &s.refused.sends)
			return
		}
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.refuse(&s.life, f.ID, "too many requests in flight", inFlightRetryAfter, &s.refused.inFlight)
		return
	}
	s.start(h, f)
}

// start runs f's handler on its own goroutine under the session's context, holding one in-flight
// slot, after the previous frame of its conversation (if any) has finished.
func (s *Session) start(h Handler, f protocol.ClientFrame) {
	ctx := s.Context()
	var prev <-chan struct{}
	var mine chan struct{}
	if f.ConversationID != "" {
		prev, mine = s.lanes.join(f.ConversationID)
	}
	s.handlers.Go(func() {
		defer func() { <-s.slots }()
		if mine != nil {
			defer s.lanes.leave(f.ConversationID, mine)
		}
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
			}
		}
		// A predecessor gives up only when ctx ends, so this check also keeps frames of one
		// conversation from ever running side by side.
		if ctx.Err() != nil {
			return
		}
		s.handle(ctx, h, f)
	})
}

// handle calls the handler and answers its error. A panic ends this session, not the process.
func (s *Session) handle(ctx context.Context, h Handler, f protocol.ClientFrame) {
	defer func() {
		if p := recover(); p != nil {
			s.logAt(zerolog.ErrorLevel).Interface("panic", p).Str("type", f.Type).Bytes("stack", debug.Stack()).Msg("handle frame panicked")
			s.Close(websocket.StatusInternalError, "internal error")
		}
	}()
	err := h.HandleFrame(ctx, s, f)
	if err == nil {
		return
	}
	pe := protocol.AsError(err)
	if pe.Code == protocol.CodeInternal {
		s.logAt(zerolog.ErrorLevel).Err(err).Str("type", f.Type).Msg("handle frame")
	}
	s.answerError(ctx, f.ID, pe)
}

// replyInline queues the reader's own answer. It waits for room like any reply: only this
// client's socket stalls, and only until this client reads.
func (s *Session) replyInline(ctx context.Context, f protocol.ServerFrame) {
	_ = s.Reply(ctx, f) // fails only when the session is ending
}

// answerError answers the client frame id with an error frame and counts it as refused.
func (s *Session) answerError(ctx context.Context, id string, pe *protocol.Error) {
	if s.Reply(ctx, protocol.ErrorFrame(id, pe)) == nil { // fails only when the session is ending
		s.cfg.Metrics.frameRefused(pe.Code)
	}
}

// refuse answers a frame refused by a limit with a retryable rate_limited error, counts it,
// and closes the connection once refusals themselves pass AbuseRate and AbuseBurst.
func (s *Session) refuse(ctx context.Context, id, msg string, retryAfter time.Duration, count *int64) {
	*count++
	s.refused.log(s)
	if s.abuse != nil && !s.abuse.Allow() {
		if s.closeWith(StatusPolicyAbuse, "too many refused frames") {
			s.cutLog(StatusPolicyAbuse).Int64("refusedFrames", s.refused.total()).Msg("too many refused frames; closing")
		}
		return
	}
	s.answerError(ctx, id, &protocol.Error{Code: protocol.CodeRateLimited,
		Message: msg, Retryable: true, RetryAfter: retryAfter})
}

// refusals counts one session's refused frames by cause for rate-limited logging.
type refusals struct {
	frames, sends, inFlight int64 // since the session opened
	logged                  int64 // total at the last log line
	lastLog                 time.Time
}

func (r *refusals) total() int64 { return r.frames + r.sends + r.inFlight }

// log writes a summary line at most once per refusalLogInterval; never the frames themselves.
func (r *refusals) log(s *Session) {
	if now := time.Now(); now.Sub(r.lastLog) >= refusalLogInterval {
		r.lastLog = now
		r.write(s)
	}
}

// flush writes the refusals not yet logged when the session ends.
func (r *refusals) flush(s *Session) {
	if r.total() > r.logged {
		r.write(s)
	}
}

func (r *refusals) write(s *Session) {
	total := r.total()
	s.logAt(zerolog.InfoLevel).Int64("refused", total-r.logged).Int64("refusedFrames", r.frames).
		Int64("refusedSends", r.sends).Int64("refusedInFlight", r.inFlight).Msg("refused frames")
	r.logged = total
}

// lanes orders the frames of each conversation: a frame waits for the one before it in its
// conversation. Only conversations with a frame in flight have an entry.
type lanes struct {
	mu    sync.Mutex
	tails map[string]chan struct{} // conversation id -> done channel of its newest frame
}

// join makes the caller the newest frame of conv; it returns the done channel of the frame it
// must wait for (nil if none) and its own, to be passed to leave.
func (l *lanes) join(conv string) (prev <-chan struct{}, mine chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine = make(chan struct{})
	if p := l.tails[conv]; p != nil {
		prev = p
	}
	if l.tails == nil {
		l.tails = make(map[string]chan struct{})
	}
	l.tails[conv] = mine
	return prev, mine
}

// leave marks a frame of conv finished, releasing the next one, and forgets the conversation
// when no later frame joined.
func (l *lanes) leave(conv string, mine chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tails[conv] == mine {
		delete(l.tails, conv)
		if len(l.tails) == 0 {
			l.tails = nil // maps do not shrink; let a burst's buckets go
		}
	}
	close(mine)
}
