package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a goroutine outlives the tests: a command's connection and its
// reader end when the command returns.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// user runs chatctl as one person: their own config directory, so each keeps their own token.
type user struct {
	t      *testing.T
	server string
	config string
}

func newUser(t *testing.T, server string) *user {
	return &user{t: t, server: server, config: t.TempDir()}
}

func (u *user) getenv(key string) string {
	switch key {
	case "XDG_CONFIG_HOME":
		return u.config
	case "CHAT_SERVER":
		return u.server
	}
	return ""
}

// run runs one command line in-process and returns its stdout, stderr and exit status.
func (u *user) run(ctx context.Context, stdin string, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := run(ctx, args, cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: u.getenv})
	return out.String(), errOut.String(), code
}

// must runs a command that has to succeed and returns its trimmed stdout.
func (u *user) must(args ...string) string {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errOut, code := u.run(ctx, "", args...)
	if code != exitOK {
		u.t.Fatalf("chatctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return strings.TrimSpace(out)
}

func TestLoginDMSendHistoryList(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob := newUser(t, n.URL()), newUser(t, n.URL())

	token := alice.must("login", "alice")
	saved, err := os.ReadFile(filepath.Join(alice.config, "chatctl", "token"))
	if err != nil || strings.TrimSpace(string(saved)) != token || token == "" {
		t.Fatalf("saved token %q (%v), printed %q", saved, err, token)
	}
	bob.must("login", "bob")

	dm := alice.must("dm", "bob")
	if again := bob.must("dm", "alice"); again != dm {
		t.Fatalf("bob's DM with alice is %q, alice's is %q", again, dm)
	}
	if seq := alice.must("send", dm, "hello", "bob"); seq != "1" {
		t.Fatalf("first send acked seq %q, want 1", seq)
	}
	if seq := alice.must("send", "-retries", "0", dm, "--", "-again"); seq != "2" {
		t.Fatalf("second send acked seq %q, want 2", seq)
	}

	plain := bob.must("history", dm)
	if !strings.Contains(plain, "#1 ") || !strings.Contains(plain, "alice: hello bob") || !strings.Contains(plain, "alice: -again") {
		t.Fatalf("history does not show both messages:\n%s", plain)
	}
	var page struct {
		LastSeq  int64              `json:"lastSeq"`
		Messages []protocol.Message `json:"messages"`
	}
	decode(t, bob.must("history", dm, "-json", "-after", "1"), &page)
	if page.LastSeq != 2 || len(page.Messages) != 1 || page.Messages[0].Seq != 2 || page.Messages[0].Body != "-again" {
		t.Fatalf("history -after 1 = %+v", page)
	}

	var convs []protocol.Conversation
	decode(t, bob.must("-json", "list"), &convs)
	if len(convs) != 1 || convs[0].ID != dm || convs[0].LastSeq != 2 || convs[0].Unread != 2 {
		t.Fatalf("bob's list = %+v; want the DM with lastSeq 2 and 2 unread", convs)
	}
	if table := alice.must("list"); !strings.Contains(table, dm) || !strings.Contains(table, "bob") {
		t.Fatalf("alice's list does not name the DM with bob:\n%s", table)
	}

	group := alice.must("group", "friends", "bob")
	if seq := bob.must("send", group, "hi all"); seq != "1" {
		t.Fatalf("first group send acked seq %q, want 1", seq)
	}
}

// TestEditReactReplyDelete: a reply with -reply shows the quote, an edit and a reaction show in
// history, reactions lists who reacted, a deleted message shows as deleted (and so does the
// reply's quote of it), and editing someone else's message fails with status 1.
func TestEditReactReplyDelete(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob := newUser(t, n.URL()), newUser(t, n.URL())
	alice.must("login", "alice")
	bob.must("login", "bob")
	dm := alice.must("dm", "bob")
	alice.must("send", dm, "lunch?")
	if seq := bob.must("send", "-reply", "1", dm, "yes"); seq != "2" {
		t.Fatalf("the reply acked seq %q, want 2", seq)
	}
	alice.must("edit", dm, "1", "lunch at noon?")
	bob.must("react", dm, "1", "👍")
	alice.must("react", dm, "1", "👍")
	alice.must("react", "-remove", dm, "1", "👍")

	history := bob.must("history", dm)
	for _, want := range []string{"alice: lunch at noon? (edited) [👍 1]", "> #1 alice: lunch?", "bob: yes"} {
		if !strings.Contains(history, want) {
			t.Errorf("history lacks %q:\n%s", want, history)
		}
	}
	if got := alice.must("reactions", dm, "1"); got != "👍 1 bob" {
		t.Errorf("reactions of message 1: %q; want %q", got, "👍 1 bob")
	}
	alice.must("delete", dm, "1")
	history = bob.must("history", dm)
	if !strings.Contains(history, "alice: (deleted)") || !strings.Contains(history, "> #1 alice: (deleted)") {
		t.Errorf("after the delete, history shows:\n%s\nwant the message and the reply's quote as deleted", history)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, errOut, code := alice.run(ctx, "", "edit", dm, "2", "not mine"); code != exitFailure || !strings.Contains(errOut, "forbidden") {
		t.Errorf("editing bob's message: exit %d, stderr %q; want 1 and forbidden", code, errOut)
	}
	// Bob's tail is a device: what it printed is delivered, which alice's receipts count.
	if seq := alice.must("send", dm, "still there?"); seq != "3" {
		t.Fatalf("alice's send acked seq %q, want 3", seq)
	}
	bob.must("tail", "-n", "1", "-count", "1", dm)
	conn := testenv.Connect(t, n.URL(), "alice")
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		r, err := conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeReceipts, ConversationID: dm, Seq: 3})
		if err != nil {
			return err
		}
		if r.DeliveredTo == nil || *r.DeliveredTo != 1 {
			return fmt.Errorf("message 3 is delivered to %+v members; want 1 after bob's tail printed it", r.DeliveredTo)
		}
		return nil
	})
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	// Each command above connected and went away: bob was last seen, and alice asks while online.
	// Presence is recorded just after a connection comes or goes: poll.
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := alice.must("presence", "bob", "alice"); !strings.Contains(got, "bob last seen ") || !strings.Contains(got, "alice online") {
			return fmt.Errorf("presence of bob and alice: %q; want bob last seen and alice (asking) online", got)
		}
		return nil
	})
}

