package server

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/protocol"
)

// TestProtocolDocumentsTheSignInRule: docs/PROTOCOL.md quotes the sign-in refusal as /api/login
// sends it, and every example it gives of the name-to-id rule is what auth.UserIDFromName does.
// (Before, the page documented a rule that refused spaces while the code turned "ali ce" into
// ali-ce.)
func TestProtocolDocumentsTheSignInRule(t *testing.T) {
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if want := `{"error": "` + protocol.ErrBadName.Error() + `"}`; !strings.Contains(doc, want) {
		t.Fatalf("PROTOCOL.md does not quote the sign-in refusal %s", want)
	}
	// The examples: `"Ali  Ce"` → `ali-ce` are accepted names, ("élodie", ...) refused ones.
	examples := regexp.MustCompile("`\"([^\"`]+)\"` → `([a-z0-9_-]+)`").FindAllStringSubmatch(doc, -1)
	if len(examples) < 2 {
		t.Fatalf("PROTOCOL.md gives %d examples of the name rule; want at least 2", len(examples))
	}
	for _, ex := range examples {
		if got, _, err := auth.UserIDFromName(ex[1]); err != nil || got != ex[2] {
			t.Errorf("PROTOCOL.md says %q → %s; the code says %q, %v", ex[1], ex[2], got, err)
		}
	}
	refused := regexp.MustCompile("break the rule get the `400` above \\(([^)]*)\\)").FindStringSubmatch(doc)
	if refused == nil {
		t.Fatal("PROTOCOL.md lists no refused names")
	}
	for _, q := range regexp.MustCompile("`\"([^\"`]+)\"`").FindAllStringSubmatch(refused[1], -1) {
		if got, _, err := auth.UserIDFromName(q[1]); err == nil {
			t.Errorf("PROTOCOL.md says %q is refused; the code makes it %q", q[1], got)
		}
	}
	// The login example: "Ali Ce" signs in as ali-ce with the display name as typed.
	if !strings.Contains(doc, `{"name": "Ali Ce"}`) || !strings.Contains(doc, `"userId": "ali-ce", "name": "Ali Ce"`) {
		t.Error("PROTOCOL.md's sign-in example is not the Ali Ce one the rule describes")
	}
	if id, _, err := auth.UserIDFromName("Ali Ce"); err != nil || id != "ali-ce" {
		t.Errorf(`UserIDFromName("Ali Ce") = %q, %v`, id, err)
	}
}
