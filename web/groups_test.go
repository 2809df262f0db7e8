package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// These tests drive running a group (issue 37) in real browsers: pins, invite links and reports.

// TestPinBarForEveryone: alice, the group's owner, pins bob's message from its menu; the pin bar
// appears on bob's and carol's pages with its text, and a click on it takes carol to the message.
// Bob, a member, is offered no Pin.
func TestPinBarForEveryone(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Team")
	bob.typeMessage("the plan: meet at noon", true)
	for i := 2; i <= 30; i++ {
		alice.typeMessage(fmt.Sprintf("chatter %d", i), true)
	}
	carol.untilShown(1, 30)
	// All of them on bob's page too before he points at one: a message arriving after the hover
	// scrolls his page to the newest, away from the pointer.
	bob.untilShown(1, 30)
	bob.openMessageMenu(2)
	if eval[bool](bob, `!document.getElementById('msg-pin').hidden`) {
		t.Fatal("bob, a member, is offered Pin")
	}
	bob.do("close the menu", pressKey("Escape", 27, ""))

	alice.openMessageMenu(1)
	alice.do("pin bob's message", chromedp.Click(chromedp.ID("msg-pin")))
	bar := `!document.getElementById('pin-bar').hidden && document.getElementById('pin-text').textContent === 'the plan: meet at noon'`
	for _, p := range []*page{alice, bob, carol} {
		p.waitFor("the system message", systemShown("alice pinned message 1"))
		p.waitFor("the pin bar with the message", bar)
	}
	carol.screenshot("40-pin-bar")
	carol.do("scroll to the newest", chromedp.Evaluate[chromedp.Void](`(s => { s.scrollTop = s.scrollHeight; })(document.getElementById("scroller"))`))
	carol.do("click the pin bar", chromedp.Click(chromedp.ID("pin-button")))
	carol.waitFor("message 1 in view with the focus", inView(1)+` && document.activeElement === document.querySelector('#messages > li[data-seq="1"]')`)
}

// TestJoinByInviteLink: alice makes an invite link in group info; dave, who is in no group,
// opens it: the join page says the group's name and member count, and Join opens the group,
// which alice sees him join.
func TestJoinByInviteLink(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob", "dave")
	alice, dave := pages[0], pages[2]
	alice.createGroup("Trip", "bob")
	alice.convMenu("menu-group-info")
	alice.waitFor("the group settings for its owner", `!document.getElementById('group-admin').hidden && !document.getElementById('invite-empty').hidden`)
	alice.do("create an invite link", chromedp.Click(chromedp.ID("create-invite")))
	alice.waitFor("the link in the panel", `document.querySelectorAll('#invite-list .invite-url').length === 1`)
	link := eval[string](alice, `document.querySelector('#invite-list .invite-url').value`)
	if !strings.Contains(link, "#/join/") {
		t.Fatalf("the invite link is %q", link)
	}
	alice.screenshot("41-invite-link")
	alice.do("close group info", chromedp.Click(chromedp.CSS("#group-info .panel-close")))

	dave.do("open the invite link", chromedp.Navigate(link))
	dave.waitFor("the join page", `document.getElementById('join-dialog').open && document.getElementById('join-title').textContent === 'Join Trip?' && document.getElementById('join-text').textContent === 'Trip · 2 members'`)
	dave.screenshot("42-join-page")
	dave.do("join", chromedp.Click(chromedp.ID("join-ok")))
	dave.waitFor("the group open on dave's page", `!document.getElementById('join-dialog').open && document.getElementById('conv-title').textContent === 'Trip'`)
	alice.waitFor("alice sees dave join", systemShown("dave joined with an invite link"))
	dave.typeMessage("hello all", true)
	alice.waitFor("dave's message", `[...document.querySelectorAll('#messages > li .body')].some(e => e.textContent === 'hello all')`)
}

