package push

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// The kinds of Payload.
const (
	// PayloadMessage shows new messages of a conversation.
	PayloadMessage = "message"
	// PayloadWithdraw closes the conversation's notification: its user read it elsewhere.
	PayloadWithdraw = "withdraw"
)

// Payload is the JSON a notification carries, encrypted to the device (docs/PROTOCOL.md, "Web
// Push"). A conversation's notifications and their withdrawal share Tag (the service worker's
// notification tag) and the push Topic, so each replaces the one before, on the device and in
// the push service's queue alike.
type Payload struct {
	Type           string `json:"type"`
	ConversationID string `json:"conversationId"`
	Tag            string `json:"tag"`
	// Seq is the newest seq a message notification shows, or the read seq a withdrawal covers.
	Seq int64 `json:"seq"`
	// FirstUnreadSeq is where a click opens the conversation; Count how many messages are unread
	// there, up to Seq (as the page's badge counts them).
	FirstUnreadSeq int64 `json:"firstUnreadSeq,omitempty"`
	Count          int64 `json:"count,omitempty"`
	// ConversationName is the group's name or, in a DM, the other member's display name.
	ConversationName string `json:"conversationName,omitempty"`
	SenderID         string `json:"senderId,omitempty"`
	SenderName       string `json:"senderName,omitempty"`
	// Body is the start of the newest message; empty when its user turned previews off.
	Body string `json:"body,omitempty"`
}

// deliver works out the notification of w's messages for each member with a device and no live
// connection, and sends it. When nobody the owner had as a member has a device (the cache knows,
// most of the time), it reads nothing.
func (n *Notifier) deliver(ctx context.Context, w *window) {
	sctx, cancel := storeCtx(ctx)
	defer cancel()
	msgs := slices.DeleteFunc(slices.Clone(w.msgs), func(m protocol.Message) bool { return w.deleted[m.Seq] })
	if w.members != nil {
		devices, err := n.devicesOf(sctx, candidates(w.members, msgs))
		if err != nil {
			n.log.Warn().Err(err).Str("conversation", w.conversationID).Msg("read push subscriptions")
			return
		}
		if len(devices) == 0 {
			return
		}
	}
	conv, err := n.store.Conversation(sctx, w.conversationID)
	if err != nil {
		n.log.Warn().Err(err).Str("conversation", w.conversationID).Msg("read conversation to notify")
		return
	}
	deleted := make(map[int64]bool, len(conv.DeletedSeqs)) // before the window, or since it ended
	for _, s := range conv.DeletedSeqs {
		deleted[s] = true
	}
	msgs = slices.DeleteFunc(msgs, func(m protocol.Message) bool { return deleted[m.Seq] })
	who := candidates(conv.Members, msgs)
	if len(who) == 0 {
		return
	}
	devices, err := n.devicesOf(sctx, who)
	if err != nil || len(devices) == 0 {
		if err != nil {
			n.log.Warn().Err(err).Str("conversation", conv.ID).Msg("read push subscriptions")
		}
		return
	}
	presence, err := n.store.PresenceOf(sctx, slices.Collect(maps.Keys(devices)))
	if err != nil {
		n.log.Warn().Err(err).Str("conversation", conv.ID).Msg("read presence to notify")
		return
	}
	for _, user := range slices.Sorted(maps.Keys(devices)) {
		if n.online(presence[user]) {
			continue
		}
		if err := n.notify(ctx, conv, user, devices[user], msgs); err != nil {
			n.log.Warn().Err(err).Str("conversation", conv.ID).Str("user", user).Msg("notify")
		}
	}
}

// candidates are the members who did not send every one of msgs: those who may be notified.
func candidates(members []string, msgs []protocol.Message) []string {
	var out []string
	for _, u := range members {
		if slices.ContainsFunc(msgs, func(m protocol.Message) bool { return m.SenderID != u }) {
			out = append(out, u)
		}
	}
	return out
}

// online reports whether a live node holds a connection of the user.
func (n *Notifier) online(p storage.Presence) bool {
	return slices.ContainsFunc(p.Nodes, func(node string) bool {
		return node == n.cfg.NodeID || (n.cfg.Nodes != nil && n.cfg.Nodes.Alive(node))
	})
}

// hears returns how much of a conversation a user is notified of: their notify setting for it
// (set_notify; protocol.NotifyAll when none is stored), except that a conversation they deleted
// for themselves and have not read since (its cursor's HiddenSeq at or past its ReadSeq) is
// protocol.NotifyNothing, as the page shows nothing of it either.
func hears(notify map[string]string, cur storage.Cursor) string {
	if cur.HiddenSeq > 0 && cur.HiddenSeq >= cur.ReadSeq {
		return protocol.NotifyNothing
	}
	if level := notify[cur.ConversationID]; level != "" {
		return level
	}
	return protocol.NotifyAll
}

