package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
	"github.com/chatd/chatd/webhook"
)

// webhookReceiver is a receiver that fails its first attempts and then every seventh, checks each
// request's signature and records the events it accepted.
type webhookReceiver struct {
	mu       sync.Mutex
	secret   string
	attempts int
	accepted []webhook.Event
	keys     map[string]bool
	errs     []string
}

func (rc *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts++
	if rc.attempts <= 5 || rc.attempts%7 == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev webhook.Event
	switch {
	case r.Header.Get(webhook.HeaderSignature) != webhook.Sign(rc.secret, body):
		rc.errs = append(rc.errs, "bad signature on "+string(body))
	case json.Unmarshal(body, &ev) != nil:
		rc.errs = append(rc.errs, "not JSON: "+string(body))
	case r.Header.Get(webhook.HeaderIdempotencyKey) != ev.ID || r.Header.Get(webhook.HeaderEvent) != ev.Event:
		rc.errs = append(rc.errs, fmt.Sprintf("headers %v do not match %s", r.Header, body))
	case rc.keys[ev.ID]:
		rc.errs = append(rc.errs, "accepted twice: "+ev.ID)
	default:
		rc.keys[ev.ID] = true
		rc.accepted = append(rc.accepted, ev)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rc *webhookReceiver) events() []webhook.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]webhook.Event(nil), rc.accepted...)
}

func TestWebhookGetsEveryEventOnceInOrderSignedDespiteFailures(t *testing.T) {
	cfg := testenv.NewEnv(t).NodeConfig()
	cfg.Sequencer.Partitions = blockPartitions
	cfg.AdminSecret = []byte("admin-secret-admin-secret-admin-secret")
	cfg.Webhooks = webhook.Config{Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, HooksTTL: 200 * time.Millisecond}
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, time.Minute)
	alice := testenv.Connect(t, n.URL(), "alice")
	testenv.Connect(t, n.URL(), "bob")
	group, err := alice.CreateGroup(ctx, "hooked", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	rc := &webhookReceiver{keys: map[string]bool{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	code, body := bearerCall(t, http.MethodPost, n.AdminURL()+"/admin/conversations/"+group.ID+"/webhooks",
		string(cfg.AdminSecret), `{"url": "`+srv.URL+`/hook"}`)
	var made struct{ ID, URL, Secret string }
	if err := json.Unmarshal(body, &made); err != nil || code != http.StatusCreated || made.Secret == "" {
		t.Fatalf("register: status %d, %s", code, body)
	}
	rc.mu.Lock()
	rc.secret = made.Secret
	rc.mu.Unlock()

	const count = 100
	var first int64
	for i := range count {
		ack, err := alice.Send(ctx, group.ID, fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ack.Seq
		}
	}
	edited, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: group.ID, Seq: first, Body: "m0 edited"})
	if err != nil {
		t.Fatalf("edit: %v (%+v)", err, edited)
	}
	if _, err := alice.Request(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: group.ID, Seq: first + 1}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	poll.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if got := len(rc.events()); got < count+2 {
			return fmt.Errorf("receiver accepted %d events; want %d", got, count+2)
		}
		return nil
	})
	got := rc.events()
	for i, ev := range got[:count] {
		want := fmt.Sprintf("m%d", i)
		if ev.Event != webhook.EventMessage || ev.Seq != first+int64(i) || ev.Message == nil || ev.Message.Body != want ||
			ev.ID != fmt.Sprintf("%s/%d", group.ID, ev.Seq) {
			t.Fatalf("event %d: %+v; want message %q at seq %d", i, ev, want, first+int64(i))
		}
	}
	if e := got[count]; e.Event != webhook.EventEdit || e.Seq != first || e.Body != "m0 edited" || e.Version == 0 {
		t.Fatalf("edit event %+v", e)
	}
	if e := got[count+1]; e.Event != webhook.EventDelete || e.Seq != first+1 || e.Version <= got[count].Version {
		t.Fatalf("delete event %+v", e)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.errs) > 0 || rc.attempts <= count+2 {
		t.Fatalf("receiver errors %v after %d attempts (some must have failed)", rc.errs, rc.attempts)
	}
}

func TestOnlyAGroupsOwnerRegistersItsWebhooksOverTheAPI(t *testing.T) {
	n := blockNodes(t, 1)[0]
	ctx := ctxT(t, time.Minute)
	alice, aliceToken := testenv.ConnectWithToken(t, n.URL(), "alice")
	_, bobToken := testenv.ConnectWithToken(t, n.URL(), "bob")
	_, carolToken := testenv.ConnectWithToken(t, n.URL(), "carol")
	group, err := alice.CreateGroup(ctx, "owned", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	dm, err := alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	hooks := func(conv string) string { return n.URL() + "/api/conversations/" + conv + "/webhooks" }
	for _, c := range []struct {
		what, url, token, body string
		want                   int
	}{
		{"a member who is not the owner", hooks(group.ID), bobToken, `{"url": "https://hooks.example/x"}`, http.StatusForbidden},
		{"someone not in the group", hooks(group.ID), carolToken, `{"url": "https://hooks.example/x"}`, http.StatusNotFound},
		{"a DM", hooks(dm.ID), aliceToken, `{"url": "https://hooks.example/x"}`, http.StatusForbidden},
		{"an http URL from a user", hooks(group.ID), aliceToken, `{"url": "http://10.0.0.1/x"}`, http.StatusBadRequest},
		{"the owner", hooks(group.ID), aliceToken, `{"url": "https://hooks.example/x"}`, http.StatusCreated},
	} {
		if code, body := bearerCall(t, http.MethodPost, c.url, c.token, c.body); code != c.want {
			t.Errorf("%s registers: %d %s; want %d", c.what, code, body, c.want)
		}
	}
	code, body := bearerCall(t, http.MethodGet, hooks(group.ID), aliceToken, "")
	var list struct {
		Webhooks []struct{ ID, URL, Secret, CreatedBy string }
	}
	if err := json.Unmarshal(body, &list); err != nil || code != http.StatusOK || len(list.Webhooks) != 1 ||
		list.Webhooks[0].Secret != "" || list.Webhooks[0].CreatedBy != "alice" {
		t.Fatalf("list: %d %s; want alice's one webhook, without its secret", code, body)
	}
	if code, _ := bearerCall(t, http.MethodDelete, hooks(group.ID)+"/"+list.Webhooks[0].ID, aliceToken, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if _, body := bearerCall(t, http.MethodGet, hooks(group.ID), aliceToken, ""); !bytes.Contains(body, []byte(`"webhooks":[]`)) {
		t.Fatalf("after delete: %s", body)
	}
}
