package session

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLifetimeCancelsItsChildren: contexts derived from a session's context end with it, and
// those that end first leave nothing registered behind (an idle socket keeps no map of them).
func TestLifetimeCancelsItsChildren(t *testing.T) {
	l := &lifetime{done: make(chan struct{})}
	var ctx context.Context = l

	finished, cancelFinished := context.WithTimeout(ctx, time.Hour)
	cancelFinished()
	stopped := context.AfterFunc(ctx, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stopping a registered AfterFunc reported false")
	}
	if l.funcs != nil {
		t.Fatalf("%d funcs still registered after every child ended", len(l.funcs))
	}
	if finished.Err() == nil {
		t.Fatal("a cancelled child is not done")
	}

	child, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	if l.Err() != nil || child.Err() != nil {
		t.Fatal("done before the lifetime ended")
	}

	l.end()
	if !errors.Is(l.Err(), context.Canceled) {
		t.Fatalf("lifetime Err = %v, want context.Canceled", l.Err())
	}
	<-child.Done()
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("child Err = %v, want context.Canceled", child.Err())
	}
	<-ran

	late, cancelLate := context.WithCancel(ctx)
	defer cancelLate()
	<-late.Done() // derived after the end: done at once
	lateRan := make(chan struct{})
	l.AfterFunc(func() { close(lateRan) })
	<-lateRan
}
