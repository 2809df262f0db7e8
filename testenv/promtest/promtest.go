// Package promtest reads metrics as Prometheus exposes them, by name and labels, for tests
// asserting that a counter moved.
package promtest

// Nothing of chatd is imported here, so the internal test of any package (chat's, say) can use
// promtest without an import cycle.
import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample is what one series says: a counter's or gauge's value, or a histogram's count and sum of
// observations. The zero Sample, with Found false, is a series that does not exist.
type Sample struct {
	Value float64 // of a counter or gauge
	Count uint64  // observations of a histogram
	Sum   float64 // of a histogram's observations
	Found bool    // whether the series exists
}

// Series is one series as exposed: the name of its metric, its labels and its sample (whose Found
// is true).
type Series struct {
	Name   string
	Labels map[string]string
	Sample
}

// Gather returns every series g exposes, in the order g gives them (a prometheus.Registry sorts
// families by name and series by labels). A Gather error fails the test. Tests that need one
// series call Read; Gather is for those that look across series, such as a sum over a label or a
// check that no label carries some value.
func Gather(t testing.TB, g prometheus.Gatherer) []Series {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
		return nil
	}
	var out []Series
	for _, f := range families {
		for _, m := range f.GetMetric() {
			s := Series{Name: f.GetName(), Labels: make(map[string]string, len(m.GetLabel())), Sample: Sample{Found: true}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.Value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.Value = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				s.Count = m.GetHistogram().GetSampleCount()
				s.Sum = m.GetHistogram().GetSampleSum()
			}
			out = append(out, s)
		}
	}
	return out
}

// Read returns the sample of the first series of the metric named name that has all of labels,
// given as name, value pairs; the series may carry other labels too. A series that does not exist
// reads as the zero Sample, with Found false, so that a counter no event has touched yet reads as
// zero; a test that must see the series exist checks Found. A Gather error, or labels that are not
// pairs, fail the test.
func Read(t testing.TB, g prometheus.Gatherer, name string, labels ...string) Sample {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("read %s: labels %q are not name, value pairs", name, labels)
		return Sample{}
	}
series:
	for _, s := range Gather(t, g) {
		if s.Name != name {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			if v, ok := s.Labels[labels[i]]; !ok || v != labels[i+1] {
				continue series
			}
		}
		return s.Sample
	}
	return Sample{}
}
