package hub

// windowSize is how many of a conversation's latest seqs a hub remembers delivering. A message
// republished after an owner failover is recent; one older than this is taken as delivered.
const windowSize = 1024

// seqWindow remembers which of the last windowSize seqs of a conversation were delivered, in
// 128 bytes, so a republished message reaches each socket once.
type seqWindow struct {
	high int64
	bits [windowSize / 64]uint64
}

// mark records seq and reports whether it was new.
func (w *seqWindow) mark(seq int64) bool {
	switch {
	case seq > w.high:
		if seq-w.high >= windowSize {
			w.bits = [windowSize / 64]uint64{}
		} else {
			for s := w.high + 1; s < seq; s++ {
				w.clear(s)
			}
		}
		w.high = seq
	case seq <= w.high-windowSize:
		return false
	case w.has(seq):
		return false
	}
	w.bits[(seq%windowSize)/64] |= 1 << (seq % 64)
	return true
}

func (w *seqWindow) has(seq int64) bool { return w.bits[(seq%windowSize)/64]&(1<<(seq%64)) != 0 }
func (w *seqWindow) clear(seq int64)    { w.bits[(seq%windowSize)/64] &^= 1 << (seq % 64) }
