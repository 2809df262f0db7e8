package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestReconnectStormSharesStoreReads: a hundred members of one group, whose node has gone,
// reconnect at once and sync from the same seq, then each opens the group's latest page. Every
// one of them gets the whole replay and the whole page, and the store sees a handful of message
// reads, not a hundred of each: identical syncs and pages share their reads.
func TestReconnectStormSharesStoreReads(t *testing.T) {
	const members, msgs = 100, 5
	_, n, rec := monitoredNode(t, nil)
	ctx := ctxT(t, 2*time.Minute)

	names := make([]string, members)
	tokens := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprintf("storm%03d", i)
		tokens[i] = login(t, n, names[i])
	}
	alice := testenv.Connect(t, n.URL(), "alice")
	group, err := alice.CreateGroup(ctx, "storm", names)
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	for i := 1; i <= msgs; i++ {
		if _, err := alice.Send(ctx, group.ID, fmt.Sprint(i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	// As clients whose node died: all dial at once, and once they are all in, all sync at once
	// from the same seq, read the replay and open the latest page.
	rec.Reset()
	conns := make([]*client.Conn, members)
	errs := make([]error, members)
	all(members, func(i int) {
		conns[i], errs[i] = client.Dial(ctx, n.WSURL(), tokens[i], &client.Options{SkipSync: true})
	})
	for i, c := range conns {
		if c != nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("%s reconnects: %v", names[i], errs[i])
		}
	}
	began := time.Now()
	all(members, func(i int) { errs[i] = syncAndPage(ctx, conns[i], group.ID, msgs) })
	took := time.Since(began)
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", names[i], err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// A sync reads SyncLimit messages from its seq, a page the latest page; tell them apart.
	var syncReads, pageReads int
	for _, c := range rec.Commands("find", "messages") {
		if limit, _ := c.Body.Lookup("limit").AsInt64OK(); limit == chat.DefaultSyncLimit {
			syncReads++
		} else {
			pageReads++
		}
	}
	t.Logf("%d reconnected members' syncs and pages took %s and %d sync and %d page reads of messages in the store",
		members, took, syncReads, pageReads)
	// Identical syncs sent at once overlap and share; each page follows its own replay, so the
	// pages arrive spread over the syncs' finishing times and share less.
	if syncReads >= 20 {
		t.Errorf("%d identical syncs cost %d message reads in the store; want fewer than 20", members, syncReads)
	}
	if pageReads >= members/2 {
		t.Errorf("%d identical pages cost %d message reads in the store; want fewer than %d", members, pageReads, members/2)
	}
}

// all runs f(0) to f(n-1) at once and waits for them.
func all(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// syncAndPage syncs c as a client that held nothing of convID, checks that the replay brings seqs
// 1..msgs, and that the latest page holds them too.
func syncAndPage(ctx context.Context, c *client.Conn, convID string, msgs int) error {
	if _, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync, Since: map[string]int64{convID: 0}}); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	got, err := testenv.ReadMessages(c, convID, msgs, 30*time.Second)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	want := make([]int64, msgs)
	for i := range want {
		want[i] = int64(i + 1)
	}
	var seqs []int64
	for _, f := range got {
		seqs = append(seqs, f.Seq)
	}
	if !slices.Equal(seqs, want) {
		return fmt.Errorf("replayed seqs %v, want %v", seqs, want)
	}
	page, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: convID})
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	seqs = seqs[:0]
	for _, m := range page.Messages {
		seqs = append(seqs, m.Seq)
	}
	if !slices.Equal(seqs, want) {
		return fmt.Errorf("latest page holds seqs %v, want %v", seqs, want)
	}
	return nil
}
