package storage

// SetAuditBeforeRecheck makes an audit run f between its two looks at a conversation that
// differed, so a test can finish a write that was in flight at the first look.
func SetAuditBeforeRecheck(o *AuditOptions, f func(conversationID string)) { o.beforeRecheck = f }