// TestQuotePrintedWithItsReply: a reply's quote is printed right under the reply's own line, in
// history and in tail (from history and live), so it is not read as belonging to the message
// before the reply; the next message's line comes after the quote.
func TestQuotePrintedWithItsReply(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob := newUser(t, n.URL()), newUser(t, n.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice.must("login", "alice")
	bob.must("login", "bob")
	dm := alice.must("dm", "bob")
	alice.must("send", dm, "hello bob")
	alice.must("send", dm, "second")

	// Bob's tail prints #1 and #2 from history, then the reply and the message after it live.
	tail := bob.startTail(ctx, "-after", "0", "-count", "4", dm)
	var tailed []string
	for len(tailed) < 2 {
		tailed = append(tailed, tail.next())
	}
	bob.must("send", "-reply", "1", dm, "hi")
	alice.must("send", dm, "fourth")
	for len(tailed) < 5 { // four messages and the reply's quote
		tailed = append(tailed, tail.next())
	}
	tail.wait()
	history := strings.Split(bob.must("history", dm), "\n")

	for what, lines := range map[string][]string{"history": history, "tail": tailed} {
		want := []struct{ prefix, suffix string }{
			{"#1 ", " alice: hello bob"},
			{"#2 ", " alice: second"},
			{"#3 ", " bob: hi"},
			{"  > #1 alice: hello bob", ""},
			{"#4 ", " alice: fourth"},
		}
		ok := len(lines) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = strings.HasPrefix(lines[i], want[i].prefix) && strings.HasSuffix(lines[i], want[i].suffix)
		}
		if !ok {
			t.Errorf("%s printed:\n%s\nwant #1, #2, #3 (bob: hi), its quote \"  > #1 alice: hello bob\", then #4",
				what, strings.Join(lines, "\n"))
		}
	}
}

