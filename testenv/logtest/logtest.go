// Package logtest collects what a component logs, for tests that check a log line was (or was
// not) written. It imports nothing of chatd, so that the internal tests of any package (server's,
// say) can use it without an import cycle.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is a log destination that any number of goroutines may write to at once: give it to
// zerolog.New. Its zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines decodes the JSON log lines written so far whose message is msg, or every line for msg
// "". A line that is not JSON fails the test.
func (b *Buffer) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if msg == "" || fields["message"] == msg {
			out = append(out, fields)
		}
	}
	return out
}
