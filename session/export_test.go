package session

import "time"

// SetWriterStall sets how long a pooled worker may spend on one session before another starts
// beside it, so that a test can keep the pool from growing.
func SetWriterStall(w *Writers, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stallTimeout = d
}
