// Package group owns the rules of running a group: who holds which role (owner, admins,
// members), who may change what (members, name, topic, settings, mutes, bans, pins), who may send
// now (announcement groups, slow mode, mutes), and the system message that tells the group what
// changed. It holds no state and does no I/O: the sequencer's owner of a conversation (its one
// writer) applies these rules to the group as it holds it, so two admins on two nodes cannot race
// past a rule, and writes what Apply returns (storage.GroupUpdate) before it sequences the
// system message. A DM has no roles: every change of one is refused.
package group

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Changes of membership, besides the moderate actions of protocol (protocol.ActionPromote, ...).
const (
	// OpAdd adds Users; OpRemove takes Users[0] out (its actor leaving when it is themselves).
	OpAdd    = "add"
	OpRemove = "remove"
	// OpJoin adds its actor, not a member yet, by invite link ID.
	OpJoin = "join"
	// OpReport reports message Seq to the group's admins, with reason Text, as report ID.
	OpReport = "report"
)

// Op is one administrative change a member asks of a group, as it travels to the owner.
type Op struct {
	// Action is OpAdd, OpRemove or a protocol moderate action.
	Action string `json:"action"`
	// Users are whom it concerns: those added, or the one removed, promoted, muted, ...
	Users []string `json:"users,omitempty"`
	// Text is a new name or topic.
	Text    string `json:"text,omitempty"`
	Enabled bool   `json:"enabled,omitempty"`
	// Seconds is slow mode's interval or a mute's length.
	Seconds int64 `json:"seconds,omitempty"`
	// Seq is the message pinned, unpinned or reported.
	Seq int64 `json:"seq,omitempty"`
	// ID is an invite link's token or a report's id; MaxUses an invite link's limit.
	ID      string `json:"id,omitempty"`
	MaxUses int64  `json:"maxUses,omitempty"`
}

// Group is a group as the rules see it: what its owner holds of it.
type Group struct {
	Kind      string
	Name      string
	CreatedBy string
	Members   map[string]bool
	// Admin is how it is run; nil for one nobody has run yet (see storage.GroupAdmin).
	Admin *storage.GroupAdmin
	// LastSeq is its newest message: a pin names one at most this.
	LastSeq int64
}

// Result is what a change does: the update to write, and the system message telling the group,
// which says who did what (none for reports and their dismissal, which are the admins' alone).
// Changed is false for a change that changes nothing (a repeat): then nothing is written or said.
type Result struct {
	Changed bool
	Update  storage.GroupUpdate
	Body    string
}

// Of is the group c is, as the rules see it.
func Of(c storage.Conversation) Group {
	members := make(map[string]bool, len(c.Members))
	for _, m := range c.Members {
		members[m] = true
	}
	return Group{Kind: c.Kind, Name: c.Name, CreatedBy: c.CreatedBy, Members: members, Admin: c.Admin, LastSeq: c.LastSeq}
}

// admin is g's GroupAdmin as a copy the caller may change: the stored one, or for a group nobody
// has run yet its creator as owner; see succeed for a group whose owner is gone.
func (g Group) admin() storage.GroupAdmin {
	if g.Admin == nil {
		return storage.GroupAdmin{Owner: g.CreatedBy}
	}
	a := *g.Admin
	a.Admins, a.Banned, a.Pins = slices.Clone(a.Admins), slices.Clone(a.Banned), slices.Clone(a.Pins)
	a.Muted = maps.Clone(a.Muted)
	a.Invites, a.Reports = slices.Clone(a.Invites), slices.Clone(a.Reports)
	if g.Members != nil { // nil: the view, which knows the members as a list (View)
		succeed(&a, func(u string) bool { return g.Members[u] })
	}
	return a
}

// succeed gives a group whose owner is no longer a member (their account was deleted: an owner
// never leaves or is removed otherwise) the first appointed admin still in it as its owner, so
// the group can still be run; with no admin left it has none.
func succeed(a *storage.GroupAdmin, isMember func(string) bool) {
	if isMember(a.Owner) {
		return
	}
	a.Owner = ""
	if i := slices.IndexFunc(a.Admins, isMember); i >= 0 {
		a.Owner = a.Admins[i]
		a.Admins = slices.Delete(a.Admins, i, i+1)
	}
}

