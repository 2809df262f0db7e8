package storage

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// op names one store operation in the op label of the store metrics: one per exported Store
// method, in snake case. The set is fixed here, so the label's values are known in advance.
type op string

// The store operations.
const (
	opPing                 = op("ping")
	opInsertMessages       = op("insert_messages")
	opMessageByClientID    = op("message_by_client_id")
	opRecoverSeq           = op("recover_seq")
	opMessageRange         = op("message_range")
	opExplainMessagePage   = op("explain_message_page")
	opTombstoneSender      = op("tombstone_sender")
	opSealBuckets          = op("seal_buckets")
	opMigrate              = op("migrate")
	opUpdateMessages       = op("update_messages")
	opChangedMessages      = op("changed_messages")
	opRecordDeleted        = op("record_deleted")
	opEnsureConversation   = op("ensure_conversation")
	opConversation         = op("conversation")
	opConversationsOf      = op("conversations_of")
	opAdvanceCounters      = op("advance_counters")
	opAddMembers           = op("add_members")
	opRemoveMember         = op("remove_member")
	opUpdateGroup          = op("update_group")
	opHideConversation     = op("hide_conversation")
	opAdvanceCursors       = op("advance_cursors")
	opCursorsOf            = op("cursors_of")
	opCountReaders         = op("count_readers")
	opCountDelivered       = op("count_delivered")
	opReaders              = op("readers")
	opEnsureUser           = op("ensure_user")
	opReviveUser           = op("revive_user")
	opRevokeTokens         = op("revoke_tokens")
	opUser                 = op("user")
	opMissingUsers         = op("missing_users")
	opSetHideReceipts      = op("set_hide_receipts")
	opSetHidePresence      = op("set_hide_presence")
	opRecordPresence       = op("record_presence")
	opSetLastSeen          = op("set_last_seen")
	opPresenceOf           = op("presence_of")
	opForgetNodePresence   = op("forget_node_presence")
	opBlock                = op("block")
	opUnblock              = op("unblock")
	opBlocksOf             = op("blocks_of")
	opBlocked              = op("blocked")
	opBlockedWith          = op("blocked_with")
	opDeleteAccount        = op("delete_account")
	opBackfill             = op("backfill")
	opAudit                = op("audit")
	opSetName              = op("set_name")
	opProfiles             = op("profiles")
	opFindUsers            = op("find_users")
	opRebuildMemberships   = op("rebuild_memberships")
	opRebuildBlockLists    = op("rebuild_block_lists")
	opRebuildPresenceNodes = op("rebuild_presence_nodes")
	// Web Push (push.go).
	opSavePushSubscription   = op("save_push_subscription")
	opDeletePushSubscription = op("delete_push_subscription")
	opPushSubscriptionsOf    = op("push_subscriptions_of")
	opPushSettingsOf         = op("push_settings_of")
	opSetPushSettings        = op("set_push_settings")
	opPushNoticeOf           = op("push_notice_of")
	opSavePushNotice         = op("save_push_notice")
	opDeletePushNotice       = op("delete_push_notice")
	opCursorOf               = op("cursor_of")
	// Webhooks (webhooks.go).
	opWebhooksOf        = op("webhooks_of")
	opSetWebhooks       = op("set_webhooks")
	opWebhookCursorOf   = op("webhook_cursor_of")
	opSaveWebhookCursor = op("save_webhook_cursor")
	// Bots (bots.go).
	opIssueBotToken = op("issue_bot_token")
	opBotTokenOf    = op("bot_token_of")
	// Attachments' records (uploads.go).
	opInsertUpload     = op("insert_upload")
	opUploads          = op("uploads")
	opAttachUploads    = op("attach_uploads")
	opDeleteUploads    = op("delete_uploads")
	opUploadsOfAccount = op("uploads_of_account")
	opUploadSweep      = op("upload_sweep")
	opSetUploadSweep   = op("set_upload_sweep")
)

var ops = []op{
	opPing, opInsertMessages, opMessageByClientID, opRecoverSeq, opMessageRange, opExplainMessagePage, opTombstoneSender, opSealBuckets, opMigrate, opUpdateMessages,
	opChangedMessages, opRecordDeleted, opEnsureConversation, opConversation, opConversationsOf, opAdvanceCounters, opAddMembers, opRemoveMember, opUpdateGroup,
	opHideConversation, opAdvanceCursors, opCursorsOf, opCountReaders, opCountDelivered, opReaders, opEnsureUser, opReviveUser,
	opRevokeTokens, opUser, opMissingUsers, opSetHideReceipts, opSetHidePresence, opRecordPresence,
	opSetLastSeen, opPresenceOf, opForgetNodePresence, opBlock, opUnblock, opBlocksOf, opBlocked,
	opBlockedWith, opDeleteAccount, opBackfill, opAudit, opSetName, opProfiles, opFindUsers,
	opRebuildMemberships, opRebuildBlockLists, opRebuildPresenceNodes,
	opSavePushSubscription, opDeletePushSubscription, opPushSubscriptionsOf, opPushSettingsOf, opSetPushSettings,
	opPushNoticeOf, opSavePushNotice, opDeletePushNotice, opCursorOf,
	opWebhooksOf, opSetWebhooks, opWebhookCursorOf, opSaveWebhookCursor, opIssueBotToken, opBotTokenOf,
	opInsertUpload, opUploads, opAttachUploads, opDeleteUploads, opUploadsOfAccount, opUploadSweep, opSetUploadSweep,
}

// Metrics are the store instruments: how long each operation takes and how often it fails. An
// operation made of others (DeleteAccount, Backfill, Audit, ReviveUser) is recorded as itself and
// as each of the others it calls. A nil *Metrics records nothing, so tests and tools need not
// build one.
type Metrics struct {
	seconds *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

// NewMetrics creates the store instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		seconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "chatd_store_operation_seconds",
			Help: "Duration of one store operation (one exported Store method, all its round trips), failed ones included, by op.",
			// A healthy round trip is under a millisecond; DefaultOperationTimeout is 10 s.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"op"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_store_errors_total",
			Help: "Store operations that failed, by op. Answers the caller treats as normal are not failures: " +
				"not found (ErrNotFound), a deleted account (ErrDeleted) and a duplicate key on an insert (DuplicateError, the unique index fencing a retried send).",
		}, []string{"op"}),
	}
	// Every op's series exists from the start, so a rate over an op not run yet is 0, not absent.
	for _, o := range ops {
		m.seconds.WithLabelValues(string(o))
		m.errors.WithLabelValues(string(o))
	}
	return m
}

// observe records one operation that started at start and ended with *err. Methods call it
// deferred, on their named error result: defer s.metrics.observe(opX, time.Now(), &err).
func (m *Metrics) observe(o op, start time.Time, err *error) {
	if m == nil {
		return
	}
	m.seconds.WithLabelValues(string(o)).Observe(time.Since(start).Seconds())
	if failed(*err) {
		m.errors.WithLabelValues(string(o)).Inc()
	}
}

// failed reports whether err is a failure rather than an answer: not found, a deleted account and
// a duplicate key on an insert are what callers expect and branch on.
func failed(err error) bool {
	var dup *DuplicateError
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrDeleted), errors.As(err, &dup):
		return false
	}
	return true
}
