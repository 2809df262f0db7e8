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

// TestShowMentions: a notification shows each mentioned member as @ and their display name, and
// leaves a token that mentions nobody as it was typed.
func TestShowMentions(t *testing.T) {
	names := map[string]string{"jose": "José Ruiz", "ana": "ana"}
	nameOf := func(id string) string { return names[id] }
	body := "hi @[jose], ask @[stranger] and @[ana]; @[jose] again"
	want := "hi @José Ruiz, ask @[stranger] and @ana; @José Ruiz again"
	if got := ShowMentions(body, []string{"jose", "ana"}, nameOf); got != want {
		t.Errorf("ShowMentions(%q) = %q, want %q", body, got, want)
	}
	if got := ShowMentions(body, nil, nameOf); got != body {
		t.Errorf("ShowMentions with nobody mentioned = %q, want the body as it is", got)
	}
}
