package logtest_test

import (
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/testenv/logtest"
)

func TestBufferLines(t *testing.T) {
	var buf logtest.Buffer
	log := zerolog.New(&buf)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Warn().Int("i", i).Msg("cut") })
	}
	wg.Wait()
	log.Info().Msg("other")
	if got := buf.Lines(t, "cut"); len(got) != 8 || got[0]["level"] != "warn" {
		t.Errorf("lines of cut: %v; want 8 at warn", got)
	}
	if got := buf.Lines(t, ""); len(got) != 9 {
		t.Errorf("every line: %v; want 9", got)
	}
}
