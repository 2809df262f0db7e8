package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestAuditCommand: a store written by a chat server (a DM and a group, with replies, edits,
// reactions, deletions, reads, members added and leaving, a hidden conversation and a deleted
// account) audits clean with exit 0 while the server runs; a message removed
// behind the server's back is printed as a gap of its conversation, and the exit status is 3, in
// text and in JSON.
func TestAuditCommand(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob, carol := newUser(t, n.URL()), newUser(t, n.URL()), newUser(t, n.URL())
	alice.must("login", "alice")
	bob.must("login", "bob")
	carol.must("login", "carol")
	dm := alice.must("dm", "bob")
	alice.must("send", dm, "lunch?")
	bob.must("send", "-reply", "1", dm, "yes")
	alice.must("edit", dm, "1", "lunch at noon?")
	bob.must("react", dm, "1", "👍")
	bob.must("delete", dm, "2")
	group := alice.must("group", "team", "bob", "carol")
	sent := 2
	for i, u := range []*user{alice, bob, carol, bob, alice} {
		u.must("send", group, "message "+strconv.Itoa(i))
		sent++
	}
	bob.must("delete", group, "2")
	carol.must("tail", "-n", "3", "-count", "3", group)
	// Reads, a member added who sends, reads and hides the group, a member who leaves, and an
	// account deleted (its messages become tombstones): what the server does besides sends.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	request := func(conn *client.Conn, f protocol.ClientFrame) {
		t.Helper()
		if _, err := conn.Request(ctx, f); err != nil {
			t.Fatalf("%s: %v", f.Type, err)
		}
	}
	aliceConn := testenv.Connect(t, n.URL(), "alice")
	danConn, danToken := testenv.ConnectWithToken(t, n.URL(), "dan")
	_, bobToken := testenv.ConnectWithToken(t, n.URL(), "bob")
	request(aliceConn, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: group, Members: []string{"dan"}})
	danMsg := uuid.NewString()
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error { // the owner learns of dan
		_, err := danConn.SendWithID(ctx, group, danMsg, "hi, I am new")
		return err
	})
	sent++
	api(t, ctx, n.URL(), bobToken, http.MethodPost, "/api/read", `{"conversationId": "`+group+`", "seq": 4}`)
	api(t, ctx, n.URL(), danToken, http.MethodPost, "/api/read", `{"conversationId": "`+group+`", "seq": 2}`)
	request(danConn, protocol.ClientFrame{Type: protocol.TypeHideConversation, ConversationID: group})
	request(testenv.Connect(t, n.URL(), "carol"), protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: group})
	alice.must("send", group, "bye carol")
	sent++
	api(t, ctx, n.URL(), danToken, http.MethodDelete, "/api/account", "")
	alice.must("send", group, "after dan")
	sent++
	audit := func(args ...string) (string, string, int) {
		var stdout, stderr strings.Builder
		args = append([]string{"audit", "-mongo-uri", env.MongoURI, "-mongo-db", env.Database, "-page", "2"}, args...)
		code := run(ctx, args, cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }})
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := audit("-recheck", "0")
	if code != exitOK {
		t.Fatalf("audit of the store the server wrote: exit %d\n%s%s", code, out, errOut)
	}
	summary := regexp.MustCompile(`^2 conversations, (\d+) messages checked, 0 differences \(\S+\)\n$`).FindStringSubmatch(out)
	if summary == nil {
		t.Fatalf("clean audit printed %q", out)
	}
	if checked, _ := strconv.Atoi(summary[1]); checked < sent {
		t.Fatalf("audit checked %d messages; %d were sent", checked, sent)
	}

	db := testenv.Database(t, storage.Config{URI: env.MongoURI, Database: env.Database})
	// Seq 3 taken out of the store: the group's messages fill less than a bucket, so they are in
	// their seq claims.
	if _, err := db.Collection("messageClaims").DeleteOne(ctx, bson.D{{Key: "_id", Value: group + "/000000000003"}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = audit("-recheck", "10ms")
	if code != exitDifferences {
		t.Fatalf("audit after a message was removed: exit %d, want %d\n%s%s", code, exitDifferences, out, errOut)
	}
	if !strings.Contains(out, group+" gap: seq 3 is not stored (lastSeq ") || !strings.Contains(errOut, "differences found") {
		t.Fatalf("audit after a message was removed printed\n%s%s", out, errOut)
	}
	if !regexp.MustCompile(`(?m)^2 conversations, \d+ messages checked, [1-9]\d* differences`).MatchString(out) {
		t.Fatalf("no summary with the differences:\n%s", out)
	}

	out, _, code = audit("-json", "-recheck", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var gap storage.AuditDifference
	for _, line := range lines[:len(lines)-1] {
		var d storage.AuditDifference
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		if d.Check == storage.AuditGap {
			gap = d
		}
	}
	var last struct {
		storage.AuditReport
		Seconds *float64 `json:"seconds"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("summary %q: %v", lines[len(lines)-1], err)
	}
	if code != exitDifferences || gap.ConversationID != group || gap.Seq != 3 || last.Conversations != 2 ||
		last.Differences != int64(len(lines)-1) || last.Seconds == nil {
		t.Fatalf("-json: exit %d, gap %+v, summary %+v\n%s", code, gap, last, out)
	}
}

// api calls the server's HTTP API as the holder of token and fails the test unless it succeeds.
func api(t *testing.T, ctx context.Context, server, token, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, server+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}
