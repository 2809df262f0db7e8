package promtest_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/chatd/chatd/testenv/promtest"
)

// registry holds one metric of each kind, each moved so that no value is a zero by accident.
func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_sent_total", Help: "h"}, []string{"code", "kind"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_open", Help: "h"})
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_latency_seconds", Help: "h"})
	reg.MustRegister(sent, open, latency)
	sent.WithLabelValues("ok", "text").Add(3)
	sent.WithLabelValues("ok", "image").Add(5)
	sent.WithLabelValues("refused", "text").Add(7)
	open.Set(-2)
	latency.Observe(0.25)
	latency.Observe(1.5)
	return reg
}

func TestRead(t *testing.T) {
	reg := registry(t)
	for _, tc := range []struct {
		name   string
		metric string
		labels []string
		want   promtest.Sample
	}{
		{"a counter by all its labels", "test_sent_total", []string{"code", "refused", "kind", "text"}, promtest.Sample{Value: 7, Found: true}},
		{"a counter by some of its labels", "test_sent_total", []string{"kind", "image"}, promtest.Sample{Value: 5, Found: true}},
		{"labels in another order", "test_sent_total", []string{"kind", "text", "code", "ok"}, promtest.Sample{Value: 3, Found: true}},
		{"a gauge", "test_open", nil, promtest.Sample{Value: -2, Found: true}},
		{"a histogram", "test_latency_seconds", nil, promtest.Sample{Count: 2, Sum: 1.75, Found: true}},
		{"a label value no series has", "test_sent_total", []string{"code", "internal"}, promtest.Sample{}},
		{"a label the metric does not have", "test_open", []string{"code", ""}, promtest.Sample{}},
		{"one label matching and one not", "test_sent_total", []string{"code", "refused", "kind", "image"}, promtest.Sample{}},
		{"a name nothing registered", "test_sent", nil, promtest.Sample{}},
	} {
		if got := promtest.Read(t, reg, tc.metric, tc.labels...); got != tc.want {
			t.Errorf("%s: Read(%s, %q) = %+v, want %+v", tc.name, tc.metric, tc.labels, got, tc.want)
		}
	}
}

func TestGather(t *testing.T) {
	var got []string
	for _, s := range promtest.Gather(t, registry(t)) {
		if !s.Found {
			t.Errorf("%s%v gathered with Found false", s.Name, s.Labels)
		}
		got = append(got, fmt.Sprintf("%s%v %v/%v/%v", s.Name, s.Labels, s.Value, s.Count, s.Sum))
	}
	want := []string{
		"test_latency_secondsmap[] 0/2/1.75",
		"test_openmap[] -2/0/0",
		"test_sent_totalmap[code:ok kind:image] 5/0/0",
		"test_sent_totalmap[code:ok kind:text] 3/0/0",
		"test_sent_totalmap[code:refused kind:text] 7/0/0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Gather =\n%q\nwant\n%q", got, want)
	}
}

// fatalRecorder is a test that records its Fatalf instead of ending, to check what fails it.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func (r *fatalRecorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }

func TestReadFailsTheTest(t *testing.T) {
	broken := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return nil, errors.New("collector broke")
	})
	for _, tc := range []struct {
		name   string
		g      prometheus.Gatherer
		labels []string
	}{
		{"a Gather error", broken, nil},
		{"labels that are not pairs", registry(t), []string{"code", "ok", "kind"}},
	} {
		r := &fatalRecorder{TB: t}
		if got := promtest.Read(r, tc.g, "test_sent_total", tc.labels...); got != (promtest.Sample{}) {
			t.Errorf("%s: Read = %+v, want the zero Sample", tc.name, got)
		}
		if r.fatal == "" {
			t.Errorf("%s: Read did not fail the test", tc.name)
		}
	}
}

func TestRegisteredFailsWithoutTheSeries(t *testing.T) {
	reg := registry(t)
	if got := promtest.Registered(t, reg, "test_sent_total", "kind", "image"); got != (promtest.Sample{Value: 5, Found: true}) {
		t.Errorf("Registered of a series that exists = %+v", got)
	}
	r := &fatalRecorder{TB: t}
	promtest.Registered(r, reg, "test_sent_total", "code", "internal")
	if !strings.Contains(r.fatal, "no series test_sent_total[code internal]") {
		t.Errorf("Registered of a series that does not exist failed the test with %q", r.fatal)
	}
}

func TestWaitFor(t *testing.T) {
	reg := registry(t)
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_late", Help: "h"})
	reg.MustRegister(open)
	go func() {
		time.Sleep(50 * time.Millisecond)
		open.Set(4)
	}()
	promtest.WaitFor(t, reg, 10*time.Second, 4, "test_late")

	r := &fatalRecorder{TB: t}
	promtest.WaitFor(r, reg, 30*time.Millisecond, 8, "test_sent_total", "code", "refused")
	if !strings.Contains(r.fatal, "test_sent_total[code refused] = 7, want 8") {
		t.Errorf("WaitFor of a value that never comes failed the test with %q", r.fatal)
	}
}

// TestURLReadsWhatARegistryExposes: a registry read over HTTP, as a node's /metrics serves it,
// reads the same as the registry itself; an endpoint that does not serve metrics fails the test.
func TestURLReadsWhatARegistryExposes(t *testing.T) {
	reg := registry(t)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	show := func(series []promtest.Series) []string {
		var out []string
		for _, s := range series {
			out = append(out, fmt.Sprintf("%s%v %+v", s.Name, s.Labels, s.Sample))
		}
		return out
	}
	got, want := show(promtest.Gather(t, promtest.URL(srv.URL))), show(promtest.Gather(t, reg))
	if !slices.Equal(got, want) {
		t.Errorf("over HTTP:\n%q\nfrom the registry:\n%q", got, want)
	}

	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	r := &fatalRecorder{TB: t}
	promtest.Gather(r, promtest.URL(missing.URL))
	if !strings.Contains(r.fatal, "404") {
		t.Errorf("a URL that answers 404 failed the test with %q", r.fatal)
	}
}
