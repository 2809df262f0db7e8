package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// report is everything one run measured.
type report struct {
	cfg              config
	Login            *result
	Connect          *result
	Setup            *result
	Warmup           *result
	Drive            *result
	RSS              rssReport
	Floor            *rssReport // the bare server of -floor
	HeldFor          time.Duration
	ServerCPUSeconds float64
	StoreCPU         storeCPU // with -store-pid
}

// storeCPU is the CPU seconds the store process used in each phase.
type storeCPU struct {
	SignIn  float64 `json:"signInSeconds"`
	Connect float64 `json:"connectSeconds"`
	Drive   float64 `json:"loadSeconds,omitempty"`
}

// rssReport is the nodes' resident memory at each stage, summed over -server-pid.
type rssReport struct {
	BeforeKiB    int64 `json:"beforeKiB"`
	ConnectedKiB int64 `json:"connectedKiB"`
	HeldKiB      int64 `json:"heldKiB,omitempty"`
	AfterLoadKiB int64 `json:"afterLoadKiB,omitempty"`
	Connections  int64 `json:"connections"`
}

// perConnKiB is the memory the connections added, per connection.
func (r rssReport) perConnKiB() float64 {
	if r.Connections == 0 || r.BeforeKiB == 0 {
		return 0
	}
	return float64(r.ConnectedKiB-r.BeforeKiB) / float64(r.Connections)
}

func newReport(cfg config) *report { return &report{cfg: cfg} }

// latencies are one histogram's percentiles in milliseconds.
type latencies struct {
	Samples uint64  `json:"samples"`
	P50     float64 `json:"p50Ms"`
	P95     float64 `json:"p95Ms"`
	P99     float64 `json:"p99Ms"`
	Max     float64 `json:"maxMs"`
}