// TestReportReachesTheAdmin: bob reports alice's message from its menu with a reason; alice, the
// group's owner, is told at once and finds it in group info, where she dismisses it, then mutes
// and bans bob; carol, a member, is told nothing of the report.
func TestReportReachesTheAdmin(t *testing.T) {
	_, alice, bob, carol := threeInAGroup(t, "Team")
	alice.typeMessage("buy cheap watches here", true)
	bob.untilShown(1, 1)
	bob.openMessageMenu(1)
	bob.do("report", chromedp.Click(chromedp.ID("msg-report")))
	bob.waitFor("the report form", `document.getElementById('report-dialog').open`)
	bob.do("give a reason and send", chromedp.SetValue(chromedp.ID("report-reason"), "spam"), chromedp.Click(chromedp.ID("report-send")))
	bob.waitFor("the report sent", `!document.getElementById('report-dialog').open`)
	alice.waitFor("the report told to alice at once", noticeShown("bob reported a message in Team: spam"))

	alice.convMenu("menu-group-info")
	alice.waitFor("bob's report in group info", `[...document.querySelectorAll('#report-list .report-text')].some(e => e.textContent === 'bob reported message 1: spam')`)
	alice.screenshot("43-report-in-group-info")
	alice.do("dismiss it", chromedp.Click(chromedp.CSS("#report-list .dismiss-report")))
	alice.waitFor("no open reports", `document.querySelectorAll('#report-list > li').length === 0 && !document.getElementById('report-empty').hidden`)

	if n := eval[int](carol, `document.querySelectorAll('#messages > li.system').length`); n != 0 {
		t.Errorf("carol's page shows %d system messages; the report should tell the group nothing", n)
	}

	// Acting on a report: alice mutes bob for an hour (his composer says so), then bans him (the
	// group leaves his page, and her panel lists him as banned).
	alice.do("mute bob", chromedp.Click(chromedp.CSS(`#group-member-list > li[data-user="bob"] .mute-member`)))
	bob.waitFor("bob's composer closed while he is muted", `/^You are muted in this group until /.test(document.getElementById('composer-gate').textContent) && document.getElementById('composer-input').disabled`)
	alice.waitFor("Unmute offered for bob", `document.querySelector('#group-member-list > li[data-user="bob"] .mute-member')?.textContent === 'Unmute'`)
	alice.do("ban bob", chromedp.Click(chromedp.CSS(`#group-member-list > li[data-user="bob"] .ban-member`)))
	alice.confirm("Ban bob", true)
	bob.waitFor("the group gone from bob's list", fmt.Sprintf(`!document.querySelector(%q)`, convButton("Team")))
	alice.waitFor("bob banned in alice's panel", `[...document.querySelectorAll('#banned-list > li')].map(e => e.dataset.user).join(',') === 'bob' && !document.querySelector('#group-member-list > li[data-user="bob"]')`)
	carol.convMenu("menu-group-info")
	carol.waitFor("carol's panel, a member's: no group settings", `document.getElementById('group-info').open && document.getElementById('group-admin').hidden`)
}

// TestComposerGates: alice makes her group an announcement group in its settings; bob's composer
// is disabled with the reason at once. With slow mode instead, bob's message starts a countdown
// that keeps Send disabled; alice, the owner, is not held back.
func TestComposerGates(t *testing.T) {
	_, pages := signedIn(t, "alice", "bob")
	alice, bob := pages[0], pages[1]
	alice.createGroup("News", "bob")
	bob.clickConversation("News")
	alice.convMenu("menu-group-info")
	alice.waitFor("the group settings", `!document.getElementById('group-admin').hidden`)
	alice.do("only admins post", chromedp.Click(chromedp.ID("announcement-switch")), chromedp.Click(chromedp.CSS("#group-settings-form button[type=submit]")))
	gate := `(t => !document.getElementById('composer-gate').hidden && document.getElementById('composer-gate').textContent === t)`
	bob.waitFor("bob's composer closed, with the reason", gate+`('Only admins can post in this group.') && document.getElementById('composer-input').disabled && document.getElementById('send').disabled`)
	bob.screenshot("44-announcement-composer")

	alice.do("everyone posts, one message every 10 s", chromedp.Click(chromedp.ID("announcement-switch")),
		chromedp.SetValue(chromedp.ID("slow-mode-select"), "10"), chromedp.Click(chromedp.CSS("#group-settings-form button[type=submit]")))
	bob.waitFor("bob's composer open again", `document.getElementById('composer-gate').hidden && !document.getElementById('composer-input').disabled`)
	bob.typeMessage("first", true)
	bob.waitFor("the slow-mode countdown", `/^Slow mode: you can send again in ([1-9]|10) s\.$/.test(document.getElementById('composer-gate').textContent) && document.getElementById('send').disabled && !document.getElementById('composer-input').disabled`)
	alice.do("close group info", chromedp.Click(chromedp.CSS("#group-info .panel-close")))
	alice.typeMessage("admins are not held back", true)
	alice.typeMessage("not at all", true)
	bob.waitFor("alice's two messages", `[...document.querySelectorAll('#messages > li .body')].filter(e => e.textContent === 'admins are not held back' || e.textContent === 'not at all').length === 2`)
	if eval[bool](alice, `!document.getElementById('composer-gate').hidden`) {
		t.Fatal("alice's composer shows a gate in slow mode")
	}
}
