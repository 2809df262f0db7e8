package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

func msg(conv string, seq int64) storage.Message {
	return storage.Message{ConversationID: conv, Seq: seq, SenderID: "alice", Kind: protocol.KindText,
		Body: "m", CreatedAt: time.Now().UTC(), ClientMsgID: uuid.NewString()}
}

func TestInsertStopsAtDuplicateSeq(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.InsertMessages(ctx, []storage.Message{msg("c", 1), msg("c", 2)}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	err := s.InsertMessages(ctx, []storage.Message{msg("c", 3), msg("c", 2), msg("c", 4)})
	var dup *storage.DuplicateError
	if !errors.As(err, &dup) || dup.Index != 1 {
		t.Fatalf("want duplicate at index 1, got %v", err)
	}
	got, err := s.MessageRange(ctx, "c", 1, 10)
	if err != nil {
		t.Fatalf("range: %v", err)
	}
	if len(got) != 3 || got[2].Seq != 3 {
		t.Fatalf("want seqs 1..3 stored, got %d messages", len(got))
	}
	high, err := s.RecoverSeq(ctx, "c")
	if err != nil || high != 3 {
		t.Fatalf("highest seq = %d, %v; want 3", high, err)
	}
}
