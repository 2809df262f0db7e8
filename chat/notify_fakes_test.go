package chat

import (
	"context"
	"maps"
)

// The fake store's notification settings, by user and conversation.

func (f *fakeStore) NotifySettings(_ context.Context, userID string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.notify[userID]), nil
}

func (f *fakeStore) SetNotify(_ context.Context, userID, conversationID, level string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notify == nil {
		f.notify = make(map[string]map[string]string)
	}
	if f.notify[userID] == nil {
		f.notify[userID] = make(map[string]string)
	}
	if level == "" {
		delete(f.notify[userID], conversationID)
	} else {
		f.notify[userID][conversationID] = level
	}
	return nil
}

// owned (conversations_part_test.go) keeps no notification settings: every conversation has the
// default.

func (o *owned) NotifySettings(context.Context, string) (map[string]string, error) {
	return map[string]string{}, nil
}

func (o *owned) SetNotify(context.Context, string, string, string) error { return nil }
