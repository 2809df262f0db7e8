package web_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/testenv"
)

// axeEnv names the file axe.min.js of axe-core, the accessibility engine the test runs inside
// the page. scripts/test fetches a pinned version from npm into bin/ and sets it.
const axeEnv = "CHAT_TEST_AXE_JS"

// Phone layout size (an iPhone SE's CSS pixels) and its smallest tap target: 44 by 44 CSS px,
// WCAG 2.5.5 (AAA) and the size Apple's and Android's guidelines ask for. axe's own target-size
// rule checks only the AA minimum of 24 px.
const (
	phoneWidth, phoneHeight = 375, 667
	minTapTarget            = 44
)

// axeScript reads axe.min.js. The test never skips: without the file it fails and says how to
// get it.
func axeScript(t *testing.T) string {
	t.Helper()
	path := os.Getenv(axeEnv)
	if path == "" {
		t.Fatalf("%s is not set: run scripts/test, which fetches axe-core from npm into bin/ and sets it", axeEnv)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read axe-core (%s=%s): %v; run scripts/test, which fetches it", axeEnv, path, err)
	}
	return string(src)
}

// axeViolation is one rule axe found broken, with the elements that break it.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
	Summary string   `json:"summary"` // what the first element lacks, in axe's words
}

// axeRun runs every rule of axe-core's default set, plus target-size (WCAG 2.2 AA, off by
// default), on the whole document and returns the violations, each target a CSS selector.
// Runtime.evaluate is not subject to the page's CSP, which would refuse a script tag.
const axeRun = `axe.run(document, {resultTypes: ['violations'], rules: {'target-size': {enabled: true}}})
	.then(r => r.violations.map(v => ({
		id: v.id, impact: v.impact || '', help: v.help,
		targets: v.nodes.map(n => n.target.flat().join(' ')),
		summary: (v.nodes[0] && v.nodes[0].failureSummary || '').replace(/\s+/g, ' '),
	})))`

// checkAccessibility runs axe-core in the page as it is and fails the test for each violation,
// serious and critical ones first; the view is saved as the screenshot a11y-<view>. It goes on
// after a failure, so one run reports every view. Moderate and minor violations (best practices
// such as one main landmark) fail too: the page has none, and a new one is fixed, not collected.
func (p *page) checkAccessibility(axe, view string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	if eval[bool](p, `typeof axe === 'undefined'`) {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axe)); err != nil {
			p.fail("load axe-core into the page: %v", err)
		}
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](axeRun, chromedp.EvalAwaitPromise))
	if err != nil {
		p.fail("run axe-core on the %s view: %v", view, err)
	}
	p.screenshot("a11y-" + view)
	var serious, lesser []string
	for _, v := range violations {
		line := fmt.Sprintf("%s (%s): %s\n      on %s\n      %s", v.ID, v.Impact, v.Help, strings.Join(v.Targets, " | "), v.Summary)
		if v.Impact == "serious" || v.Impact == "critical" {
			serious = append(serious, line)
		} else {
			lesser = append(lesser, line)
		}
	}
	if len(violations) > 0 {
		p.t.Errorf("%s: axe-core finds %d serious or critical and %d lesser violations on the %s view:\n    %s",
			p.name, len(serious), len(lesser), view, strings.Join(append(serious, lesser...), "\n    "))
	}
}

// checkTapTargets fails the test for every control on screen smaller than minTapTarget in
// either direction. Links inside message text are exempt (WCAG's inline exception); a checkbox
// counts through its label, which takes the tap too.
func (p *page) checkTapTargets(view string) {
	p.t.Helper()
	small := eval[[]string](p, fmt.Sprintf(`(() => {
		const min = %d, small = [];
		for (const e of document.querySelectorAll('button, a[href], input, textarea, select, summary, [role="menuitem"], [tabindex]:not([tabindex="-1"])')) {
			if (e.closest('.body, .sr-only')) continue;
			const target = e.type === 'checkbox' && e.closest('label') || e;
			const r = target.getBoundingClientRect();
			if (r.width === 0 && r.height === 0) continue; // not rendered
			if (r.width < min - 0.5 || r.height < min - 0.5) {
				small.push((e.id ? '#' + e.id : e.tagName.toLowerCase() + '.' + [...e.classList].join('.')) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height));
			}
		}
		return small;
	})()`, minTapTarget))
	if len(small) > 0 {
		p.t.Errorf("%s: the %s view has tap targets under %d px: %s", p.name, view, minTapTarget, strings.Join(small, ", "))
	}
}

// setColorScheme makes the page see prefers-color-scheme: scheme ("light" or "dark").
func (p *page) setColorScheme(scheme string) {
	p.t.Helper()
	p.do("emulate prefers-color-scheme: "+scheme, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	}))
	p.waitFor("the "+scheme+" color scheme", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
}

