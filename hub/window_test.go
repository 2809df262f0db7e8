package hub

import "testing"

func TestSeqWindowDeliversEachSeqOnce(t *testing.T) {
	var w seqWindow
	for _, step := range []struct {
		seq int64
		new bool
	}{
		{1, true}, {2, true}, {2, false}, {5, true}, {3, true}, {3, false}, {4, true}, {1, false},
		{5000, true}, {4000, true}, {4000, false}, {3976, false}, {4999, true}, {6025, true}, {5000, false},
	} {
		if got := w.mark(step.seq); got != step.new {
			t.Fatalf("mark(%d) = %v, want %v", step.seq, got, step.new)
		}
	}
}