// TestDisplayNames: people show by display name, with the id after it when the two differ, in
// history, tail (messages, quotes, edits), list and reactions; JSON keeps ids only. A rename with
// name changes what the other user's history shows, and find finds people by a word's start.
func TestDisplayNames(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	mary, jose := newUser(t, n.URL()), newUser(t, n.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, errOut, code := mary.run(ctx, "", "login", "Mary Jane"); code != exitOK || !strings.Contains(errOut, "signed in as Mary Jane (mary-jane);") {
		t.Fatalf("login Mary Jane: exit %d, stderr %q; want it to name Mary Jane (mary-jane)", code, errOut)
	}
	var signedIn struct{ UserID, Name string }
	decode(t, jose.must("-json", "login", "José"), &signedIn)
	joseID := signedIn.UserID
	if signedIn.Name != "José" || !strings.HasPrefix(joseID, "u-") {
		t.Fatalf("login José: %+v; want the name José and a u- id", signedIn)
	}
	joseShown, maryShown := "José ("+joseID+")", "Mary Jane (mary-jane)"

	dm := mary.must("dm", joseID)
	mary.must("send", dm, "hola")
	jose.must("send", dm, "hi Mary")
	tail := jose.startTail(ctx, "-after", "1", "-count", "2", dm)
	if line := tail.next(); !strings.HasSuffix(line, " "+joseShown+": hi Mary") {
		t.Fatalf("tail's first line %q; want #2 by %s", line, joseShown)
	}
	mary.must("edit", dm, "1", "hola!")          // a change of a message printed, by a sender not printed yet
	mary.must("send", "-reply", "2", dm, "live") // a quote, and a live message
	wantTail := []string{"#1 edited by " + maryShown + ": hola!", " " + maryShown + ": live", "  > #2 " + joseShown + ": hi Mary"}
	for _, want := range wantTail {
		if line := tail.next(); !strings.Contains(line, want) {
			t.Fatalf("tail printed %q; want a line with %q", line, want)
		}
	}
	tail.wait()

	mary.must("react", dm, "2", "👍")
	for who, u := range map[string]*user{"mary": mary, "josé": jose} {
		history := u.must("history", dm)
		for _, want := range []string{" " + maryShown + ": hola! (edited)", " " + joseShown + ": hi Mary [👍 1]", "> #2 " + joseShown + ": hi Mary", " " + maryShown + ": live"} {
			if !strings.Contains(history, want) {
				t.Errorf("%s's history lacks %q:\n%s", who, want, history)
			}
		}
	}
	if got := jose.must("reactions", dm, "2"); got != "👍 1 "+maryShown {
		t.Errorf("reactions of message 2: %q; want %q", got, "👍 1 "+maryShown)
	}
	if table := jose.must("list"); !strings.Contains(table, maryShown) {
		t.Errorf("José's list does not name the DM with %s:\n%s", maryShown, table)
	}
	var page struct{ Messages []protocol.Message }
	decode(t, jose.must("-json", "history", dm), &page)
	if len(page.Messages) != 3 || page.Messages[0].SenderID != "mary-jane" || page.Messages[1].SenderID != joseID {
		t.Errorf("history -json: %+v; want 3 messages with the senders' ids", page.Messages)
	}

	if got := jose.must("find", "jan"); got != "mary-jane\tMary Jane" {
		t.Errorf("José finds %q by \"jan\"; want mary-jane and Mary Jane", got)
	}
	if got := mary.must("find", "JOS"); got != joseID+"\tJosé" {
		t.Errorf("Mary finds %q by \"JOS\"; want José", got)
	}
	var found []protocol.Profile
	decode(t, mary.must("-json", "find", "nobody-is-called-this"), &found)
	if found == nil || len(found) != 0 {
		t.Errorf("find -json with no match: %+v; want []", found)
	}

	if got := mary.must("name", "  Mary   J. "); got != "Mary J." {
		t.Fatalf("name prints %q; want the clean name Mary J.", got)
	}
	history := jose.must("history", dm)
	if !strings.Contains(history, " Mary J. (mary-jane): hola!") || strings.Contains(history, "Mary Jane") {
		t.Errorf("after the rename José's history shows:\n%s\nwant Mary J. (mary-jane), no Mary Jane", history)
	}
	if got := jose.must("find", "j."); got != "mary-jane\tMary J." {
		t.Errorf("José finds %q by \"j.\" (a word's start); want mary-jane and Mary J.", got)
	}

	// Zoë's message, answered in a group, outlives her account: it and the quote of it show her
	// as a deleted account.
	zoe := newUser(t, n.URL())
	var zoeIn struct{ UserID, Token string }
	decode(t, zoe.must("-json", "login", "Zoë"), &zoeIn)
	group := mary.must("group", "trio", joseID, zoeIn.UserID)
	zoeSeq := zoe.must("send", group, "bye")
	mary.must("send", "-reply", zoeSeq, group, "see you")
	deleteAccount(t, n.URL(), zoeIn.Token)
	history = mary.must("history", group)
	tombstone, quote := "#"+zoeSeq+" ", "  > #"+zoeSeq+" (deleted account): (deleted)"
	var shown []string
	for _, line := range strings.Split(history, "\n") {
		if line == quote || strings.HasPrefix(line, tombstone) && strings.HasSuffix(line, " (deleted account): (deleted)") {
			shown = append(shown, line)
		}
	}
	if len(shown) != 2 {
		t.Errorf("after Zoë deleted her account the group's history is:\n%s\nwant her message and its quote by (deleted account)", history)
	}
}

// deleteAccount deletes the account of token, as DELETE /api/account does for a user.
func deleteAccount(t *testing.T, server, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, server+"/api/account", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete account: %s", resp.Status)
	}
}

