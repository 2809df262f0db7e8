package push

import (
	"context"
	"errors"
	"time"

	"github.com/chatd/chatd/storage"
)

// Read notes that a user read a conversation up to seq (on any device): a notification showing no
// more than that is withdrawn from their devices at the next pass. It never blocks.
func (n *Notifier) Read(userID, conversationID string, seq int64) {
	if seq <= 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	k := readKey{userID, conversationID}
	if seq > n.reads[k] {
		n.reads[k] = seq
	}
}

// withdrawLoop hands the reads gathered since the last pass to the workers, every WithdrawEvery,
// until Stop.
func (n *Notifier) withdrawLoop() {
	tick := time.NewTicker(n.cfg.WithdrawEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-n.ctx.Done():
			return
		}
		n.mu.Lock()
		reads := n.reads
		n.reads = make(map[readKey]int64)
		n.mu.Unlock()
		for k, seq := range reads {
			n.enqueue(func(ctx context.Context) { n.withdraw(ctx, k, seq) })
		}
	}
}

// withdraw closes the notification of a conversation on a user's devices if the read covers all
// it showed: nothing read for a user with no device (the cache knows, most of the time), one read
// by _id when no notification is showing.
func (n *Notifier) withdraw(ctx context.Context, k readKey, seq int64) {
	sctx, cancel := storeCtx(ctx)
	defer cancel()
	devices, err := n.devicesOf(sctx, []string{k.user})
	if err == nil && len(devices) == 0 {
		return
	}
	var notice storage.PushNotice
	if err == nil {
		notice, err = n.store.PushNoticeOf(sctx, k.user, k.conversation)
	}
	if errors.Is(err, storage.ErrNotFound) || (err == nil && notice.ToSeq > seq) {
		return
	}
	if err == nil {
		n.sendAll(ctx, devices[k.user], Payload{Type: PayloadWithdraw, ConversationID: k.conversation, Tag: k.conversation, Seq: seq})
		err = n.store.DeletePushNotice(sctx, k.user, k.conversation)
	}
	if err != nil {
		n.log.Warn().Err(err).Str("user", k.user).Str("conversation", k.conversation).Msg("withdraw notification")
	}
}