// notify sends user's devices the notification of msgs they should see: not their own, not of a
// sender they block, none they have read or were shown already; nothing if they hear nothing of
// the conversation, and only the messages that mention them if they hear only mentions.
func (n *Notifier) notify(ctx context.Context, conv storage.Conversation, user string, devices []storage.PushSubscription, msgs []protocol.Message) error {
	sctx, cancel := storeCtx(ctx)
	defer cancel()
	notify, err := n.store.NotifySettings(sctx, user)
	if err != nil {
		return err
	}
	cur, err := n.store.CursorOf(sctx, user, conv.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil // no longer a member
	}
	level := hears(notify, cur)
	if err != nil || level == protocol.NotifyNothing {
		return err
	}
	blocked, err := n.store.BlocksOf(sctx, user)
	if err != nil {
		return err
	}
	notice, err := n.store.PushNoticeOf(sctx, user, conv.ID)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	readSeq := conv.ReadSeq(user, cur)
	shown := max(readSeq, notice.ToSeq)
	fresh := slices.DeleteFunc(slices.Clone(msgs), func(m protocol.Message) bool {
		return m.Seq <= shown || m.SenderID == user || slices.Contains(blocked, m.SenderID) ||
			(level == protocol.NotifyMentions && !slices.Contains(m.Mentions, user))
	})
	if len(fresh) == 0 {
		return nil
	}
	set, err := n.store.PushSettingsOf(sctx, user)
	if err != nil {
		return err
	}
	// The newest message they should see; with mentions only, the newest that mentions them.
	// Count stays the unread count up to it, and a click opens at the first unread, as the
	// conversation's badge and the page do.
	last := fresh[len(fresh)-1]
	p := Payload{Type: PayloadMessage, ConversationID: conv.ID, Tag: conv.ID, Seq: last.Seq,
		FirstUnreadSeq: readSeq + 1, Count: storage.Unread(last.Seq, readSeq, conv.DeletedSeqs), SenderID: last.SenderID}
	profiles, err := n.store.Profiles(sctx, append([]string{last.SenderID}, last.Mentions...))
	if err != nil {
		return err
	}
	nameOf := func(id string) string { // a user's display name, or their id when they set none
		for _, u := range profiles {
			if u.ID == id && u.Name != "" {
				return u.Name
			}
		}
		return id
	}
	p.SenderName = nameOf(last.SenderID)
	p.ConversationName = conv.Name
	if conv.Kind == protocol.ConversationDM {
		p.ConversationName = p.SenderName
	}
	if set.Preview {
		p.Body = truncate(message.ShowMentions(last.Body, last.Mentions, nameOf), previewBytes)
	}
	if !n.sendAll(ctx, devices, p) {
		return nil
	}
	return n.store.SavePushNotice(sctx, storage.PushNotice{UserID: user, ConversationID: conv.ID,
		ToSeq: last.Seq, SentAt: time.Now().UTC()})
}

// truncate cuts s to at most limit bytes on a rune boundary.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	for limit > 0 && !utf8.RuneStart(s[limit]) {
		limit--
	}
	return s[:limit]
}

// topic is the push Topic of a conversation's notifications: RFC 8030 allows 32 characters of
// base64url, and a conversation id may be longer, so it is a digest of the id.
func topic(conversationID string) string {
	sum := sha256.Sum256([]byte(conversationID))
	return base64.RawURLEncoding.EncodeToString(sum[:24])
}

// sendAll sends p to every device and reports whether any of them took it.
func (n *Notifier) sendAll(ctx context.Context, devices []storage.PushSubscription, p Payload) bool {
	data, err := json.Marshal(p)
	if err != nil {
		n.log.Error().Err(err).Msg("encode push payload")
		return false
	}
	took := false
	for _, d := range devices {
		if n.send(ctx, d, data, topic(p.ConversationID)) {
			took = true
		}
	}
	return took
}

// send delivers one encrypted payload to one device, retrying a push service that is overloaded
// or failing (429, 5xx, no answer) with a doubling backoff, and removes the subscription when the
// push service says it is gone (404, 410).
func (n *Notifier) send(ctx context.Context, d storage.PushSubscription, data []byte, topic string) bool {
	sub := &webpush.Subscription{Endpoint: d.Endpoint, Keys: webpush.Keys{P256dh: d.P256dh, Auth: d.Auth}}
	opts := &webpush.Options{HTTPClient: n.http, Topic: topic, TTL: int(n.cfg.TTL / time.Second), Urgency: webpush.UrgencyHigh,
		// webpush-go prefixes "mailto:" itself unless the subject is an https: URL.
		Subscriber: strings.TrimPrefix(n.cfg.Subject, "mailto:"), VAPIDPublicKey: n.cfg.VAPIDPublicKey, VAPIDPrivateKey: n.cfg.VAPIDPrivateKey}
	wait := n.cfg.Backoff
	for attempt := 1; ; attempt++ {
		status := 0
		resp, err := webpush.SendNotificationWithContext(ctx, data, sub, opts)
		if err == nil {
			status = resp.StatusCode
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			_ = resp.Body.Close()
		}
		switch {
		case status >= 200 && status < 300:
			n.cfg.Metrics.sent()
			return true
		case status == 404 || status == 410:
			n.cfg.Metrics.expired()
			sctx, cancel := storeCtx(ctx)
			defer cancel()
			if err := n.store.DeletePushSubscription(sctx, d.UserID, d.DeviceID, d.Endpoint); err != nil {
				n.log.Warn().Err(err).Str("user", d.UserID).Str("device", d.DeviceID).Msg("remove expired push subscription")
			}
			n.devicesChanged(d.UserID)
			return false
		case err == nil && status != 429 && status < 500, attempt >= n.cfg.Attempts:
			n.cfg.Metrics.failed()
			n.log.Warn().Err(err).Int("status", status).Str("user", d.UserID).Str("device", d.DeviceID).Msg("push refused")
			return false
		}
		select {
		case <-time.After(wait):
			wait *= 2
		case <-ctx.Done():
			n.cfg.Metrics.failed()
			return false
		}
	}
}
