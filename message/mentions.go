package message

import (
	"regexp"
	"slices"
)

// A mention is the token @[userId] in a message's body: the user id in square brackets, so it
// cannot be confused with an e-mail address or an "@" in text, and a rename changes no stored
// message (clients show the user's current display name in its place). A token naming someone
// who is not a member of the conversation is left as text and mentions nobody.
var mentionToken = regexp.MustCompile(`@\[([a-z0-9][a-z0-9_-]{0,63})\]`)

// MaxMentions bounds the users one message mentions: a token past it is text. Enough to call a
// team by name; a message to everyone is what a group is for.
const MaxMentions = 50

// Mentions returns the users body mentions who are members (isMember), each once, in the order
// of their first mention; nil when there is none. The conversation's owner calls it when it
// stores or edits a message, so every client agrees on whom a message mentions.
func Mentions(body string, isMember func(userID string) bool) []string {
	var out []string
	for _, m := range mentionToken.FindAllStringSubmatch(body, -1) {
		id := m[1]
		if len(out) < MaxMentions && isMember(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// ShowMentions returns body as a reader with no client of ours sees it (a notification's text):
// each token of a member it mentions (mentioned, as Mentions found them) is @ and their display
// name (nameOf); any other token stays text, as everywhere.
func ShowMentions(body string, mentioned []string, nameOf func(userID string) string) string {
	if len(mentioned) == 0 {
		return body
	}
	return mentionToken.ReplaceAllStringFunc(body, func(token string) string {
		id := token[2 : len(token)-1]
		if !slices.Contains(mentioned, id) {
			return token
		}
		return "@" + nameOf(id)
	})
}

// MentionToken is the token that mentions userID in a body.
func MentionToken(userID string) string { return "@[" + userID + "]" }
