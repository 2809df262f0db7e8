// Package promtest reads metrics as Prometheus exposes them, by name and labels, for tests
// asserting that a counter moved.
package promtest

// Nothing of chatd but the leaf testenv/poll is imported here, so the internal test of any
// package (chat's, say) can use promtest without an import cycle.
import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/chatd/chatd/testenv/poll"
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
	series, err := gather(g)
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
		return nil
	}
	return series
}

func gather(g prometheus.Gatherer) ([]Series, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
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
			case m.GetUntyped() != nil:
				s.Value = m.GetUntyped().GetValue()
			case m.GetHistogram() != nil:
				s.Count = m.GetHistogram().GetSampleCount()
				s.Sum = m.GetHistogram().GetSampleSum()
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// Read returns the sample of the first series of the metric named name that has all of labels,
// given as name, value pairs; the series may carry other labels too. A series that does not exist
// reads as the zero Sample, with Found false, so that a counter no event has touched yet reads as
// zero; a test that must see the series exist checks Found or calls Registered. A Gather error,
// or labels that are not pairs, fail the test.
func Read(t testing.TB, g prometheus.Gatherer, name string, labels ...string) Sample {
	t.Helper()
	s, err := read(g, name, labels)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
		return Sample{}
	}
	return s
}

// Registered is Read of a series that must exist: it also fails the test if g has no such series.
func Registered(t testing.TB, g prometheus.Gatherer, name string, labels ...string) Sample {
	t.Helper()
	s := Read(t, g, name, labels...)
	if !s.Found {
		t.Fatalf("no series %s%v is registered", name, labels)
	}
	return s
}

// WaitFor polls g every 10 ms (poll.CheckFor) until the series of name with labels exists and has
// the value want, for a series counted a moment after the effect the test saw (a frame counted
// once its write returns, a session once it has ended). After timeout it fails the test with the
// value the series last had, or with the error that kept it from being read.
func WaitFor(t testing.TB, g prometheus.Gatherer, timeout time.Duration, want float64, name string, labels ...string) {
	t.Helper()
	poll.CheckFor(t, timeout, 10*time.Millisecond, func() error {
		s, err := read(g, name, labels)
		switch {
		case err != nil:
			return fmt.Errorf("read %s: %w", name, err)
		case !s.Found:
			return fmt.Errorf("no series %s%v is registered; want it at %v", name, labels, want)
		case s.Value != want:
			return fmt.Errorf("%s%v = %v, want %v", name, labels, s.Value, want)
		}
		return nil
	})
}

func read(g prometheus.Gatherer, name string, labels []string) (Sample, error) {
	if len(labels)%2 != 0 {
		return Sample{}, fmt.Errorf("labels %q are not name, value pairs", labels)
	}
	all, err := gather(g)
	if err != nil {
		return Sample{}, fmt.Errorf("gather metrics: %w", err)
	}
series:
	for _, s := range all {
		if s.Name != name {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			if v, ok := s.Labels[labels[i]]; !ok || v != labels[i+1] {
				continue series
			}
		}
		return s.Sample, nil
	}
	return Sample{}, nil
}

// URL is a Gatherer of what the /metrics endpoint at url exposes, read in the text format, for
// tests of a server they reach over HTTP (a node's admin listener, a chatd child process). Each
// Gather asks the endpoint once; a request that fails, or an answer other than 200, is a Gather
// error.
func URL(url string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		resp, err := scrapeClient.Get(url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		var parser expfmt.TextParser
		byName, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", url, err)
		}
		families := slices.Collect(maps.Values(byName))
		slices.SortFunc(families, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
		return families, nil
	})
}

// scrapeClient bounds every scrape of URL; it keeps no connection open between scrapes, so none
// outlives the tests (goleak).
var scrapeClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
