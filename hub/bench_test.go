package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
)

// fanoutReceivers is the group the benchmark delivers to: every member has one real WebSocket on
// the one node, so one message is written to this many sockets.
const fanoutReceivers = 5000

// BenchmarkFanout5000 measures one message from send until all 5,000 other members' sockets have
// it: the sequencer's persist and publish, the hub's single encoding and 5,000 enqueues, and 5,000
// socket writes and reads over loopback. The receivers are bare WebSockets that only count
// message frames, so the figure is the server's, not a client library's.
func BenchmarkFanout5000(b *testing.B) {
	env := testenv.NewEnv(b)
	n := testenv.StartNode(b, env.NodeConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	sender := testenv.Connect(b, n.URL(), "fanout-sender")
	go func() {
		for range sender.Pushes() { // its own messages and badges; nobody needs them
		}
	}()
	names := make([]string, fanoutReceivers)
	for i := range names {
		names[i] = fmt.Sprintf("fan%04d", i)
	}
	var joined, received atomic.Int64
	allReceived := make(chan struct{}, 1)
	connectReceivers(ctx, b, n.URL(), names, func(data []byte) {
		switch {
		case bytes.HasPrefix(data, []byte(`{"type":"message"`)):
			if received.Add(1)%fanoutReceivers == 0 {
				allReceived <- struct{}{}
			}
		case bytes.HasPrefix(data, []byte(`{"type":"conversation"`)):
			joined.Add(1)
		}
	})
	group, err := sender.CreateGroup(ctx, "fan-out", names)
	if err != nil {
		b.Fatalf("create group: %v", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); joined.Load() < fanoutReceivers; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d receivers were told of the group in two minutes", joined.Load(), fanoutReceivers)
		}
	}

	// The first send loads the conversation into its partition owner; time the steady state.
	if _, err := sender.Send(ctx, group.ID, "warm-up"); err != nil {
		b.Fatalf("send: %v", err)
	}
	<-allReceived

	var ackTotal, fanoutTotal time.Duration
	iterations := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := sender.Send(ctx, group.ID, fmt.Sprintf("fan-out %d", iterations+1)); err != nil {
			b.Fatalf("send: %v", err)
		}
		ackTotal += time.Since(start)
		select {
		case <-allReceived:
		case <-time.After(time.Minute):
			b.Fatalf("message %d reached %d of %d receivers in a minute", iterations,
				received.Load()-int64((iterations+1)*fanoutReceivers), fanoutReceivers)
		}
		fanoutTotal += time.Since(start)
		iterations++
	}
	b.ReportMetric(float64(ackTotal.Milliseconds())/float64(iterations), "ms-to-ack")
	b.ReportMetric(float64(fanoutReceivers*iterations)/fanoutTotal.Seconds(), "deliveries/s")
}

// connectReceivers signs in every name and opens a bare WebSocket for it; onFrame sees every frame
// it receives. Each socket is read from the moment it opens: an unread socket cannot answer the
// server's pings and would be closed. The sockets are closed when the benchmark ends.
func connectReceivers(ctx context.Context, b *testing.B, baseURL string, names []string, onFrame func([]byte)) {
	b.Helper()
	conns := make([]*websocket.Conn, len(names))
	var readers sync.WaitGroup
	b.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow() // the node is stopped after this; a close handshake would only wait
			}
		}
		readers.Wait()
		// A session whose writer is waiting for a pong when its peer vanishes notices only at the
		// pong timeout, and the node's shutdown would give up on it first.
		time.Sleep(session.DefaultPongTimeout + time.Second)
	})
	var failed atomic.Value
	var next atomic.Int64
	var dialers sync.WaitGroup
	for range 16 {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			for i := int(next.Add(1) - 1); i < len(names); i = int(next.Add(1) - 1) {
				token, err := login(ctx, baseURL, names[i])
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				c, _, err := websocket.Dial(ctx, "ws"+baseURL[len("http"):]+"/ws?token="+token, nil)
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("dial as %s: %w", names[i], err))
					return
				}
				// The conversation frame of a 5,000-member group names every member: about 50 KB.
				c.SetReadLimit(1 << 20)
				conns[i] = c
				readers.Add(1)
				go func() {
					defer readers.Done()
					for {
						_, data, err := c.Read(context.Background())
						if err != nil {
							return
						}
						onFrame(data)
					}
				}()
			}
		}()
	}
	dialers.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("connect receivers: %v", err)
	}
}

// login signs in, trying again while the store is too busy to answer (on a loaded machine the
// embedded store can miss the ten-second deadline while thousands of users sign in).
func login(ctx context.Context, baseURL, name string) (string, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var token string
		if token, _, err = client.Login(ctx, http.DefaultClient, baseURL, name); err == nil {
			return token, nil
		}
		time.Sleep(time.Second)
	}
	return "", err
}
