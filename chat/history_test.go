package chat

import (
	"fmt"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestPageRange turns each kind of anchor into its seq range, in the middle and near both ends:
// a centred page stays full near an end; before and after pages are cut there.
func TestPageRange(t *testing.T) {
	cases := []struct {
		name     string
		at       Anchor
		limit    int
		last     int64
		from, to int64
	}{
		{"latest", Anchor{}, 10, 100, 91, 100},
		{"latest, short conversation", Anchor{}, 10, 4, 1, 4},
		{"latest, empty conversation", Anchor{}, 10, 0, 1, 0},
		{"latest, default size", Anchor{}, 0, 100, 51, 100},
		{"latest, negative size is the default", Anchor{}, -5, 100, 51, 100},
		{"before, middle", Anchor{Before: ptr[int64](50)}, 10, 100, 40, 49},
		{"before, near the start", Anchor{Before: ptr[int64](4)}, 10, 100, 1, 3},
		{"before the first", Anchor{Before: ptr[int64](1)}, 10, 100, 1, 0},
		{"before the end", Anchor{Before: ptr[int64](101)}, 10, 100, 91, 100},
		{"after, middle", Anchor{After: ptr[int64](50)}, 10, 100, 51, 60},
		{"after, near the end", Anchor{After: ptr[int64](97)}, 10, 100, 98, 100},
		{"after the last", Anchor{After: ptr[int64](100)}, 10, 100, 101, 100},
		{"after zero", Anchor{After: ptr[int64](0)}, 10, 100, 1, 10},
		{"around, middle", Anchor{Around: ptr[int64](50)}, 10, 100, 45, 54},
		{"around, odd size", Anchor{Around: ptr[int64](50)}, 5, 100, 48, 52},
		{"around the first", Anchor{Around: ptr[int64](1)}, 10, 100, 1, 10},
		{"around near the start", Anchor{Around: ptr[int64](3)}, 10, 100, 1, 10},
		{"around the last", Anchor{Around: ptr[int64](100)}, 10, 100, 91, 100},
		{"around past the end", Anchor{Around: ptr[int64](500)}, 10, 100, 91, 100},
		{"around, short conversation", Anchor{Around: ptr[int64](3)}, 10, 4, 1, 4},
		{"fraction 0", Anchor{Fraction: ptr(0.0)}, 10, 100, 1, 10},
		{"fraction 0.01", Anchor{Fraction: ptr(0.01)}, 10, 100, 1, 10},
		{"fraction 0.5", Anchor{Fraction: ptr(0.5)}, 10, 100, 45, 54},
		{"fraction 0.99", Anchor{Fraction: ptr(0.99)}, 10, 100, 91, 100},
		{"fraction 1", Anchor{Fraction: ptr(1.0)}, 10, 100, 91, 100},
		{"fraction of nothing", Anchor{Fraction: ptr(0.5)}, 10, 0, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, to := pageRange(tc.at, tc.limit, tc.last)
			if from != tc.from || to != tc.to {
				t.Errorf("pageRange(limit %d, last %d) = [%d, %d], want [%d, %d]", tc.limit, tc.last, from, to, tc.from, tc.to)
			}
			if to >= from && (from < 1 || to > tc.last) {
				t.Errorf("[%d, %d] is not within [1, %d]", from, to, tc.last)
			}
		})
	}
}

// TestHistoryPages reads pages of a stored conversation: each has the seqs its range says, in
// order, and flags whether there is more on either side.
func TestHistoryPages(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	dm := ts.dm("alice", "bob")
	for i := 1; i <= 25; i++ {
		ts.send("alice", dm, fmt.Sprint(i))
	}
	cases := []struct {
		name                string
		at                  Anchor
		first, last         int64 // of the page; 0 for an empty one
		hasBefore, hasAfter bool
	}{
		{"latest", Anchor{}, 16, 25, true, false},
		{"before 11", Anchor{Before: ptr[int64](11)}, 1, 10, false, true},
		{"before 5", Anchor{Before: ptr[int64](5)}, 1, 4, false, true},
		{"after 20", Anchor{After: ptr[int64](20)}, 21, 25, true, false},
		{"around 13", Anchor{Around: ptr[int64](13)}, 8, 17, true, true},
		{"fraction 0", Anchor{Fraction: ptr(0.0)}, 1, 10, false, true},
		{"after the end", Anchor{After: ptr[int64](25)}, 0, 0, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page, err := ts.svc.History(ts.ctx, "alice", dm, tc.at, 10)
			if err != nil {
				t.Fatal(err)
			}
			if page.FirstSeq != 1 || page.LastSeq != 25 {
				t.Errorf("ends [%d, %d], want [1, 25]", page.FirstSeq, page.LastSeq)
			}
			if page.HasBefore != tc.hasBefore || page.HasAfter != tc.hasAfter {
				t.Errorf("hasBefore %v hasAfter %v, want %v %v", page.HasBefore, page.HasAfter, tc.hasBefore, tc.hasAfter)
			}
			want := tc.first
			for _, m := range page.Messages {
				if m.Seq != want || m.Body != fmt.Sprint(m.Seq) {
					t.Fatalf("page holds seq %d (body %q) where %d belongs", m.Seq, m.Body, want)
				}
				want++
			}
			if tc.first > 0 && want-1 != tc.last || tc.first == 0 && len(page.Messages) > 0 {
				t.Errorf("page ends at %d, want %d", want-1, tc.last)
			}
		})
	}
}