// RoleOf is user's role in g (protocol.RoleOwner, RoleAdmin or RoleMember), "" for one who is not
// a member and for every user of a DM.
func RoleOf(g Group, user string) string {
	if g.Kind != storage.KindGroup || !g.Members[user] {
		return ""
	}
	a := g.admin()
	switch {
	case a.Owner == user:
		return protocol.RoleOwner
	case slices.Contains(a.Admins, user):
		return protocol.RoleAdmin
	default:
		return protocol.RoleMember
	}
}

// IsAdmin reports whether user runs g: its owner or one of its admins.
func IsAdmin(g Group, user string) bool {
	r := RoleOf(g, user)
	return r == protocol.RoleOwner || r == protocol.RoleAdmin
}

func forbid(format string, args ...any) error {
	return protocol.Refuse(protocol.ErrForbidden, format, args...)
}

// CheckSend refuses a message of sender that g's settings do not allow now: in an announcement
// group only admins post; a muted member waits out the mute; in slow mode a member's next message
// waits until SlowModeSeconds after lastSent (their previous one, the zero time for none), refused
// as rate_limited with how long to wait. Admins are exempt from all three.
func CheckSend(g Group, sender string, lastSent, now time.Time) error {
	if g.Kind != storage.KindGroup || g.Admin == nil || IsAdmin(g, sender) {
		return nil
	}
	a := g.Admin
	if a.Announcement {
		return forbid("only admins post in this announcement group")
	}
	if until, ok := a.Muted[sender]; ok && now.Before(until) {
		return forbid("you are muted in this group until %s", until.UTC().Format(time.RFC3339))
	}
	if a.SlowModeSeconds > 0 && !lastSent.IsZero() {
		if wait := lastSent.Add(time.Duration(a.SlowModeSeconds) * time.Second).Sub(now); wait > 0 {
			err := protocol.Refuse(protocol.ErrRateLimited, "slow mode: one message every %d seconds", a.SlowModeSeconds)
			err.RetryAfter = wait
			return err
		}
	}
	return nil
}

