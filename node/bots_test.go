package node_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// bearerCall makes an HTTP call with a bearer token and returns the status and the body.
func bearerCall(t *testing.T, method, url, token string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// issueBotToken asks the admin API for a bot token.
func issueBotToken(t *testing.T, n *testenv.Node, secret, id, name string) string {
	t.Helper()
	code, body := bearerCall(t, http.MethodPost, n.AdminURL()+"/admin/bots/"+id+"/token", secret, `{"name": "`+name+`"}`)
	var got struct{ UserID, Name, Token string }
	if err := json.Unmarshal(body, &got); err != nil || code != http.StatusCreated || got.UserID != id || got.Name != name || got.Token == "" {
		t.Fatalf("issue bot token: %d %s", code, body)
	}
	return got.Token
}

func TestBotSendsOverHTTPOnceAndOverTheWebSocket(t *testing.T) {
	cfg := testenv.NewEnv(t).NodeConfig()
	cfg.Sequencer.Partitions = blockPartitions
	cfg.AdminSecret = []byte("admin-secret-admin-secret-admin-secret")
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)
	secret := string(cfg.AdminSecret)

	token := issueBotToken(t, n, secret, "weatherbot", "Weather Bot")
	alice := testenv.Connect(t, n.URL(), "alice")
	testenv.Connect(t, n.URL(), "bob")
	group, err := alice.CreateGroup(ctx, "forecast", []string{"weatherbot"})
	if err != nil {
		t.Fatal(err)
	}
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}

	// One HTTP send, retried with the same clientMsgId: stored once, answered with the same seq.
	send := func(conv, clientID, body, tok string) (int, protocol.Message) {
		code, data := bearerCall(t, http.MethodPost, n.URL()+"/api/conversations/"+conv+"/messages", tok,
			`{"clientMsgId": "`+clientID+`", "body": "`+body+`"}`)
		var got struct{ Message protocol.Message }
		_ = json.Unmarshal(data, &got)
		return code, got.Message
	}
	code, first := send(group.ID, "00000000-0000-4000-8000-000000000001", "sunny", token)
	if code != http.StatusOK || first.SenderID != "weatherbot" || first.Body != "sunny" || first.Seq == 0 {
		t.Fatalf("bot's HTTP send: %d %+v", code, first)
	}
	if code, again := send(group.ID, "00000000-0000-4000-8000-000000000001", "sunny", token); code != http.StatusOK || again.Seq != first.Seq {
		t.Fatalf("retried HTTP send: %d %+v; want the same seq %d", code, again, first.Seq)
	}
	if code, _ := send(dm.ID, "00000000-0000-4000-8000-000000000002", "intrusion", token); code != http.StatusForbidden {
		t.Fatalf("send to a conversation the bot is not in: %d; want 403", code)
	}
	if code, _ := send(group.ID, "00000000-0000-4000-8000-000000000003", "", token); code != http.StatusBadRequest {
		t.Fatalf("empty body: %d; want 400", code)
	}

	// The same token opens a WebSocket, where the bot is a user like any other.
	bot, err := client.Dial(ctx, n.WSURL(), token, nil)
	if err != nil {
		t.Fatalf("bot's WebSocket: %v", err)
	}
	t.Cleanup(func() { _ = bot.Close() })
	if _, err := bot.Send(ctx, group.ID, "via socket"); err != nil {
		t.Fatal(err)
	}
	if got := dmBodies(t, alice, group.ID); slices.Index(got, "sunny") < 0 || len(slices.DeleteFunc(slices.Clone(got), func(b string) bool { return b != "sunny" })) != 1 || got[len(got)-1] != "via socket" {
		t.Fatalf("alice sees %q; want one \"sunny\", then \"via socket\"", got)
	}

	// A new token replaces the old one at once; a made-up one is refused like a bad JWT.
	newToken := issueBotToken(t, n, secret, "weatherbot", "Weather Bot")
	if code, _ := send(group.ID, "00000000-0000-4000-8000-000000000004", "stale", token); code != http.StatusUnauthorized {
		t.Fatalf("replaced token: %d; want 401", code)
	}
	if code, _ := send(group.ID, "00000000-0000-4000-8000-000000000004", "fresh", "chatdbot.made-up"); code != http.StatusUnauthorized {
		t.Fatalf("unknown bot token: %d; want 401", code)
	}
	if code, m := send(group.ID, "00000000-0000-4000-8000-000000000004", "fresh", newToken); code != http.StatusOK || m.Body != "fresh" {
		t.Fatalf("new token: %d %+v", code, m)
	}
}
