package hub

import "iter"

// connSet is a conversation's local connections in the order they joined it. A delivery walks
// them in that order, which is the order their sockets and sessions were made in, so the
// walk goes through memory (the node's and the kernel's) mostly in address order; walking the
// same sockets in a shuffled order, as walking a map does, costs measurably more CPU per delivery
// (docs/BENCHMARKS.md, "Fan-out of one message to 5,000 sockets"). A removal leaves a hole, so the order of the rest holds; the holes are squeezed
// out once they are half the list, which keeps add and remove O(1) amortized.
type connSet[C Conn] struct {
	list  []*connState[C] // in join order, nil where one has left
	index map[*connState[C]]int
}

func newConnSet[C Conn]() *connSet[C] {
	return &connSet[C]{index: make(map[*connState[C]]int)}
}

// add appends cs unless it is already in the set.
func (s *connSet[C]) add(cs *connState[C]) {
	if _, ok := s.index[cs]; ok {
		return
	}
	s.index[cs] = len(s.list)
	s.list = append(s.list, cs)
}

// remove takes cs out of the set, if it is in it.
func (s *connSet[C]) remove(cs *connState[C]) {
	i, ok := s.index[cs]
	if !ok {
		return
	}
	delete(s.index, cs)
	s.list[i] = nil
	if 2*len(s.index) < len(s.list) {
		s.compact()
	}
}

// compact squeezes the holes out of the list, keeping the order.
func (s *connSet[C]) compact() {
	kept := s.list[:0]
	for _, cs := range s.list {
		if cs != nil {
			s.index[cs] = len(kept)
			kept = append(kept, cs)
		}
	}
	clear(s.list[len(kept):])
	s.list = kept
}

func (s *connSet[C]) len() int { return len(s.index) }

// all yields the connections in join order.
func (s *connSet[C]) all() iter.Seq[*connState[C]] {
	return func(yield func(*connState[C]) bool) {
		for _, cs := range s.list {
			if cs != nil && !yield(cs) {
				return
			}
		}
	}
}
