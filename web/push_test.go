package web_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/poll"
)

// fakePushManager stands in for the browser's push service, which a headless browser here cannot
// reach: subscribe gives a subscription with a real P-256 key (%[1]s) and secret (%[2]s), which
// the page hands to the server as any browser's. Everything else is the real browser: the
// service worker, its registration, the notification permission and the notifications.
const fakePushManager = `(() => {
	const sub = {
		endpoint: 'https://push.example/send/bob',
		toJSON() { return { endpoint: this.endpoint, expirationTime: null, keys: { p256dh: '%[1]s', auth: '%[2]s' } }; },
		unsubscribe() { window.__subscribed = false; return Promise.resolve(true); },
	};
	PushManager.prototype.subscribe = function () { window.__subscribed = true; return Promise.resolve(sub); };
	PushManager.prototype.getSubscription = function () { return Promise.resolve(window.__subscribed ? sub : null); };
})()`

// swNotificationsAre is a JavaScript condition: the service worker's registration shows exactly
// these notifications ("title|body|tag"). Each check asks again and compares the last answer.
func swNotificationsAre(t *testing.T, notes ...string) string {
	notes = append([]string{}, notes...) // none is [], not null
	return fmt.Sprintf(`(navigator.serviceWorker.ready.then(r => r.getNotifications()).then(ns => { window.__sw = ns.map(n => n.title + '|' + n.body + '|' + n.tag); }),
		JSON.stringify(window.__sw || null) === %q)`, mustJSON(t, notes))
}

// TestWebPushServiceWorker: bob turns on "Notify this device while I'm away" in settings, which
// registers the page's service worker and hands the server his subscription. A push delivered to
// the service worker (DevTools' ServiceWorker.deliverPushMessage, as a push service would) shows
// a notification with alice's name and text; a click on it opens the DM in bob's tab; a
// withdrawal closes it.
func TestWebPushServiceWorker(t *testing.T) {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testenv.NewEnv(t).NodeConfig()
	cfg.Push = push.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv}
	n := testenv.StartNode(t, cfg)
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)

	b := newBrowser(t)
	alice, bob := b.newPage("alice"), b.newPage("bob")
	bob.do("fake the push service, allow notifications", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdpage.AddScriptToEvaluateOnNewDocument, cdpage.AddScriptToEvaluateOnNewDocumentParams{
			Source: fmt.Sprintf(fakePushManager, base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(secret))})
		if err != nil {
			return err
		}
		_, err = chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingGranted,
			Origin: n.URL(), BrowserContextID: chromedp.FromContext(bob.ctx).BrowserContextID})
		return err
	}))
	var (
		mu   sync.Mutex
		regs []*serviceworker.Registration
	)
	eventsCtx, stopEvents := context.WithCancel(bob.ctx)
	events := chromedp.Events(eventsCtx, serviceworker.WorkerRegistrationUpdated)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			regs = append(regs, ev.Registrations...)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		stopEvents()
		wg.Wait()
	})
	alice.signIn(n.URL(), "alice")
	bob.signIn(n.URL(), "bob")
	bob.do("watch service workers", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, serviceworker.Enable, cdp.Empty{})
		return err
	}))

	bob.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
	bob.do("turn on push", chromedp.Click(chromedp.ID("push-switch")))
	bob.waitFor("this device subscribed", `document.getElementById('push-switch').checked && document.getElementById('push-status').textContent === 'This device is notified of new messages while you are away.'`)
	bob.do("close settings", chromedp.Click(chromedp.CSS(`#settings [data-close]`)))

	alice.openDM("bob")
	alice.typeMessage("lunch at noon?", true)
	dmID := strings.TrimPrefix(eval[string](alice, `location.hash`), "#c=")
	bob.waitFor("the DM in bob's list", present(convButton("alice")))

	var regID serviceworker.RegistrationID
	poll.CheckFor(t, waitTimeout, pollInterval, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range regs {
			if strings.HasPrefix(r.ScopeURL, n.URL()) && !r.IsDeleted {
				regID = r.RegistrationID
				return nil
			}
		}
		return fmt.Errorf("no service worker registered for %s yet (%d registrations seen)", n.URL(), len(regs))
	})
	bob.waitFor("the service worker active", `(navigator.serviceWorker.ready.then(r => { window.__swActive = !!r.active && r.active.state === 'activated'; }), window.__swActive === true)`)
	deliver := func(p push.Payload) {
		bob.do("deliver a push", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
				Origin: n.URL(), RegistrationID: regID, Data: string(mustJSON(t, p))})
			return err
		}))
	}
	// The first push is handed over again until it shows: DevTools does not always dispatch a
	// push to a worker that has just activated (about 1 run in 5 here, even after the browser
	// reported the version activated and running), and the notification's tag makes a second
	// one replace the first.
	first := push.Payload{Type: push.PayloadMessage, ConversationID: dmID, Tag: dmID, Seq: 1, FirstUnreadSeq: 1, Count: 1,
		ConversationName: "alice", SenderID: "alice", SenderName: "alice", Body: "lunch at noon?"}
	shown := swNotificationsAre(t, "alice|lunch at noon?|"+dmID)
	poll.CheckFor(t, waitTimeout, pollInterval, func() error {
		deliver(first)
		for range 20 {
			if eval[bool](bob, shown) {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return errors.New("no notification with alice's name and text 2 s after a push")
	})

	// A click on it (the service worker's notificationclick handler, run in the worker) opens
	// the DM in bob's tab.
	clickNotification(t, b, n.URL())
	bob.waitFor("the DM open in bob's tab, the notification gone", `document.getElementById('conv-title').textContent === 'alice'`+
		` && `+swNotificationsAre(t))

	// A withdrawal closes what a read elsewhere covers.
	deliver(push.Payload{Type: push.PayloadMessage, ConversationID: dmID, Tag: dmID, Seq: 2, FirstUnreadSeq: 2, Count: 1,
		ConversationName: "alice", SenderID: "alice", SenderName: "alice"})
	bob.waitFor("a notification without text", swNotificationsAre(t, "alice|New message|"+dmID))
	deliver(push.Payload{Type: push.PayloadWithdraw, ConversationID: dmID, Tag: dmID, Seq: 2})
	bob.waitFor("the notification withdrawn", swNotificationsAre(t))
}

// clickNotification runs, in the page's service worker, what a click on its first notification
// runs (notificationclick calls openFromNotification): a headless browser shows no notification
// to click.
func clickNotification(t *testing.T, b *browser, origin string) {
	t.Helper()
	poll.CheckFor(t, waitTimeout, pollInterval, func() error {
		targets, err := chromedp.Targets(b.ctx)
		if err != nil {
			return err
		}
		for _, tg := range targets {
			if tg.Type != "service_worker" || !strings.HasPrefix(tg.URL, origin) {
				continue
			}
			ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(tg.TargetID))
			defer cancel()
			ctx, stop := context.WithTimeout(ctx, waitTimeout)
			defer stop()
			await := true
			res, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{AwaitPromise: &await,
				Expression: `self.registration.getNotifications().then(ns => ns.length === 1 ? openFromNotification(ns[0]).then(() => 'clicked') : 'notifications: ' + ns.length)`})
			switch {
			case err != nil:
				return fmt.Errorf("evaluate in the service worker: %w", err)
			case res.ExceptionDetails != nil:
				return fmt.Errorf("the service worker threw: %s", res.ExceptionDetails.Text)
			case string(res.Result.Value) != `"clicked"`:
				return fmt.Errorf("the service worker answered %s", res.Result.Value)
			}
			return nil
		}
		return fmt.Errorf("no service worker target of %s", origin)
	})
}