// Apply checks op, asked by actor (a member of g), against the rules and returns what it
// changes. A refusal is a *protocol.Error: forbidden with the reason (the actor's role does not
// allow it, the target is banned, the owner may not leave yet), not_found for a target who is not
// a member or a message that does not exist, limit_exceeded past MaxPins.
func Apply(g Group, actor string, op Op, now time.Time) (Result, error) {
	if g.Kind != storage.KindGroup {
		if op.Action == OpAdd || op.Action == OpRemove {
			return Result{}, forbid("members of a DM cannot change")
		}
		return Result{}, forbid("a DM has no roles or settings")
	}
	a := g.admin()
	r := Result{Update: storage.GroupUpdate{Name: g.Name}}
	target := ""
	if len(op.Users) > 0 {
		target = op.Users[0]
	}
	say := func(format string, args ...any) (Result, error) {
		r.Changed = true
		if format != "" {
			r.Body = actor + " " + fmt.Sprintf(format, args...)
		}
		prune(&a, now)
		r.Update.Admin = a
		return r, nil
	}
	switch {
	case op.Action == OpRemove && target == actor:
		return leave(g, &a, actor, say)
	case op.Action == OpJoin:
		return join(g, &a, actor, op.ID, now, say)
	case op.Action == OpReport:
		return report(g, &a, actor, op, now, say)
	}
	if !IsAdmin(g, actor) {
		return Result{}, forbid("only the group's admins can %s", what[op.Action])
	}
	owner := a.Owner == actor
	switch op.Action {
	case OpAdd:
		for _, u := range op.Users {
			if slices.Contains(a.Banned, u) {
				return Result{}, forbid("%s is banned from this group", u)
			}
			if !g.Members[u] && !slices.Contains(r.Update.Add, u) {
				r.Update.Add = append(r.Update.Add, u)
			}
		}
		if len(r.Update.Add) == 0 {
			return Result{}, nil
		}
		return say("added %s", strings.Join(r.Update.Add, ", "))
	case OpRemove, protocol.ActionBan:
		if op.Action == protocol.ActionBan && !g.Members[target] {
			if slices.Contains(a.Banned, target) {
				return Result{}, nil
			}
			a.Banned = append(a.Banned, target)
			return say("banned %s", target)
		}
		if err := canModerate(g, a, owner, target); err != nil {
			return Result{}, err
		}
		r.Update.Remove = target
		dropRoles(&a, target)
		if op.Action == OpRemove {
			return say("removed %s", target)
		}
		a.Banned = append(a.Banned, target)
		return say("banned %s", target)
	case protocol.ActionUnban:
		if !slices.Contains(a.Banned, target) {
			return Result{}, nil
		}
		a.Banned = slices.DeleteFunc(a.Banned, func(u string) bool { return u == target })
		return say("unbanned %s", target)
	case protocol.ActionPromote, protocol.ActionDemote, protocol.ActionTransfer:
		return appoint(g, &a, actor, op.Action, target, say)
	case protocol.ActionRename:
		if g.Name == op.Text {
			return Result{}, nil
		}
		r.Update.Name = op.Text
		return say("renamed the group to %q", op.Text)
	case protocol.ActionSetTopic:
		if a.Topic == op.Text {
			return Result{}, nil
		}
		a.Topic = op.Text
		if op.Text == "" {
			return say("cleared the topic")
		}
		return say("set the topic to %q", op.Text)
	case protocol.ActionAnnouncement:
		if a.Announcement == op.Enabled {
			return Result{}, nil
		}
		a.Announcement = op.Enabled
		if op.Enabled {
			return say("made this an announcement group: only admins post")
		}
		return say("let every member post again")
	case protocol.ActionSlowMode:
		if a.SlowModeSeconds == op.Seconds {
			return Result{}, nil
		}
		a.SlowModeSeconds = op.Seconds
		if op.Seconds == 0 {
			return say("turned slow mode off")
		}
		return say("turned slow mode on: one message every %d seconds", op.Seconds)
	case protocol.ActionMute:
		if err := canModerate(g, a, owner, target); err != nil {
			return Result{}, err
		}
		if slices.Contains(a.Admins, target) { // admins always may send: a mute would not hold
			return Result{}, forbid("%s is an admin, and admins are never muted: make them a member first", target)
		}
		if a.Muted == nil {
			a.Muted = make(map[string]time.Time)
		}
		a.Muted[target] = now.Add(time.Duration(op.Seconds) * time.Second).UTC().Truncate(time.Millisecond)
		return say("muted %s for %d seconds", target, op.Seconds)
	case protocol.ActionUnmute:
		if _, ok := a.Muted[target]; !ok {
			return Result{}, nil
		}
		delete(a.Muted, target)
		return say("unmuted %s", target)
	case protocol.ActionPin, protocol.ActionUnpin:
		return pin(g, &a, op, say)
	case protocol.ActionCreateInvite, protocol.ActionRevokeInvite:
		return invite(&a, actor, op, now, say)
	case protocol.ActionDismissReport:
		n := len(a.Reports)
		a.Reports = slices.DeleteFunc(a.Reports, func(r storage.Report) bool { return r.ID == op.ID })
		if len(a.Reports) == n {
			return Result{}, protocol.Refuse(protocol.ErrNotFound, "no open report %s", op.ID)
		}
		return say("")
	default:
		return Result{}, fmt.Errorf("unknown group change %q", op.Action)
	}
}

// leave takes the actor out of g: anyone may leave but its owner, while others remain.
func leave(g Group, a *storage.GroupAdmin, actor string, say func(string, ...any) (Result, error)) (Result, error) {
	if a.Owner == actor && len(g.Members) > 1 {
		return Result{}, forbid("hand the group over to another member before leaving: you are its owner")
	}
	dropRoles(a, actor)
	r, err := say("left")
	r.Update.Remove = actor
	return r, err
}

// appoint makes target an admin (promote), a plain member again (demote), or the owner
// (transfer, which leaves the old owner an admin): the owner's choices alone.
func appoint(g Group, a *storage.GroupAdmin, actor, action, target string, say func(string, ...any) (Result, error)) (Result, error) {
	if a.Owner != actor {
		return Result{}, forbid("only the group's owner can %s", what[action])
	}
	if !g.Members[target] {
		return Result{}, protocol.Refuse(protocol.ErrNotFound, "%s is not in this group", target)
	}
	if target == actor {
		return Result{}, forbid("you are the group's owner")
	}
	isAdmin := slices.Contains(a.Admins, target)
	switch action {
	case protocol.ActionPromote:
		if isAdmin {
			return Result{}, nil
		}
		a.Admins = append(a.Admins, target)
		delete(a.Muted, target)
		return say("made %s an admin", target)
	case protocol.ActionDemote:
		if !isAdmin {
			return Result{}, nil
		}
		dropRoles(a, target)
		return say("made %s a member", target)
	default:
		dropRoles(a, target)
		delete(a.Muted, target)
		a.Owner, a.Admins = target, append(a.Admins, actor)
		return say("handed the group over to %s", target)
	}
}

