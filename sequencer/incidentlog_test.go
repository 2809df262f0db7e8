package sequencer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/testenv/poll"
)

// TestIncidentLogLimitsAFlood floods one kind of incident: about a burst of lines is written, and
// the next line written says how many were left out, so none goes uncounted.
func TestIncidentLogLimitsAFlood(t *testing.T) {
	var out bytes.Buffer
	log := zerolog.New(&out)
	il := newIncidentLog()
	attempts := 0
	incident := func() {
		attempts++
		il.event(&log, zerolog.WarnLevel).Int("attempt", attempts).Msg("partition queue full")
	}

	for range 1000 {
		incident()
	}
	flood := incidentLines(t, &out)
	// The flood takes far less than the second a refill of incidentsPerSecond lines needs; allow one.
	if len(flood) < incidentBurst || len(flood) > incidentBurst+1 {
		t.Fatalf("a flood of 1000 incidents wrote %d lines, want the burst of %d", len(flood), incidentBurst)
	}

	// The next line, once the rate allows one, reports what the flood left out; the one after it
	// only what was left out since.
	nextLine := func() incidentLine {
		t.Helper()
		written := len(incidentLines(t, &out))
		poll.CheckFor(t, 2*time.Second, 10*time.Millisecond, func() error {
			if len(incidentLines(t, &out)) == written {
				incident()
				return fmt.Errorf("no line written; the rate is %d a second", incidentsPerSecond)
			}
			return nil
		})
		lines := incidentLines(t, &out)
		return lines[len(lines)-1]
	}
	if l := nextLine(); l.Suppressed < 1000-len(flood) {
		t.Fatalf("the first line after the flood is %+v, want at least the %d the flood left out", l, 1000-len(flood))
	}
	if l := nextLine(); l.Suppressed > 100 { // about 20 polls wait for a token; 1000 would be the flood again
		t.Fatalf("the second line after the flood is %+v, want only the few polls since the first", l)
	}
	lines := incidentLines(t, &out)
	reported := 0
	for _, l := range lines {
		reported += l.Suppressed
	}
	if want := attempts - len(lines); reported != want {
		t.Fatalf("lines report %d suppressed in all, want %d (%d incidents, %d lines)", reported, want, attempts, len(lines))
	}
}

type incidentLine struct {
	Level      string `json:"level"`
	Attempt    int    `json:"attempt"`
	Suppressed int    `json:"suppressed"`
}

func incidentLines(t *testing.T, out *bytes.Buffer) []incidentLine {
	t.Helper()
	var lines []incidentLine
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		var l incidentLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if l.Level != "warn" {
			t.Fatalf("log line %q is not at warn", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}