// TestNamesFallBackToIDs: a failed profiles request does not fail what is printed: the users show
// by id, the failure is said on stderr, and the names are asked for again next time.
func TestNamesFallBackToIDs(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newUser(t, n.URL()).must("login", "Mary Jane")
	var stderr bytes.Buffer
	c := &cli{stderr: &stderr, timeout: defaultTimeout}

	gone := testenv.Connect(t, n.URL(), "bob")
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	c.learnNames(ctx, gone, "mary-jane")
	if got := c.names.show("mary-jane"); got != "mary-jane" || !strings.Contains(stderr.String(), "showing user ids") {
		t.Fatalf("over a closed connection mary-jane shows as %q, stderr %q; want the id and a warning", got, stderr.String())
	}
	live := testenv.Connect(t, n.URL(), "bob")
	defer live.Close()
	c.learnNames(ctx, live, "mary-jane")
	if got := c.names.show("mary-jane"); got != "Mary Jane (mary-jane)" {
		t.Fatalf("asked again, mary-jane shows as %q; want Mary Jane (mary-jane)", got)
	}
}

func TestErrorsGoToStderrWithStatus(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice := newUser(t, n.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, errOut, code := alice.run(ctx, "", "list"); code != exitFailure || !strings.Contains(errOut, "chatctl login") {
		t.Fatalf("list before login: exit %d, stderr %q; want 1 and a hint to log in", code, errOut)
	}
	alice.must("login", "alice")
	out, errOut, code := alice.run(ctx, "", "send", "no-such-conversation", "hi")
	if code != exitFailure || out != "" || !strings.Contains(errOut, protocol.CodeNotMember) {
		t.Fatalf("send to a stranger's conversation: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, _, code := alice.run(ctx, "", "history", "c", "-before", "3", "-after", "1"); code != exitUsage {
		t.Fatalf("history with two anchors: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := alice.run(ctx, "", "frobnicate"); code != exitUsage {
		t.Fatalf("unknown command: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := alice.run(ctx, "", "-token", "forged", "list"); code != exitFailure {
		t.Fatalf("forged token: exit %d, want %d", code, exitFailure)
	}
}

// TestTailSurvivesRestart follows a DM while its node restarts: every message is printed once, in
// seq order, whether it arrived live, through sync on reconnect, or from history.
func TestTailSurvivesRestart(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartRestartableNode(t, env.NodeConfig())
	alice, bob := newUser(t, n.URL()), newUser(t, n.URL())
	alice.must("login", "alice")
	bob.must("login", "bob")
	dm := alice.must("dm", "bob")
	alice.must("send", dm, "before tail")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tail := bob.startTail(ctx, "-json", "-after", "0", "-count", "4", dm)
	var got []string
	got = append(got, tail.next()) // the tail is connected once it has printed what was there before it
	alice.must("send", dm, "live")
	n.Stop()
	n.Restart()
	alice.must("send", dm, "after restart 1")
	alice.must("send", dm, "after restart 2")
	for len(got) < 4 {
		got = append(got, tail.next())
	}
	tail.wait()
	want := []string{"before tail", "live", "after restart 1", "after restart 2"}
	for i, line := range got {
		var m protocol.Message
		decode(t, line, &m)
		if m.Seq != int64(i+1) || m.Body != want[i] {
			t.Fatalf("line %d = seq %d %q, want seq %d %q", i, m.Seq, m.Body, i+1, want[i])
		}
	}
}

// tail is a chatctl tail running in the background, its output read line by line.
type tail struct {
	t      *testing.T
	lines  chan string
	code   chan int
	stderr bytes.Buffer // read only after the command has returned
}

// startTail runs "chatctl tail args..." as u until it exits or ctx ends.
func (u *user) startTail(ctx context.Context, args ...string) *tail {
	tl := &tail{t: u.t, lines: make(chan string, 16), code: make(chan int, 1)}
	out, stdout := io.Pipe()
	go func() {
		code := run(ctx, append([]string{"tail"}, args...),
			cli{stdin: strings.NewReader(""), stdout: stdout, stderr: &tl.stderr, getenv: u.getenv})
		stdout.Close()
		tl.code <- code
	}()
	go func() {
		defer close(tl.lines) // never full in these tests: the tail must not block on its output
		for sc := bufio.NewScanner(out); sc.Scan(); {
			tl.lines <- sc.Text()
		}
	}()
	return tl
}

// next returns the tail's next line; the test fails if the tail ends or a minute passes first.
func (tl *tail) next() string {
	tl.t.Helper()
	select {
	case line, ok := <-tl.lines:
		if !ok {
			tl.t.Fatalf("tail ended: exit %d: %s", <-tl.code, tl.stderr.String())
		}
		return line
	case <-time.After(time.Minute):
		tl.t.Fatalf("tail printed no line in a minute")
	}
	return ""
}

// wait waits for the tail to exit, and fails the test unless it exits with status 0.
func (tl *tail) wait() {
	tl.t.Helper()
	if code := <-tl.code; code != exitOK {
		tl.t.Fatalf("tail: exit %d: %s", code, tl.stderr.String())
	}
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// TestSearch: a member finds a message by a word of it, marked in its snippet, also as JSON;
// another user finds nothing.
func TestSearch(t *testing.T) {
	env := testenv.NewEnv(t)
	cfg := env.NodeConfig()
	cfg.SearchDir = filepath.Join(t.TempDir(), "search")
	n := testenv.StartNode(t, cfg)
	alice, bob, carol := newUser(t, n.URL()), newUser(t, n.URL()), newUser(t, n.URL())
	alice.must("login", "alice")
	bob.must("login", "bob")
	carol.must("login", "carol")
	dm := alice.must("dm", "bob")
	alice.must("send", dm, "the Hazelnut order shipped")
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if out := bob.must("search", "hazelnut"); !strings.Contains(out, dm+" #1 ") || !strings.Contains(out, "alice: the [Hazelnut] order shipped") {
			return fmt.Errorf("bob's search printed %q", out)
		}
		return nil
	})
	var page struct {
		Hits []protocol.SearchHit `json:"hits"`
	}
	decode(t, bob.must("-json", "search", "-in", dm, "shipped"), &page)
	if len(page.Hits) != 1 || page.Hits[0].Seq != 1 || page.Hits[0].SenderID != "alice" {
		t.Errorf("search -json = %+v; want alice's message", page)
	}
	if out := carol.must("search", "hazelnut"); out != "" {
		t.Errorf("carol, not in the DM, found %q", out)
	}
}
