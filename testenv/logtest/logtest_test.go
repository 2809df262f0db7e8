package logtest_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/chatd/chatd/testenv/logtest"
)

func TestBufferLines(t *testing.T) {
	var buf logtest.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&buf, `{"level":"warn","i":%d,"message":"cut"}`+"\n", i) })
	}
	wg.Wait()
	fmt.Fprintln(&buf, `{"level":"info","message":"other"}`)
	if got := buf.Lines(t, "cut"); len(got) != 8 || got[0]["level"] != "warn" {
		t.Errorf("lines of cut: %v; want 8 at warn", got)
	}
	if got := buf.Lines(t, ""); len(got) != 9 {
		t.Errorf("every line: %v; want 9", got)
	}
}
