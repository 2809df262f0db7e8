package node_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestDisplayNamesAcrossNodes: a name in any script signs in and greets its user; others read it
// with profiles and find the user by the start of any word of it; a rename reaches the user's
// other device and their DM peer on another node, and the next hello; a bad name is refused with
// the socket left open.
func TestDisplayNamesAcrossNodes(t *testing.T) {
	_, nodes := rtNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t, time.Minute)
	signIn := func(n *testenv.Node, name string) (token, id string) {
		t.Helper()
		token, id, err := client.Login(ctx, http.DefaultClient, n.URL(), name)
		if err != nil {
			t.Fatalf("sign in as %q: %v", name, err)
		}
		return token, id
	}
	greet := func(n *testenv.Node, token string) (*client.Conn, protocol.ServerFrame) {
		t.Helper()
		c, err := client.Dial(ctx, n.WSURL(), token, nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool { return f.Type == protocol.TypeHello })
	}
	joseToken, jose := signIn(a, "  José   Álvarez ")
	maryToken, mary := signIn(b, "Mary Jane")
	if mary != "mary-jane" || jose == "" || !auth.ValidUserID(jose) {
		t.Fatalf("ids: %q and %q; want mary-jane and a valid id for José", mary, jose)
	}
	joseConn, hello := greet(a, joseToken)
	if hello.UserID != jose || hello.Name != "José Álvarez" {
		t.Fatalf("José's hello: %+v; want his id and the name José Álvarez", hello)
	}
	maryConn, _ := greet(b, maryToken)
	maryIn := rtWatch(t, "mary (node B)", maryConn)
	phone, _ := greet(b, joseToken) // José's second device, on mary's node
	phoneIn := rtWatch(t, "josé's phone (node B)", phone)
	if _, err := maryConn.OpenDM(ctx, jose); err != nil {
		t.Fatalf("open dm: %v", err)
	}

	profiles := func(c *client.Conn, f protocol.ClientFrame) []protocol.Profile {
		t.Helper()
		r, err := c.Request(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", f.Type, err)
		}
		if r.Type != protocol.TypeProfiles || r.Users == nil {
			t.Fatalf("%s answered %+v; want a profiles frame with users", f.Type, r)
		}
		return *r.Users
	}
	got := profiles(maryConn, protocol.ClientFrame{Type: protocol.TypeProfiles, UserIDs: []string{jose, "nobody", "mary-jane"}})
	want := []protocol.Profile{{UserID: jose, Name: "José Álvarez"}, {UserID: "mary-jane", Name: "Mary Jane"}}
	if !slices.Equal(got, want) {
		t.Errorf("profiles: %+v; want %+v", got, want)
	}
	for query, want := range map[string][]protocol.Profile{
		"álv":  {{UserID: jose, Name: "José Álvarez"}},
		"JOSÉ": {{UserID: jose, Name: "José Álvarez"}},
		"mary": {}, // the asker is left out
		"zz":   {},
	} {
		if got := profiles(maryConn, protocol.ClientFrame{Type: protocol.TypeFindUsers, Query: query}); !slices.Equal(got, want) {
			t.Errorf("mary finds %q: %+v; want %+v", query, got, want)
		}
	}

	if _, err := joseConn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetName, Name: "Pepe"}); err != nil {
		t.Fatalf("set_name: %v", err)
	}
	renamed := func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeProfile && f.UserID == jose && f.Name == "Pepe"
	}
	chHas(t, maryIn, "José's new name", renamed)
	chHas(t, phoneIn, "his own new name on his phone", renamed)
	if got := profiles(maryConn, protocol.ClientFrame{Type: protocol.TypeFindUsers, Query: "pe"}); !slices.Equal(got, []protocol.Profile{{UserID: jose, Name: "Pepe"}}) {
		t.Errorf("mary finds \"pe\" after the rename: %+v", got)
	}
	if _, hello := greet(a, joseToken); hello.Name != "Pepe" {
		t.Errorf("hello after the rename says %q; want Pepe", hello.Name)
	}

	_, err := joseConn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetName, Name: "\u202eepeP"})
	wantCode(t, "set_name with a direction override", err, protocol.CodeInvalidField)
	if _, err := joseConn.Request(ctx, protocol.ClientFrame{Type: protocol.TypePing}); err != nil {
		t.Fatalf("the socket after a refused name: %v", err)
	}
}
