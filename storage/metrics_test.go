package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// opSample is what the store metrics say of one op: its duration samples and its errors.
type opSample struct {
	samples uint64
	errors  float64
}

// gatherOp reads the store metrics of op from reg, by their exposed names. Every op's series
// exists from the start, so it fails the test if one is missing.
func gatherOp(t *testing.T, reg *prometheus.Registry, op string) opSample {
	t.Helper()
	seconds := promtest.Read(t, reg, "chatd_store_operation_seconds", "op", op)
	failed := promtest.Read(t, reg, "chatd_store_errors_total", "op", op)
	if !seconds.Found || !failed.Found {
		t.Fatalf("op %s: no series of chatd_store_operation_seconds or chatd_store_errors_total", op)
	}
	return opSample{samples: seconds.Count, errors: failed.Value}
}

// TestMetricsCountOperationsAndFailures: every operation is timed; a failure counts as an error
// of its op, but the answers callers expect (not found, the duplicate key fencing a retried send)
// do not.
func TestMetricsCountOperationsAndFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testenv.StoreConfig(t)
	cfg.Metrics = storage.NewMetrics(reg)
	s := testenv.OpenStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(op string, want opSample) {
		t.Helper()
		if got := gatherOp(t, reg, op); got != want {
			t.Fatalf("op %s: %v duration samples and %v errors, want %v and %v", op, got.samples, got.errors, want.samples, want.errors)
		}
	}

	check("insert_messages", opSample{}) // opening the store is no operation of the callers'
	m := msg("c", 1)
	if err := s.InsertMessages(ctx, []storage.Message{m}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	check("insert_messages", opSample{samples: 1})

	// The same seq again is the unique index fencing a stale writer: an answer, not a failure.
	var dup *storage.DuplicateError
	if err := s.InsertMessages(ctx, []storage.Message{m}); !errors.As(err, &dup) {
		t.Fatalf("insert of a stored message: %v, want a DuplicateError", err)
	}
	check("insert_messages", opSample{samples: 2})
	if _, err := s.Conversation(ctx, "no-such-conversation"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("conversation that does not exist: %v, want ErrNotFound", err)
	}
	check("conversation", opSample{samples: 1})

	// An operation that cannot reach the store fails.
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := s.InsertMessages(cancelled, []storage.Message{msg("c", 2)}); err == nil {
		t.Fatal("insert with a cancelled context succeeded")
	}
	check("insert_messages", opSample{samples: 3, errors: 1})
	if _, err := s.Conversation(cancelled, "c"); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("conversation with a cancelled context: %v, want a failure", err)
	}
	check("conversation", opSample{samples: 2, errors: 1})
	check("message_range", opSample{})
}
