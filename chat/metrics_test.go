package chat

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/testenv/promtest"
)

// metricsService is a test service whose service and engine record into one registry.
func metricsService(t *testing.T) (*testService, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return newTestServiceWith(t, Config{Metrics: NewMetrics(reg)}, hub.Config{Metrics: hub.NewMetrics(reg)}), reg
}

// TestMetricsCountSends: an acked send moves the acks and the ack latency by one, a retry's ack
// counts again, and a refused send counts under the wire code the client gets, not as an ack.
func TestMetricsCountSends(t *testing.T) {
	ts, reg := metricsService(t)
	ts.connect("alice")
	ts.connect("bob")
	ts.connect("carol")
	dm := ts.dm("alice", "bob")

	req := SendRequest{ConversationID: dm, ClientMsgID: uuid.NewString(), Body: "hi"}
	failed := func(code string) float64 {
		return promtest.Registered(t, reg, "chatd_sends_failed_total", "code", code).Value
	}
	steps := []struct {
		name   string
		do     func() error
		acked  uint64
		code   string // of the failure counter that moves, "" for none
		failed float64
	}{
		{"a send", func() error { _, err := ts.svc.Send(ts.ctx, "alice", req); return err }, 1, "", 0},
		{"its retry", func() error { _, err := ts.svc.Send(ts.ctx, "alice", req); return err }, 2, "", 0},
		{"a send by a non-member", func() error {
			_, err := ts.svc.Send(ts.ctx, "carol", SendRequest{ConversationID: dm, ClientMsgID: uuid.NewString(), Body: "hi"})
			return err
		}, 2, protocol.CodeNotMember, 1},
		{"a send to no conversation", func() error {
			_, err := ts.svc.Send(ts.ctx, "alice", SendRequest{ConversationID: "nowhere", ClientMsgID: uuid.NewString()})
			return err
		}, 2, protocol.CodeNotMember, 2},
		{"a send the sequencer could not take", func() error {
			ts.sender.mu.Lock()
			ts.sender.fail = fmt.Errorf("owner moving: %w", protocol.ErrUnavailable)
			ts.sender.mu.Unlock()
			defer func() {
				ts.sender.mu.Lock()
				ts.sender.fail = nil
				ts.sender.mu.Unlock()
			}()
			_, err := ts.svc.Send(ts.ctx, "alice", SendRequest{ConversationID: dm, ClientMsgID: uuid.NewString()})
			return err
		}, 2, protocol.CodeUnavailable, 1},
	}
	for _, st := range steps {
		err := st.do()
		if (err != nil) != (st.code != "") {
			t.Fatalf("%s: error %v", st.name, err)
		}
		if got := promtest.Registered(t, reg, "chatd_sends_acked_total").Value; got != float64(st.acked) {
			t.Errorf("%s: chatd_sends_acked_total = %v, want %v", st.name, got, st.acked)
		}
		if got := promtest.Registered(t, reg, "chatd_send_ack_seconds").Count; got != st.acked {
			t.Errorf("%s: chatd_send_ack_seconds has %v observations, want %v", st.name, got, st.acked)
		}
		if st.code != "" {
			if got := failed(st.code); got != st.failed {
				t.Errorf("%s: chatd_sends_failed_total{code=%q} = %v, want %v", st.name, st.code, got, st.failed)
			}
		}
	}
	if got := failed(protocol.CodeInternal); got != 0 {
		t.Errorf("chatd_sends_failed_total{code=\"internal\"} = %v, want 0", got)
	}
}

// TestFailureCodesMatchTheWire: each kind of refusal is labelled with the code the server answers
// it with, and anything else as internal.
func TestFailureCodesMatchTheWire(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{protocol.ErrNotMember, protocol.CodeNotMember},
		{protocol.Refuse(protocol.ErrNotFound, "no such user"), protocol.CodeNotFound},
		{protocol.Refuse(protocol.ErrForbidden, "blocked"), protocol.CodeForbidden},
		{protocol.Refuse(protocol.ErrInvalid, "bad"), protocol.CodeInvalidField},
		{protocol.Refuse(protocol.ErrUnavailable, "retry"), protocol.CodeUnavailable},
		{protocol.Refuse(protocol.ErrRateLimited, "cap"), protocol.CodeRateLimited},
		{fmt.Errorf("send to x: %w", errors.New("store down")), protocol.CodeInternal},
	} {
		if got := failureCode(tc.err); got != tc.code {
			t.Errorf("failureCode(%v) = %q, want %q", tc.err, got, tc.code)
		}
	}
}

// TestMetricsCountHistoryPages: a page served moves the pages and their latency by one; a refused
// page moves neither.
func TestMetricsCountHistoryPages(t *testing.T) {
	ts, reg := metricsService(t)
	ts.connect("alice")
	ts.connect("carol")
	dm := ts.dm("alice", "bob")
	ts.send("alice", dm, "hi")

	if _, err := ts.svc.History(ts.ctx, "alice", dm, Anchor{}, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.svc.History(ts.ctx, "carol", dm, Anchor{}, 10); !errors.Is(err, protocol.ErrNotMember) {
		t.Fatalf("a non-member's page: %v, want %v", err, protocol.ErrNotMember)
	}
	if got := promtest.Registered(t, reg, "chatd_history_pages_total").Value; got != 1 {
		t.Errorf("chatd_history_pages_total = %v, want 1", got)
	}
	if got := promtest.Registered(t, reg, "chatd_history_page_seconds").Count; got != 1 {
		t.Errorf("chatd_history_page_seconds has %v observations, want 1", got)
	}
}

// TestMetricsCountResyncs: a resync counts once, with the messages it delivered that the bus had
// lost; those were never received from the bus, so they add no delivery latency, while a message
// that came through the bus does.
func TestMetricsCountResyncs(t *testing.T) {
	ts, reg := metricsService(t)
	ts.connect("alice")
	bob := ts.connect("bob")
	dm := ts.dm("alice", "bob")
	ts.send("alice", dm, "through the bus")
	if got := promtest.Registered(t, reg, "chatd_deliver_seconds").Count; got != 1 {
		t.Fatalf("after a message through the bus, chatd_deliver_seconds has %v observations, want 1", got)
	}
	// Stored while this node could not hear the bus.
	for i := range 3 {
		if _, err := ts.store.appendMessage(sequencer.SendRequest{ConversationID: dm, SenderID: "alice",
			ClientMsgID: uuid.NewString(), Kind: protocol.KindText, Body: fmt.Sprint("missed ", i)}); err != nil {
			t.Fatal(err)
		}
	}

	ts.svc.Resync(ts.ctx)
	ts.svc.Resync(ts.ctx) // nothing left to catch up
	if got := bob.seqs(t, dm); len(got) != 4 {
		t.Fatalf("bob saw seqs %v, want 4 of them", got)
	}
	if got := promtest.Registered(t, reg, "chatd_resyncs_total").Value; got != 2 {
		t.Errorf("chatd_resyncs_total = %v, want 2", got)
	}
	if got := promtest.Registered(t, reg, "chatd_resync_messages_total").Value; got != 3 {
		t.Errorf("chatd_resync_messages_total = %v, want 3", got)
	}
	if got := promtest.Registered(t, reg, "chatd_deliver_seconds").Count; got != 1 {
		t.Errorf("after the resync, chatd_deliver_seconds has %v observations, want still 1", got)
	}
	// Every message reached alice's connection and bob's.
	if got := promtest.Registered(t, reg, "chatd_deliveries_total").Value; got != 8 {
		t.Errorf("chatd_deliveries_total = %v, want 8 (4 messages to 2 connections)", got)
	}
}
