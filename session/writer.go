package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
)

// writeLoop is the session's writer on a goroutine of its own (startWriter); writeTurn is the
// same writer on a worker of Writers' pool. Either is the only writer of frames to the socket
// while it runs, started by the first frame queued to an idle session, and ends when the queue
// is empty, so an idle session has no writer; the outbox lets one run at a time.
func (s *Session) writeLoop() {
	finish := s.writeUntilIdle()
	s.cfg.Writers.directDone()
	if finish {
		s.finish()
	}
	s.writers.Done()
}

// writeTurn runs on a pool worker. Closing the socket waits for the peer's close frame, up to
// seconds, so the worker hands that to a goroutine of its own.
func (s *Session) writeTurn() {
	if !s.out.claimTurn() {
		return
	}
	if !s.writeUntilIdle() {
		s.writers.Done()
		return
	}
	go func() {
		s.finish()
		s.writers.Done()
	}()
}

// writeUntilIdle writes rounds until nothing waits, or until the session must finish (closing,
// or a write failed), which it reports. Each round it writes the must-deliver frames waiting
// when the round began, in FIFO order, then the ephemeral frames waiting, so a stream of pushes
// cannot starve typing and badges nor the other way round.
func (s *Session) writeUntilIdle() (finish bool) {
	for {
		switch r := s.out.nextRound(); r.next {
		case roundWrite:
			if err := s.writeRound(r.must, r.ephemeral); err != nil {
				s.logAt(zerolog.DebugLevel).Err(err).Msg("write")
				s.Close(websocket.StatusAbnormalClosure, "")
				return true
			}
		case roundFinish:
			return true
		case roundIdle:
			return false
		}
	}
}

// writeRound writes the must-deliver frames, then the ephemeral ones, that waited when the
// round began. It returns early when the session closes, leaving the rest to finish. Several
// frames are gathered and handed to the kernel in one write (gather.go); until then they still
// count as queued, so a client that does not read is measured as before.
func (s *Session) writeRound(must, ephemeral int) (err error) {
	gathering := must+ephemeral > 1
	if gathering {
		s.gather.hold()
		defer func() {
			s.watchdog.begin(s.conn, s.cfg.WriteTimeout)
			released := s.gather.release()
			s.watchdog.end()
			if err == nil && released != nil {
				err = fmt.Errorf("write frames: %w", released)
			}
		}()
	}
	for range must {
		if s.closing() {
			return nil
		}
		f, ok := s.out.takeMust()
		if !ok {
			break
		}
		err := s.writeWatched(f.data)
		if gathering {
			s.out.gathered(f)
		} else {
			s.out.written(f)
		}
		if err != nil {
			return err
		}
	}
	for range ephemeral {
		if s.closing() {
			return nil
		}
		data, ok := s.out.takeEphemeral()
		if !ok {
			break
		}
		if err := s.writeWatched(data); err != nil {
			return err
		}
	}
	return nil
}

// writeWatched writes one frame under the session's watchdog: the connection is closed under a
// write that the peer has not taken for WriteTimeout, and the write fails. A deadline context per
// frame would cost a timer, a context and coder/websocket's callback registration on it, five
// allocations a frame, which a fan-out to 5,000 sockets pays 5,000 times; with
// context.Background the library registers nothing, and the watchdog costs two stamps a frame.
func (s *Session) writeWatched(frame []byte) error {
	s.watchdog.begin(s.conn, s.cfg.WriteTimeout)
	err := s.conn.Write(context.Background(), websocket.MessageText, frame)
	s.watchdog.end()
	if err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	s.cfg.Metrics.frameWritten(len(frame))
	return nil
}

func (s *Session) closing() bool { return s.life.Err() != nil }

// finish flushes what is queued (bounded by WriteTimeout in all) unless the client was cut for
// not reading or the connection broke, then sends the close frame. Closing the connection is
// also what ends the reader's Read.
func (s *Session) finish() {
	defer s.out.discard()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	if s.closeCode == websocket.StatusAbnormalClosure {
		_ = s.conn.CloseNow() // the connection is already broken; nothing to say
		return
	}
	if s.closeCode != StatusSlowConsumer {
		s.flush(ctx)
	}
	if err := s.conn.Close(s.closeCode, s.closeMsg); err != nil {
		s.logAt(zerolog.DebugLevel).Err(err).Msg("close")
	}
}

// flush writes every waiting frame, must-deliver first, until the queue is empty or a write fails.
func (s *Session) flush(ctx context.Context) {
	for {
		if f, ok := s.out.takeMust(); ok {
			err := s.write(ctx, f.data)
			s.out.written(f)
			if err != nil {
				return
			}
			continue
		}
		data, ok := s.out.takeEphemeral()
		if !ok {
			return
		}
		if s.write(ctx, data) != nil {
			return
		}
	}
}

// write writes one frame within ctx and WriteTimeout (the closing flush's path).
func (s *Session) write(ctx context.Context, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	s.cfg.Metrics.frameWritten(len(frame))
	return nil
}

// keepalive pings the peer every PingInterval and closes the session when a pong does not come
// within PongTimeout. It is a timer, not a goroutine waiting: the timer's function pings on a
// goroutine of its own that lives only until the pong (the reader receives it), then arms the
// timer again. The ping runs under the session's context, so a session that closes while a
// ping is in flight ends at once instead of at PongTimeout. Pings are control frames, which
// coder/websocket writes between whole frames of the writer.
type keepalive struct {
	mu      sync.Mutex
	timer   *time.Timer    // nil until startPings
	stopped bool           // no ping may start; guarded by mu
	pinging sync.WaitGroup // the ping in flight, if any
}

// startPings arms the first ping.
func (s *Session) startPings() {
	k := &s.pings
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped {
		k.timer = time.AfterFunc(s.cfg.PingInterval, s.ping)
	}
}

// ping runs on the timer's goroutine: it waits for the pong, then arms the next ping.
func (s *Session) ping() {
	k := &s.pings
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.pinging.Add(1) // under mu, so never once stopPings has begun to wait
	k.mu.Unlock()
	defer k.pinging.Done()

	ctx, cancel := context.WithTimeout(&s.life, s.cfg.PongTimeout)
	err := s.conn.Ping(ctx)
	cancel()
	if err != nil {
		if s.life.Err() == nil && s.closeWith(websocket.StatusPolicyViolation, "ping timeout") {
			s.cutLog(websocket.StatusPolicyViolation).Err(err).Msg("ping timeout; closing")
		}
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped {
		k.timer.Reset(s.cfg.PingInterval)
	}
}

// stopPings ends the pings and waits for one in flight, which the session's end has cancelled.
func (s *Session) stopPings() {
	k := &s.pings
	k.mu.Lock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.mu.Unlock()
	k.pinging.Wait()
}