func summarize(h *histogram) latencies {
	if h == nil {
		return latencies{}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return latencies{Samples: h.count(), P50: ms(h.quantile(0.50)), P95: ms(h.quantile(0.95)),
		P99: ms(h.quantile(0.99)), Max: ms(h.max())}
}

// phaseJSON is a phase as the JSON report shows it.
type phaseJSON struct {
	OK       int64             `json:"ok"`
	Seconds  float64           `json:"seconds"`
	Errors   map[string]int64  `json:"errors"`
	Examples map[string]string `json:"examples,omitempty"`
}

func phaseOf(r *result) *phaseJSON {
	if r == nil {
		return nil
	}
	errs := r.Errors
	if errs == nil {
		errs = map[string]int64{}
	}
	return &phaseJSON{OK: r.OK, Seconds: r.Elapsed.Seconds(), Errors: errs, Examples: r.Examples}
}

// reportJSON is the -json output.
type reportJSON struct {
	URLs           []string   `json:"urls"`
	Clients        int        `json:"clients"`
	Procs          int        `json:"procs"`
	Mode           string     `json:"mode"`
	Login          *phaseJSON `json:"login"`
	Connect        *phaseJSON `json:"connect"`
	ConnectsPerSec float64    `json:"connectsPerSec"`
	ConnectLatency latencies  `json:"connectLatency"`
	// SyncedConversations is the fewest and most conversations a connection's first sync listed.
	SyncedConversations [2]int64   `json:"syncedConversations"`
	StoreCPU            *storeCPU  `json:"storeCpu,omitempty"`
	RSS                 rssReport  `json:"rss"`
	RSSPerConnKiB       float64    `json:"rssPerConnKiB"`
	Floor               *floorJSON `json:"floor,omitempty"`
	HeldSeconds         float64    `json:"heldSeconds,omitempty"`
	Setup               *phaseJSON `json:"setup,omitempty"`
	Warmup              *phaseJSON `json:"warmup,omitempty"`
	Memberships         int64      `json:"memberships,omitempty"`
	UnconfirmedJoins    int64      `json:"unconfirmedJoins,omitempty"`
	MaxConnRate         float64    `json:"maxConnRate,omitempty"`
	Load                *loadJSON  `json:"load,omitempty"`
}

// floorJSON is the bare server's memory and chatd's per connection over it.
type floorJSON struct {
	RSS           rssReport `json:"rss"`
	RSSPerConnKiB float64   `json:"rssPerConnKiB"`
	// Ratio is the nodes' RSS per connection over the floor's, both measured in this run.
	Ratio float64 `json:"ratio"`
}

type loadJSON struct {
	TargetRate      float64           `json:"targetRate"`
	Seconds         float64           `json:"seconds"`
	Attempted       int64             `json:"attempted"`
	Acked           int64             `json:"acked"`
	AckedPerSec     float64           `json:"ackedPerSec"`
	Skipped         int64             `json:"skipped"`
	Errors          map[string]int64  `json:"errors"`
	Examples        map[string]string `json:"examples,omitempty"`
	AckLatency      latencies         `json:"ackLatency"`
	Expected        int64             `json:"expectedDeliveries"`
	Delivered       int64             `json:"delivered"`
	DeliveredPerSec float64           `json:"deliveredPerSec"`
	DeliveryLatency latencies         `json:"deliveryLatency"`
	ServerCPUCores  float64           `json:"serverCpuCores,omitempty"`
	StoreCPUCores   float64           `json:"storeCpuCores,omitempty"`
}

func (r *report) toJSON() reportJSON {
	out := reportJSON{URLs: r.cfg.URLs, Clients: r.cfg.Clients, Procs: r.cfg.Procs, Mode: "load",
		Login: phaseOf(r.Login), Connect: phaseOf(r.Connect), RSS: r.RSS, RSSPerConnKiB: r.RSS.perConnKiB(),
		HeldSeconds: r.HeldFor.Seconds(), Setup: phaseOf(r.Setup), Warmup: phaseOf(r.Warmup)}
	if r.cfg.Idle {
		out.Mode = "idle"
	}
	if f := r.Floor; f != nil {
		out.Floor = &floorJSON{RSS: *f, RSSPerConnKiB: f.perConnKiB()}
		if out.Floor.RSSPerConnKiB > 0 {
			out.Floor.Ratio = out.RSSPerConnKiB / out.Floor.RSSPerConnKiB
		}
	}
	if r.cfg.StorePID != 0 {
		out.StoreCPU = &r.StoreCPU
	}
	if c := r.Connect; c != nil {
		out.ConnectLatency = summarize(c.Latency)
		if c.Synced != nil {
			out.SyncedConversations = *c.Synced
		}
		if c.Elapsed > 0 {
			out.ConnectsPerSec = float64(c.OK) / c.Elapsed.Seconds()
		}
	}
	if s := r.Setup; s != nil {
		out.Memberships, out.UnconfirmedJoins, out.MaxConnRate = s.Memberships, s.Unconfirmed, s.MaxConnRate
	}
	if d := r.Drive; d != nil {
		l := &loadJSON{TargetRate: r.cfg.Rate, Seconds: d.SendWindow.Seconds(), Attempted: d.Attempted, Acked: d.OK,
			Skipped: d.Skipped, Errors: d.Errors, Examples: d.Examples, AckLatency: summarize(d.Latency),
			Expected: d.Expected, Delivered: d.Delivered, DeliveryLatency: summarize(d.Delivery)}
		if l.Errors == nil {
			l.Errors = map[string]int64{}
		}
		if d.SendWindow > 0 {
			// A server that falls behind acks after the sends stopped: the rate it sustained is
			// the acks over the time until the last of them.
			l.AckedPerSec = float64(d.OK) / max(d.SendWindow, d.AckWindow).Seconds()
		}
		if d.Elapsed > 0 {
			l.ServerCPUCores = r.ServerCPUSeconds / d.Elapsed.Seconds() // CPU is sampled around the whole phase
			l.StoreCPUCores = r.StoreCPU.Drive / d.Elapsed.Seconds()
		}
		if d.DeliveryWindow > 0 {
			l.DeliveredPerSec = float64(d.Delivered) / d.DeliveryWindow.Seconds()
		}
		out.Load = l
	}
	return out
}

// print writes the report as a table, or as JSON.
func (r *report) print(w io.Writer, asJSON bool) error {
	j := r.toJSON()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(j)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	row("mode\t%s, %d clients, %d process(es), %v", j.Mode, j.Clients, j.Procs, j.URLs)
	if p := j.Login; p != nil {
		row("sign-in\t%d ok in %.1fs%s", p.OK, p.Seconds, errorText(p.Errors))
	}
	if p := j.Connect; p != nil {
		row("connect\t%d ok in %.1fs (%.0f/s), p50 %.1f ms, p99 %.1f ms%s", p.OK, p.Seconds, j.ConnectsPerSec,
			j.ConnectLatency.P50, j.ConnectLatency.P99, errorText(p.Errors))
		row("\teach first sync listed %d to %d conversations", j.SyncedConversations[0], j.SyncedConversations[1])
	}
	if c := j.StoreCPU; c != nil && j.Login != nil && j.Connect != nil {
		row("store CPU\tsign-in %.1f s (%.2f ms per user), connect %.1f s (%.2f ms per connection)",
			c.SignIn, perMs(c.SignIn, j.Login.OK), c.Connect, perMs(c.Connect, j.Connect.OK))
	}
	if j.RSS.BeforeKiB > 0 {
		row("server RSS\t%.1f MiB before, %.1f MiB connected: %.1f KiB per connection", mib(j.RSS.BeforeKiB),
			mib(j.RSS.ConnectedKiB), j.RSSPerConnKiB)
		if j.RSS.HeldKiB > 0 {
			row("\t%.1f MiB after holding %.0fs", mib(j.RSS.HeldKiB), j.HeldSeconds)
		}
		if j.RSS.AfterLoadKiB > 0 {
			row("\t%.1f MiB after the load", mib(j.RSS.AfterLoadKiB))
		}
	}
	if f := j.Floor; f != nil {
		row("floor RSS\t%.1f MiB before, %.1f MiB with %d connections: %.1f KiB per connection", mib(f.RSS.BeforeKiB),
			mib(f.RSS.ConnectedKiB), f.RSS.Connections, f.RSSPerConnKiB)
		row("server/floor\t%.2fx per connection", f.Ratio)
	}
	if p := j.Setup; p != nil {
		row("setup\t%d conversations, %d memberships in %.1fs%s", p.OK, j.Memberships, p.Seconds, errorText(p.Errors))
		if j.UnconfirmedJoins > 0 {
			row("\t%d members were not told of their conversation in time", j.UnconfirmedJoins)
		}
	}
	if p := j.Warmup; p != nil {
		row("warm-up\t%d conversations in %.1fs%s", p.OK, p.Seconds, errorText(p.Errors))
	}
	if l := j.Load; l != nil {
		row("sends\t%d acked of %d in %.1fs: %.1f/s (target %.0f/s)%s", l.Acked, l.Attempted, l.Seconds, l.AckedPerSec,
			l.TargetRate, errorText(l.Errors))
		if l.Skipped > 0 {
			row("\t%d not sent: more than -max-inflight waiting for acks", l.Skipped)
		}
		row("send->ack\t%s", latencyText(l.AckLatency))
		row("deliveries\t%d of %d expected: %.1f/s", l.Delivered, l.Expected, l.DeliveredPerSec)
		row("send->delivered\t%s", latencyText(l.DeliveryLatency))
		if l.ServerCPUCores > 0 {
			row("server CPU\t%.2f cores", l.ServerCPUCores)
		}
		if l.StoreCPUCores > 0 {
			row("store CPU\t%.2f cores", l.StoreCPUCores)
		}
	}
	for _, p := range []struct {
		name     string
		examples map[string]string
	}{{"sign-in", examplesOf(j.Login)}, {"connect", examplesOf(j.Connect)}, {"setup", examplesOf(j.Setup)}, {"warm-up", examplesOf(j.Warmup)}, {"send", loadExamples(j.Load)}} {
		for _, code := range slices.Sorted(maps.Keys(p.examples)) {
			row("first %s error\t%s: %s", p.name, code, p.examples[code])
		}
	}
	return tw.Flush()
}

func examplesOf(p *phaseJSON) map[string]string {
	if p == nil {
		return nil
	}
	return p.Examples
}

func loadExamples(l *loadJSON) map[string]string {
	if l == nil {
		return nil
	}
	return l.Examples
}

func latencyText(l latencies) string {
	return fmt.Sprintf("p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms  (%d samples)", l.P50, l.P95, l.P99, l.Max, l.Samples)
}

func errorText(errs map[string]int64) string {
	if len(errs) == 0 {
		return ""
	}
	s := "; errors:"
	for _, code := range slices.Sorted(maps.Keys(errs)) {
		s += fmt.Sprintf(" %s=%d", code, errs[code])
	}
	return s
}

// perMs is seconds spread over n, in milliseconds each.
func perMs(seconds float64, n int64) float64 {
	if n == 0 {
		return 0
	}
	return seconds * 1000 / float64(n)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
