package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/chatd/chatd/protocol"
)

func runTail(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("tail")
	n := fs.Int64("n", 0, "first print the last N messages")
	after := fs.Int64("after", 0, "first print every message after this seq")
	count := fs.Int("count", 0, "exit after printing this many messages; 0 follows until interrupted")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	t := &tailer{c: c, convID: pos[0], count: *count, start: func(lastSeq int64) int64 { return max(0, lastSeq-*n) }}
	anchors := 0
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "after":
			t.start = func(int64) int64 { return *after }
			anchors++
		case "n":
			anchors++
		}
	})
	if anchors > 1 {
		return usagef("give -n or -after, not both")
	}
	return t.run(ctx)
}

// errStopTail ends a tail that has printed the -count messages asked for.
var errStopTail = errors.New("tail: printed the messages asked for")

// tailer prints one conversation's messages in seq order, each once, across reconnects: on a new
// connection it asks sync for what it missed, and any gap it still sees it pages from history.
type tailer struct {
	c      *cli
	convID string
	// start picks the seq after which printing begins, given the conversation's last seq.
	start   func(lastSeq int64) int64
	count   int // stop after this many; 0 means never
	printed int
	last    int64 // the highest seq printed (or skipped at the start)
	// reported is the highest seq told to the server as delivered: a tail is a device, and the
	// sender's ✓✓ says a message reached one.
	reported int64
}

// run follows until interrupted, until count messages are printed, or until a failure no reconnect
// can mend. The first connection must succeed, so a wrong address fails at once.
func (t *tailer) run(ctx context.Context) error {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for first := true; ; first = false {
		s, err := t.c.connect(ctx)
		if err == nil {
			backoff = minBackoff
			err = t.follow(ctx, s, first)
			s.close()
		} else if first {
			return err
		}
		switch {
		case errors.Is(err, errStopTail), ctx.Err() != nil:
			return nil
		case !retryable(err):
			return err
		}
		fmt.Fprintf(t.c.stderr, "chatctl tail: %v; reconnecting in %s\n", err, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// follow catches up on one connection and then prints pushes (messages, and changes of the
// messages printed) until the connection ends.
func (t *tailer) follow(ctx context.Context, s *session, first bool) error {
	// Shown on screen: a large group's reactions come to sockets that focus it.
	if _, err := t.request(ctx, s, protocol.ClientFrame{Type: protocol.TypeFocus, ConversationID: t.convID}); err != nil {
		return err
	}
	var target int64
	if first {
		page, err := t.request(ctx, s, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: t.convID, Limit: 1})
		if err != nil {
			return err
		}
		target = page.LastSeq
		t.last = t.start(target)
	} else {
		// Sync pushes the missed messages (up to the server's limit) before its reply, so they
		// are already queued when the reply arrives; what lies beyond the limit is paged below.
		r, err := t.request(ctx, s, protocol.ClientFrame{Type: protocol.TypeSync, Since: map[string]int64{t.convID: t.last}})
		if err != nil {
			return err
		}
		found := false
		for _, conv := range r.Conversations {
			if conv.ID == t.convID {
				target, found = conv.LastSeq, true
			}
		}
		if !found {
			return &protocol.Error{Code: protocol.CodeNotMember, Message: "you are no longer in this conversation"}
		}
		if err := t.pump(ctx, s, false); err != nil {
			return err
		}
	}
	if err := t.afterPrinting(ctx, s, t.catchUp(ctx, s, target)); err != nil {
		return err
	}
	return t.pump(ctx, s, true)
}

// pump handles pushes until the connection ends; with wait false it stops as soon as none is
// queued, having handled only what was already received.
func (t *tailer) pump(ctx context.Context, s *session, wait bool) error {
	for {
		var f protocol.ServerFrame
		var ok bool
		if wait {
			select {
			case f, ok = <-s.conn.Pushes():
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			select {
			case f, ok = <-s.conn.Pushes():
			default:
				return nil
			}
		}
		if !ok {
			return fmt.Errorf("connection lost: %w", s.conn.Err())
		}
		if err := t.afterPrinting(ctx, s, t.handle(ctx, s, f)); err != nil {
			return err
		}
	}
}

// afterPrinting reports what was printed as delivered after a step that printed (even the one that
// reached -count), and returns the step's error, or the report's.
func (t *tailer) afterPrinting(ctx context.Context, s *session, stepErr error) error {
	if err := t.reportDelivered(ctx, s); err != nil && stepErr == nil {
		return err
	}
	if errors.Is(stepErr, errStopTail) {
		// The tail exits now: wait until the report is handled, or the connection's close could
		// overtake it. A request about the same conversation is answered after it.
		if _, err := t.request(ctx, s, protocol.ClientFrame{Type: protocol.TypeFocus, ConversationID: t.convID}); err != nil {
			return err
		}
	}
	return stepErr
}

// reportDelivered tells the server how far this tail has received, when that moved.
func (t *tailer) reportDelivered(ctx context.Context, s *session) error {
	if t.last <= t.reported {
		return nil
	}
	ctx, cancel := t.c.requestContext(ctx)
	defer cancel()
	if err := s.conn.Post(ctx, protocol.ClientFrame{Type: protocol.TypeDelivered, ConversationID: t.convID, Seq: t.last}); err != nil {
		return err
	}
	t.reported = t.last
	return nil
}

// handle prints a pushed message of the conversation, first filling any gap before it.
func (t *tailer) handle(ctx context.Context, s *session, f protocol.ServerFrame) error {
	if f.ConversationID != t.convID {
		return nil
	}
	switch f.Type {
	case protocol.TypeRemoved:
		return &protocol.Error{Code: protocol.CodeNotMember, Message: "you were removed from this conversation"}
	case protocol.TypeEdited, protocol.TypeDeleted, protocol.TypeReaction:
		if f.Seq <= t.last { // a change of a message printed; one not printed yet shows as it is
			t.c.learnNames(ctx, s.conn, f.UserID)
			t.c.printChange(f)
		}
		return nil
	case protocol.TypeMessage:
	default:
		return nil
	}
	if f.Seq <= t.last {
		return nil // already printed, from history or from sync
	}
	if err := t.catchUp(ctx, s, f.Seq-1); err != nil {
		return err
	}
	if f.Seq <= t.last {
		return nil
	}
	m := messageOf(f)
	t.c.learnNames(ctx, s.conn, people(m)...)
	return t.print(m)
}

// catchUp pages history forward until everything up to target is printed.
func (t *tailer) catchUp(ctx context.Context, s *session, target int64) error {
	for t.last < target {
		after := t.last
		page, err := t.request(ctx, s, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: t.convID,
			After: &after, Limit: protocol.MaxPageSize})
		if err != nil {
			return err
		}
		if len(page.Messages) == 0 {
			return nil // nothing stored past t.last yet; a later push fills in
		}
		t.c.learnNames(ctx, s.conn, people(page.Messages...)...)
		for _, m := range page.Messages {
			if m.Seq > t.last {
				if err := t.print(m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (t *tailer) print(m protocol.Message) error {
	t.c.printMessage(m)
	t.last = m.Seq
	t.printed++
	if t.count > 0 && t.printed >= t.count {
		return errStopTail
	}
	return nil
}

func (t *tailer) request(ctx context.Context, s *session, f protocol.ClientFrame) (protocol.ServerFrame, error) {
	ctx, cancel := t.c.requestContext(ctx)
	defer cancel()
	return s.conn.Request(ctx, f)
}
