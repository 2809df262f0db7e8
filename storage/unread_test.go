package storage_test

import (
	"testing"

	"github.com/chatd/chatd/storage"
)

func TestUnreadLeavesOutDeletedAfterTheReadPosition(t *testing.T) {
	for _, tc := range []struct {
		name             string
		lastSeq, readSeq int64
		deleted          []int64
		want             int64
	}{
		{"nothing deleted", 5, 2, nil, 3},
		{"empty set", 5, 2, []int64{}, 3},
		{"deleted after the read position", 5, 2, []int64{4}, 2},
		{"deleted at the read position", 5, 2, []int64{2}, 3},
		{"deleted before the read position", 5, 2, []int64{1}, 3},
		{"before and after, in any order", 5, 2, []int64{4, 1}, 2},
		{"the last message", 5, 2, []int64{5}, 2},
		{"not delivered here yet", 5, 2, []int64{6, 9}, 3},
		{"everything unread deleted", 5, 2, []int64{3, 4, 5}, 0},
		{"everything read", 5, 5, []int64{3}, 0},
		{"read past the last seq", 5, 7, []int64{6}, 0},
		{"never read", 3, 0, []int64{1, 3}, 1},
		{"empty conversation", 0, 0, nil, 0},
	} {
		if got := storage.Unread(tc.lastSeq, tc.readSeq, tc.deleted); got != tc.want {
			t.Errorf("%s: storage.Unread(%d, %d, %v) = %d; want %d", tc.name, tc.lastSeq, tc.readSeq, tc.deleted, got, tc.want)
		}
	}
}
