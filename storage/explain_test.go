package storage_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestPageIsAnIndexScanOfItsSize needs a real MongoDB: FerretDB, the embedded store, has no index
// scans to show. With CHAT_TEST_MONGO_URI set it checks that a page deep in a 100,000-message
// conversation is an IXSCAN on {conversationId, seq} that examines about a page of keys.
func TestPageIsAnIndexScanOfItsSize(t *testing.T) {
	if os.Getenv(testenv.MongoURIEnv) == "" {
		t.Skip("not run: set " + testenv.MongoURIEnv + " to a real MongoDB (the embedded store has no index scans to explain)")
	}
	const total, page = 100000, 50
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conv := uuid.NewString()
	for start := 1; start <= total; start += 1000 {
		batch := make([]storage.Message, 0, 1000)
		for seq := start; seq < start+1000; seq++ {
			batch = append(batch, storage.Message{ConversationID: conv, Seq: int64(seq), SenderID: "a", Kind: protocol.KindText,
				Body: fmt.Sprint(seq), CreatedAt: time.Now(), ClientMsgID: uuid.NewString()})
		}
		if err := s.InsertMessages(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []int64{1, total / 2, total - page + 1} {
		plan, err := s.ExplainMessageRange(ctx, conv, from, from+page-1)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), `"IXSCAN"`) || !strings.Contains(plan.String(), `"conversation_seq"`) {
			t.Fatalf("page at %d is not an index scan on conversation_seq: %s", from, plan)
		}
		keys := plan.Lookup("executionStats", "totalKeysExamined").AsInt64()
		if keys > page+1 {
			t.Fatalf("page at %d examined %d keys; want about %d", from, keys, page)
		}
	}
}
