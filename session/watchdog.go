package session

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// watchdog closes the connection under a write that the peer has not taken for WriteTimeout.
// Resetting and stopping a timer around every frame costs two operations on the runtime's timer
// heap per frame, which a fan-out to 5,000 sockets pays 5,000 times. Instead the writer stamps
// when each write began and when it ended; the timer, armed by the first write after it last
// went quiet, reads the stamp when it fires: it closes the connection under a write older than
// WriteTimeout, re-arms itself for the rest of a younger one, and goes quiet when none is in
// flight. A socket that receives steadily pays one timer operation per WriteTimeout, not two per
// frame.
type watchdog struct {
	timer *time.Timer // made by the first write; only the writer arms it from quiet
	// armed is set while the timer is pending; whoever sets it from false arms the timer, so a
	// write that begins while the timer decides to go quiet is still watched.
	armed atomic.Bool
	// began is when the write in flight began, in nanoseconds since clockStart (never 0); 0
	// when no write is in flight.
	began atomic.Int64
}

// clockStart anchors the watchdog's stamps on the monotonic clock.
var clockStart = time.Now()

func sinceClockStart() int64 { return int64(time.Since(clockStart)) + 1 }

// begin stamps the start of a write on conn, arming the timer if it is quiet: it closes conn
// under a write older than timeout. Every call must pass the same conn and timeout.
func (w *watchdog) begin(conn *websocket.Conn, timeout time.Duration) {
	w.began.Store(sinceClockStart())
	if w.armed.Load() || !w.armed.CompareAndSwap(false, true) {
		return
	}
	if w.timer == nil {
		// Made to fire never, then reset: the field is set before fire can read it.
		w.timer = time.AfterFunc(math.MaxInt64, func() { w.fire(conn, timeout) })
	}
	w.timer.Reset(timeout)
}

// end stamps the end of a write.
func (w *watchdog) end() { w.began.Store(0) }

// fire runs on the timer's goroutine.
func (w *watchdog) fire(conn *websocket.Conn, timeout time.Duration) {
	// Quiet first, then read the stamp: a write that begins after the read finds the timer
	// quiet and arms it itself.
	w.armed.Store(false)
	began := w.began.Load()
	if began == 0 {
		return
	}
	age := time.Duration(sinceClockStart() - began)
	if age >= timeout {
		_ = conn.CloseNow() // the write fails, and the writer ends the session
		return
	}
	if w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(timeout - age)
	}
}

// stop disarms the timer once the session's writes are over. A fire running at that moment may
// arm it once more; it then fires finding no write in flight and goes quiet.
func (w *watchdog) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
