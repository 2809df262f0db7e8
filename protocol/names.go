package protocol

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDisplayNameRunes bounds a display name: enough for a full name in any script.
const MaxDisplayNameRunes = 64

// ErrBadName refuses a display name; its text is what /api/login and set_name answer, and what
// docs/PROTOCOL.md quotes.
var ErrBadName = errors.New("a name must be 1 to 64 characters (letters of any script, digits, spaces, _ - ' .), starting with a letter or digit")

// DisplayName checks a display name and returns it clean: surrounding white space trimmed and
// each run of white space inside one space ("  Mary   Jane " is "Mary Jane"). Letters and digits
// of every script are allowed ("José", "李雷"); control and format characters, which could hide or
// reorder text, are not.
func DisplayName(raw string) (string, error) {
	name := strings.Join(strings.Fields(raw), " ")
	if name == "" || utf8.RuneCountInString(name) > MaxDisplayNameRunes {
		return "", ErrBadName
	}
	for i, r := range name {
		letterOrDigit := unicode.IsLetter(r) || unicode.IsNumber(r)
		if i == 0 && !letterOrDigit {
			return "", ErrBadName
		}
		if !letterOrDigit && !unicode.IsMark(r) && !strings.ContainsRune(" _-'.", r) {
			return "", ErrBadName
		}
	}
	return name, nil
}
