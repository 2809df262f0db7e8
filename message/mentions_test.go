package message

import (
	"slices"
	"strings"
	"testing"
)

func TestMentions(t *testing.T) {
	members := map[string]bool{"jose": true, "u-d994e1d001886fe5": true, "ana": true}
	isMember := func(id string) bool { return members[id] }
	for _, tc := range []struct {
		body string
		want []string
	}{
		{"hi @[jose], see @[u-d994e1d001886fe5] and @[jose] again", []string{"jose", "u-d994e1d001886fe5"}},
		{"write to jose@example.com or @jose", nil},
		{"@[stranger] is not here, @[ana] is", []string{"ana"}},
		{"@[Jose] @[ jose] @[]", nil},
	} {
		if got := Mentions(tc.body, isMember); !slices.Equal(got, tc.want) {
			t.Errorf("Mentions(%q) = %v, want %v", tc.body, got, tc.want)
		}
	}
	many := make(map[string]bool)
	var body strings.Builder
	for i := range MaxMentions + 5 {
		id := "u" + strings.Repeat("x", i+1)
		many[id] = true
		body.WriteString(MentionToken(id) + " ")
	}
	if got := Mentions(body.String(), func(id string) bool { return many[id] }); len(got) != MaxMentions {
		t.Errorf("a body naming %d members mentions %d; want %d", MaxMentions+5, len(got), MaxMentions)
	}
}
