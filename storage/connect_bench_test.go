package storage_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// connectReads is what a connect reads from the store: the account, the conversations, the
// cursors and the blocks (chat's load and its block list).
func connectReads(ctx context.Context, s *storage.Store, user string) (int, error) {
	if _, err := s.User(ctx, user); err != nil {
		return 0, err
	}
	convs, err := s.ConversationsOf(ctx, user)
	if err != nil {
		return 0, err
	}
	if _, err := s.CursorsOf(ctx, user); err != nil {
		return 0, err
	}
	if _, err := s.BlocksOf(ctx, user); err != nil {
		return 0, err
	}
	return len(convs), nil
}

// BenchmarkConnectReads measures the store reads of one connect of a user in 20 conversations
// with 5,000 users in 2,500 DMs stored (the issue 33 target: under 50 ms at the median on the
// embedded store).
func BenchmarkConnectReads(b *testing.B) {
	s := testenv.Store(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const users = 5000
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i := 0; i < users; i += 2 {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			a, c := fmt.Sprintf("u%04d", i), fmt.Sprintf("u%04d", i+1)
			for _, u := range []string{a, c} {
				if _, err := s.EnsureUser(ctx, storage.User{ID: u, Name: u, CreatedAt: time.Now().UTC()}); err != nil {
					b.Error(err)
				}
			}
			if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "dm-" + a, Kind: storage.KindDM,
				Members: []string{a, c}, CreatedBy: a, CreatedAt: time.Now().UTC()}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range 19 {
		if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: fmt.Sprintf("g%02d", i), Kind: storage.KindGroup,
			Members: []string{"u0000", fmt.Sprintf("u%04d", 100+i)}, CreatedBy: "u0000", CreatedAt: time.Now().UTC()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	durations := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		n, err := connectReads(ctx, s, "u0000")
		if err != nil || n != 20 {
			b.Fatalf("%d conversations, %v; want 20", n, err)
		}
		durations = append(durations, time.Since(start))
	}
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "median-ms")
}

// BenchmarkFirstConnects measures 5,000 first connects (the account created, then the connect
// reads), 16 at a time, with the presence records written in batches of 64 as a node's writer
// does (the issue 33 target: at least 1,000 connects/s on the embedded store).
func BenchmarkFirstConnects(b *testing.B) {
	s := testenv.Store(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const users, parallel = 5000, 16
	for round := 0; b.Loop(); round++ {
		start := time.Now()
		var wg sync.WaitGroup
		next := make(chan int)
		for range parallel {
			wg.Go(func() {
				for i := range next {
					u := fmt.Sprintf("r%d-u%04d", round, i)
					if _, err := s.EnsureUser(ctx, storage.User{ID: u, Name: u, CreatedAt: time.Now().UTC()}); err != nil {
						b.Error(err)
					}
					if _, err := connectReads(ctx, s, u); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Go(func() {
			for i := 0; i < users; i += 64 {
				var batch []string
				for j := i; j < min(i+64, users); j++ {
					batch = append(batch, fmt.Sprintf("r%d-u%04d", round, j))
				}
				if _, err := s.RecordPresence(ctx, "n1", batch, nil, time.Now()); err != nil {
					b.Error(err)
				}
			}
		})
		for i := range users {
			next <- i
		}
		close(next)
		wg.Wait()
		b.ReportMetric(users/time.Since(start).Seconds(), "connects/s")
	}
}
