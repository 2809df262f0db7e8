package hub_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/hub"
)

// countConn is a connection whose pushes only count, so a benchmark measures the hub.
type countConn struct {
	user   string
	pushes atomic.Int64
}

func (c *countConn) UserID() string                         { return c.user }
func (c *countConn) Push([]byte) bool                       { c.pushes.Add(1); return true }
func (c *countConn) PushWait(context.Context, []byte) error { c.pushes.Add(1); return nil }
func (c *countConn) PushEphemeral(string, []byte)           { c.pushes.Add(1) }

// benchFrame is a message push of a typical size.
var benchFrame = []byte(`{"type":"message","conversationId":"0b6f3c2e-9d11-4f43-9d0a-3b7a3c2e9d11","seq":42,"senderId":"alice","kind":"text","body":"hello, this is a message of a typical length","createdAt":"2026-12-02T12:00:00.123Z","clientMsgId":"5f0e7c8e-4a0b-4c3e-9f59-0e7a3c1d2b44"}`)

// newBenchHub registers users connections (one per user), each in the conversations
// convsOf(i) names, synced so nothing is held. The engine records metrics, as a node's does.
func newBenchHub(b *testing.B, users int, convsOf func(i int) []string) (*hub.Hub[*countConn, struct{}], []*countConn) {
	b.Helper()
	e := hub.New[*countConn, struct{}](hub.Config{Metrics: hub.NewMetrics(prometheus.NewRegistry())})
	conns := make([]*countConn, users)
	for i := range conns {
		c := &countConn{user: "user" + strconv.Itoa(i)}
		convs := make(map[string]int64)
		for _, id := range convsOf(i) {
			convs[id] = 0
		}
		e.Add(c, 0, struct{}{})
		for id := range convs {
			e.Join(c.user, id, 0)
		}
		if err := e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil }); err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	b.Cleanup(func() {
		for _, c := range conns {
			e.Remove(c)
		}
	})
	return e, conns
}

// BenchmarkDeliver5000 delivers one message to a conversation with 5,000 connections here: the
// cost of one large group's message on one node.
func BenchmarkDeliver5000(b *testing.B) {
	const members = 5000
	e, conns := newBenchHub(b, members, func(int) []string { return []string{"big"} })
	e.DeliverMessage("big", 1, benchFrame, time.Now()) // each connection's first message of a conversation allocates its entry
	b.ReportAllocs()
	seq := int64(1)
	for b.Loop() {
		seq++
		if !e.DeliverMessage("big", seq, benchFrame, time.Now()) {
			b.Fatal("not delivered")
		}
	}
	b.StopTimer()
	if got := conns[members-1].pushes.Load(); got != seq {
		b.Fatalf("the last connection got %d pushes, want %d", got, seq)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64((seq-1)*members), "ns/push")
}

// BenchmarkDeliverParallelConversations delivers from all cores to 1,000 conversations of 5
// connections each: deliveries of different conversations must not wait for each other.
func BenchmarkDeliverParallelConversations(b *testing.B) {
	const (
		convs   = 1000
		members = 5
	)
	ids := make([]string, convs)
	for i := range ids {
		ids[i] = "conv" + strconv.Itoa(i)
	}
	e, _ := newBenchHub(b, convs*members, func(i int) []string { return []string{ids[i/members]} })
	seqs := make([]atomic.Int64, convs)
	for i, id := range ids {
		e.DeliverMessage(id, seqs[i].Add(1), benchFrame, time.Now())
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % convs
			e.DeliverMessage(ids[i], seqs[i].Add(1), benchFrame, time.Now())
		}
	})
}