// TestAccessibility runs axe-core inside the page on every view a person meets, in the light and
// the dark color scheme, and fails on any violation (serious and critical above all): sign-in; the main view
// (alice's DM with bob holding messages from both, a group in the list, no menu open); the
// settings and group-info panels; and the phone layout, in a conversation and on the list, where
// every control must also be at least 44 px square.
func TestAccessibility(t *testing.T) {
	axe := axeScript(t)
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	b := newBrowser(t)
	visitor, alice, bob := b.newPage("visitor"), b.newPage("alice"), b.newPage("bob")

	visitor.open(n.URL())
	alice.signIn(n.URL(), "alice")
	bob.signIn(n.URL(), "bob")
	alice.createGroup("Team", "bob")
	bob.clickConversation("Team")
	bob.typeMessage("Welcome, see https://example.com/plan", true)
	alice.openDM("bob")
	alice.typeMessage("Lunch at noon?", true)
	bob.waitFor("alice's message in bob's list", unreadShown("alice", 1, 1))
	bob.clickConversation("alice")
	bob.readToBottom(1)
	bob.typeMessage("Sure, the usual place", true)
	alice.untilShown(1, 2)
	alice.waitFor("✓✓ on alice's message", present(msgSel(1)+`[data-read="true"]`))

	for _, scheme := range []string{"light", "dark"} {
		for _, p := range []*page{visitor, alice} {
			p.setColorScheme(scheme)
		}
		visitor.checkAccessibility(axe, "sign-in-"+scheme)

		alice.do("a desktop window", chromedp.EmulateViewport(1100, 760))
		alice.clickConversation("bob")
		alice.untilShown(1, 2)
		alice.waitFor("no menu open", `document.getElementById('msg-menu').hidden && document.getElementById('conv-menu').hidden`)
		alice.checkAccessibility(axe, "main-"+scheme)

		alice.do("open settings", chromedp.Click(chromedp.ID("open-settings")))
		alice.waitFor("the settings panel", `document.getElementById('settings').open`)
		alice.checkAccessibility(axe, "settings-"+scheme)
		alice.do("close settings", chromedp.Click(chromedp.CSS("#settings .panel-close")))
		alice.waitFor("settings closed", `!document.getElementById('settings').open`)

		alice.clickConversation("Team")
		alice.convMenu("menu-group-info")
		alice.waitFor("the group-info panel", `document.getElementById('group-info').open && document.querySelectorAll('#group-member-list > li').length === 2`)
		alice.checkAccessibility(axe, "group-info-"+scheme)
		alice.do("close group info", chromedp.Click(chromedp.CSS("#group-info .panel-close")))
		alice.waitFor("group info closed", `!document.getElementById('group-info').open`)

		alice.clickConversation("bob")
		alice.openJumpPicker()
		alice.checkAccessibility(axe, "jump-picker-"+scheme)
		alice.do("close the jump picker", chromedp.Click(chromedp.CSS("#jump-picker .panel-close")))
		alice.waitFor("the jump picker closed", `!document.getElementById('jump-picker').open`)

		alice.do("look for bob by name", chromedp.SendKeys(chromedp.ID("dm-user"), "bo"))
		alice.waitFor("bob found", `document.querySelectorAll('#dm-results li.person').length === 1`)
		alice.checkAccessibility(axe, "find-a-person-"+scheme)
		alice.do("close the list", pressKey("Escape", 27, ""), chromedp.Evaluate[chromedp.Void](`document.getElementById('dm-user').value = ''`))
		alice.waitFor("the list closed", `document.getElementById('dm-results').hidden`)

		alice.do("a phone", chromedp.EmulateViewport(phoneWidth, phoneHeight, chromedp.EmulateTouch))
		alice.waitFor("the conversation covering the list", `getComputedStyle(document.getElementById('sidebar')).display === 'none' && document.querySelectorAll('#messages > li[data-seq]').length === 2`)
		alice.checkAccessibility(axe, "phone-conversation-"+scheme)
		alice.checkTapTargets("phone-conversation-" + scheme)
		alice.do("back to the list", chromedp.Click(chromedp.ID("back")))
		alice.waitFor("the list", `getComputedStyle(document.getElementById('conversation')).display === 'none'`)
		alice.checkAccessibility(axe, "phone-list-"+scheme)
		alice.checkTapTargets("phone-list-" + scheme)
	}

	// The new-group form on the phone, with bob found by name and picked: a chip and its button.
	alice.do("open the new-group form", chromedp.Click(chromedp.CSS("#group-details summary")),
		chromedp.SendKeys(chromedp.ID("group-members"), "bo"))
	alice.waitFor("bob found", `document.querySelectorAll('#group-results li.person').length === 1`)
	alice.checkAccessibility(axe, "phone-group-found-dark")
	alice.checkTapTargets("phone-group-found-dark")
	alice.do("pick bob", pressKey("ArrowDown", 40, ""), pressKey("Enter", 13, "\r"))
	alice.waitFor("bob's chip", `document.querySelectorAll('#group-picked > li').length === 1 && document.getElementById('group-results').hidden`)
	alice.checkAccessibility(axe, "phone-group-picked-dark")
	alice.checkTapTargets("phone-group-picked-dark")
}