// pin pins or unpins message op.Seq, up to protocol.MaxPins.
func pin(g Group, a *storage.GroupAdmin, op Op, say func(string, ...any) (Result, error)) (Result, error) {
	if op.Seq < 1 || op.Seq > g.LastSeq {
		return Result{}, protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", op.Seq)
	}
	pinned := slices.Contains(a.Pins, op.Seq)
	if op.Action == protocol.ActionUnpin {
		if !pinned {
			return Result{}, nil
		}
		a.Pins = slices.DeleteFunc(a.Pins, func(s int64) bool { return s == op.Seq })
		return say("unpinned message %d", op.Seq)
	}
	if pinned {
		return Result{}, nil
	}
	if len(a.Pins) >= protocol.MaxPins {
		return Result{}, protocol.Refuse(protocol.ErrLimit, "this group has %d pinned messages, the most there may be", len(a.Pins))
	}
	a.Pins = append(a.Pins, op.Seq)
	return say("pinned message %d", op.Seq)
}

// canModerate says whether the actor (an admin, owner says whether the owner) may remove, ban or
// mute target: a member, not the owner, and an admin only by the owner.
func canModerate(g Group, a storage.GroupAdmin, owner bool, target string) error {
	switch {
	case !g.Members[target]:
		return protocol.Refuse(protocol.ErrNotFound, "%s is not in this group", target)
	case a.Owner == target:
		return forbid("%s is the group's owner", target)
	case slices.Contains(a.Admins, target) && !owner:
		return forbid("%s is an admin: only the group's owner can do that to an admin", target)
	}
	return nil
}

// dropRoles makes user hold no role but member.
func dropRoles(a *storage.GroupAdmin, user string) {
	a.Admins = slices.DeleteFunc(a.Admins, func(u string) bool { return u == user })
}

// prune forgets the mutes that are over and the invite links that no longer join, so the
// stored lists do not grow.
func prune(a *storage.GroupAdmin, now time.Time) {
	maps.DeleteFunc(a.Muted, func(_ string, until time.Time) bool { return !now.Before(until) })
	if len(a.Muted) == 0 {
		a.Muted = nil
	}
	a.Invites = slices.DeleteFunc(a.Invites, func(i storage.Invite) bool { return inviteSpent(i, now) != "" })
}

// inviteSpent says why link i no longer joins at now: "" while it does.
func inviteSpent(i storage.Invite, now time.Time) string {
	switch {
	case i.ExpiresAt != nil && !now.Before(*i.ExpiresAt):
		return "this invite link has expired"
	case i.MaxUses > 0 && i.Uses >= i.MaxUses:
		return "this invite link has been used up"
	}
	return ""
}

// FindInvite is group c's invite link token as it stands at now, or a not_found refusal that
// says why it does not join (none such, revoked, expired, used up).
func FindInvite(c storage.Conversation, token string, now time.Time) (storage.Invite, error) {
	if c.Kind == storage.KindGroup && c.Admin != nil {
		for _, i := range c.Admin.Invites {
			if i.Token != token {
				continue
			}
			if why := inviteSpent(i, now); why != "" {
				return storage.Invite{}, protocol.Refuse(protocol.ErrNotFound, "%s", why)
			}
			return i, nil
		}
	}
	return storage.Invite{}, protocol.Refuse(protocol.ErrNotFound, "no such invite link: it may have been revoked")
}

// join adds actor by invite link token, unless they are banned; a member already is left as is.
func join(g Group, a *storage.GroupAdmin, actor, token string, now time.Time, say func(string, ...any) (Result, error)) (Result, error) {
	i, err := FindInvite(storage.Conversation{Kind: g.Kind, Admin: a}, token, now)
	switch {
	case err != nil:
		return Result{}, err
	case slices.Contains(a.Banned, actor):
		return Result{}, forbid("you are banned from this group")
	case g.Members[actor]:
		return Result{}, nil
	}
	at := slices.IndexFunc(a.Invites, func(x storage.Invite) bool { return x.Token == i.Token })
	a.Invites[at].Uses++
	r, err := say("joined with an invite link")
	r.Update.Add = []string{actor}
	return r, err
}

