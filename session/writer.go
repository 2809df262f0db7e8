package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// writeLoop is the only writer of frames to the socket. Each round it writes the must-deliver
// frames waiting when the round began, in FIFO order, then the ephemeral frames waiting, so a
// stream of pushes cannot starve typing and badges nor the other way round. It also pings, so
// a peer that stops answering is closed within PingInterval+PongTimeout.
func (s *Session) writeLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.PingInterval)
	defer ticker.Stop()
	// The ping waits for its pong on a goroutine of its own: the reader may be waiting for this
	// writer to make room for a reply, and only the reader can receive the pong.
	pingCtx, stopPings := context.WithCancel(ctx)
	var pings sync.WaitGroup
	defer pings.Wait()
	defer stopPings()
	pinged := make(chan error, 1)
	pinging := false

	for {
		select {
		case <-s.closed:
			s.finish(ctx)
			return
		default:
		}
		if err := s.writeRound(ctx); err != nil {
			s.log.Debug().Err(err).Msg("write")
			s.Close(websocket.StatusAbnormalClosure, "")
			s.finish(ctx)
			return
		}
		select {
		case <-s.wake:
		case <-ticker.C:
			if !pinging {
				pinging = true
				pings.Go(func() {
					pctx, cancel := context.WithTimeout(pingCtx, s.cfg.PongTimeout)
					defer cancel()
					pinged <- s.conn.Ping(pctx)
				})
			}
		case err := <-pinged:
			pinging = false
			if err != nil && s.closeWith(websocket.StatusPolicyViolation, "ping timeout") {
				s.cutLog(websocket.StatusPolicyViolation).Err(err).Msg("ping timeout; closing")
			}
		case <-s.closed:
		}
	}
}

// writeRound writes what waits when it starts: must-deliver frames, then ephemeral ones. It
// returns early when the session closes, leaving the rest to finish.
func (s *Session) writeRound(ctx context.Context) error {
	must, eph := s.out.waiting()
	for range must {
		if s.closing() {
			return nil
		}
		f, ok := s.out.takeMust()
		if !ok {
			break
		}
		err := s.write(ctx, f.data)
		s.out.written(f)
		if err != nil {
			return err
		}
	}
	for range eph {
		if s.closing() {
			return nil
		}
		data, ok := s.out.takeEphemeral()
		if !ok {
			break
		}
		if err := s.write(ctx, data); err != nil {
			return err
		}
	}
	return nil
}

func (s *Session) closing() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// finish flushes what is queued (bounded by WriteTimeout in all) unless the client was cut for
// not reading or the connection broke, then sends the close frame.
func (s *Session) finish(ctx context.Context) {
	defer s.out.discard()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if s.closeCode == websocket.StatusAbnormalClosure {
		_ = s.conn.CloseNow() // the connection is already broken; nothing to say
		return
	}
	if s.closeCode != StatusSlowConsumer {
		s.flush(ctx)
	}
	if err := s.conn.Close(s.closeCode, s.closeMsg); err != nil {
		s.log.Debug().Err(err).Msg("close")
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

func (s *Session) write(ctx context.Context, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	s.cfg.Metrics.frameWritten(len(frame))
	return nil
}