// invite creates or revokes an invite link (an admin's), up to protocol.MaxInvites live ones.
func invite(a *storage.GroupAdmin, actor string, op Op, now time.Time, say func(string, ...any) (Result, error)) (Result, error) {
	at := slices.IndexFunc(a.Invites, func(i storage.Invite) bool { return i.Token == op.ID })
	if op.Action == protocol.ActionRevokeInvite {
		if at < 0 {
			return Result{}, nil
		}
		a.Invites = slices.Delete(a.Invites, at, at+1)
		return say("revoked an invite link")
	}
	if at >= 0 {
		return Result{}, nil
	}
	prune(a, now)
	if len(a.Invites) >= protocol.MaxInvites {
		return Result{}, protocol.Refuse(protocol.ErrLimit, "this group has %d invite links, the most there may be", len(a.Invites))
	}
	i := storage.Invite{Token: op.ID, CreatedBy: actor, CreatedAt: now, MaxUses: op.MaxUses}
	if op.Seconds > 0 {
		expires := now.Add(time.Duration(op.Seconds) * time.Second)
		i.ExpiresAt = &expires
	}
	a.Invites = append(a.Invites, i)
	return say("created an invite link")
}

// report records a member's report of message op.Seq for the admins, up to
// protocol.MaxOpenReports; a member's second report of one message changes nothing.
func report(g Group, a *storage.GroupAdmin, actor string, op Op, now time.Time, say func(string, ...any) (Result, error)) (Result, error) {
	if op.Seq < 1 || op.Seq > g.LastSeq {
		return Result{}, protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", op.Seq)
	}
	if slices.ContainsFunc(a.Reports, func(r storage.Report) bool { return r.Seq == op.Seq && r.Reporter == actor }) {
		return Result{}, nil
	}
	if len(a.Reports) >= protocol.MaxOpenReports {
		return Result{}, protocol.Refuse(protocol.ErrLimit, "this group has %d open reports, the most there may be", len(a.Reports))
	}
	a.Reports = append(a.Reports, storage.Report{ID: op.ID, Seq: op.Seq, Reporter: actor, Reason: op.Text, CreatedAt: now})
	return say("")
}

// what names an action for a refusal: "only the group's admins can <what>".
var what = map[string]string{
	OpAdd: "add members", OpRemove: "remove members", protocol.ActionBan: "ban members",
	protocol.ActionUnban: "unban members", protocol.ActionMute: "mute members", protocol.ActionUnmute: "unmute members",
	protocol.ActionPromote: "appoint admins", protocol.ActionDemote: "appoint admins", protocol.ActionTransfer: "hand the group over",
	protocol.ActionRename: "rename the group", protocol.ActionSetTopic: "set the topic", protocol.ActionAnnouncement: "change who may post",
	protocol.ActionSlowMode: "change slow mode", protocol.ActionPin: "pin messages", protocol.ActionUnpin: "unpin messages",
	protocol.ActionCreateInvite: "create invite links", protocol.ActionRevokeInvite: "revoke invite links",
	protocol.ActionDismissReport: "dismiss reports",
}

// View is how group c is run, as its members see it in the conversation view at now (mutes
// that are over left out); nil for a DM.
func View(c storage.Conversation, now time.Time) *protocol.GroupInfo {
	if c.Kind != storage.KindGroup {
		return nil
	}
	a := Group{CreatedBy: c.CreatedBy, Admin: c.Admin}.admin()
	isMember := func(u string) bool { return slices.Contains(c.Members, u) }
	succeed(&a, isMember)
	a.Admins = slices.DeleteFunc(a.Admins, func(u string) bool { return !isMember(u) }) // a deleted account's role
	v := &protocol.GroupInfo{Owner: a.Owner, Admins: a.Admins, Topic: a.Topic, Announcement: a.Announcement,
		SlowModeSeconds: a.SlowModeSeconds, Banned: a.Banned, Pins: a.Pins}
	for _, u := range slices.Sorted(maps.Keys(a.Muted)) {
		if until := a.Muted[u]; now.Before(until) {
			v.Muted = append(v.Muted, protocol.Mute{UserID: u, Until: until})
		}
	}
	return v
}

// Applied is c after u was written, as the store has it then.
func Applied(c storage.Conversation, u storage.GroupUpdate) storage.Conversation {
	c.Name = u.Name
	admin := u.Admin
	c.Admin = &admin
	c.Members = slices.Clone(c.Members)
	for _, m := range u.Add {
		if !slices.Contains(c.Members, m) {
			c.Members = append(c.Members, m)
		}
	}
	if u := u.Remove; u != "" {
		c.Members = slices.DeleteFunc(c.Members, func(m string) bool { return m == u })
	}
	return c
}
