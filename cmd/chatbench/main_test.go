package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestMain lets the test binary stand in for chatbench's child processes, as -procs and -floor
// start them; run as the tests, it fails the package if a goroutine (a worker, a connection's
// reader) outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(floorEnv) != "" {
		if err := runFloorServer(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("floor server: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(childEnv); spec != "" {
		if err := runChild(context.Background(), spec, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.VerifyTestMain(m)
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for us := int64(1); us <= 10000; us++ {
		h.record(time.Duration(us) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {1, 10 * time.Millisecond}} {
		got := h.quantile(tc.q)
		if diff := float64(got-tc.want) / float64(tc.want); diff < -0.001 || diff > 1.0/subBuckets {
			t.Errorf("quantile(%v) = %s, want %s within %.0f%%", tc.q, got, tc.want, 100.0/subBuckets)
		}
	}
	if h.max() != 10*time.Millisecond {
		t.Errorf("max = %s, want 10ms", h.max())
	}

	// A histogram survives the trip between processes and merges by adding.
	data, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back histogram
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	back.merge(&h)
	if back.count() != 20000 || back.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merged copy has %d samples and median %s; want 20000 and %s", back.count(), back.quantile(0.5), h.quantile(0.5))
	}
}

func TestBucketsCoverEveryLatency(t *testing.T) {
	prev := -1
	for _, us := range []int64{0, 1, 31, 32, 33, 63, 64, 1000, 1 << 20, 1<<39 + 5, 1 << 45} {
		b := bucketOf(us)
		if b < prev || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d)", us, b, prev, numBuckets)
		}
		if us < 1<<maxExp && bucketUpper(b) < us {
			t.Fatalf("bucket %d of %d µs ends at %d", b, us, bucketUpper(b))
		}
		prev = b
	}
}

func TestParseSources(t *testing.T) {
	ips, err := parseSources("127.0.0.2-127.0.0.4, 10.1.2.3")
	if err != nil || len(ips) != 4 || ips[2].String() != "127.0.0.4" || ips[3].String() != "10.1.2.3" {
		t.Fatalf("parseSources = %v, %v", ips, err)
	}
	for _, bad := range []string{"127.0.0.9-127.0.0.2", "127.0.0.1-127.0.1.1", "::1", "nonsense"} {
		if _, err := parseSources(bad); err == nil {
			t.Errorf("parseSources(%q) accepted", bad)
		}
	}
}

// TestLoadAgainstNode runs a small load, in one process and then over two, against a real node:
// every send is acked, every member other than the sender gets every message, and the report
// says so.
func TestLoadAgainstNode(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	for _, procs := range []string{"1", "2"} {
		t.Run("procs="+procs, func(t *testing.T) {
			rep, j, out := runAgainst(t, "-url", n.URL(), "-clients", "12", "-prefix", "p"+procs+"u", "-procs", procs,
				"-dms", "2", "-groups", "2", "-group-size", "4", "-rate", "40", "-duration", "1s", "-settle", "0")
			l := j.Load
			switch {
			case j.Connect.OK != 12 || j.Setup.OK != 4:
				t.Fatalf("connected %d of 12, created %d of 4 conversations:\n%s", j.Connect.OK, j.Setup.OK, out)
			case l.Acked != 40 || len(l.Errors) != 0:
				t.Fatalf("acked %d of 40 sends, errors %v:\n%s", l.Acked, l.Errors, out)
			case l.Delivered != l.Expected || l.Expected < 40:
				t.Fatalf("delivered %d of %d expected:\n%s", l.Delivered, l.Expected, out)
			case l.AckLatency.Samples != 40 || l.DeliveryLatency.P99 <= 0 || l.DeliveryLatency.P99 > l.DeliveryLatency.Max:
				t.Fatalf("implausible latencies:\n%s", out)
			case j.RSS.ConnectedKiB <= 0:
				t.Fatalf("no memory figure for the given pid:\n%s", out)
			}
			var table bytes.Buffer
			if err := rep.print(&table, false); err != nil || !strings.Contains(table.String(), "send->delivered") {
				t.Fatalf("table report (%v):\n%s", err, table.String())
			}
		})
	}
}

// TestIdleWithFloor holds idle connections to a real node, its users in two groups each, then as
// many to the bare server of -floor, and reports both.
func TestIdleWithFloor(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	_, j, out := runAgainst(t, "-url", n.URL(), "-idle", "-floor", "-clients", "10", "-prefix", "floor",
		"-groups", "4", "-group-size", "5", "-hold", "1ms", "-settle", "0")
	switch {
	case j.Mode != "idle" || j.Connect.OK != 10:
		t.Fatalf("connected %d of 10 in mode %s:\n%s", j.Connect.OK, j.Mode, out)
	case j.Setup == nil || j.Setup.OK != 4 || j.UnconfirmedJoins != 0:
		t.Fatalf("groups not all created, or %d joins unconfirmed:\n%s", j.UnconfirmedJoins, out)
	case j.Floor == nil || j.Floor.RSS.Connections != 10 || j.Floor.RSS.ConnectedKiB <= 0:
		t.Fatalf("no floor figures for 10 connections:\n%s", out)
	}
	if _, err := parseFlags([]string{"-floor"}, func(string) string { return "" }); err == nil {
		t.Error("-floor without -idle was accepted")
	}
}

// runAgainst runs chatbench with args, reporting in JSON the memory of this process (where the
// tests' node runs), and returns the report, decoded from its JSON and as that text for failure
// messages. A failed run fails the test with chatbench's log.
func runAgainst(t *testing.T, args ...string) (*report, reportJSON, string) {
	t.Helper()
	cfg, err := parseFlags(append(args, "-server-pid", strconv.Itoa(os.Getpid()), "-json"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	rep, err := runBench(ctx, cfg, &log)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	var out bytes.Buffer
	if err := rep.print(&out, true); err != nil {
		t.Fatal(err)
	}
	var j reportJSON
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatalf("decode report: %v\n%s", err, out.String())
	}
	return rep, j, out.String()
}

// A pushed message frame, as the hub writes it, is read the quick way with the sender and body
// a full decode finds; a body with an escape is left to the full decode.
func TestQuickMessageReadsWhatAFullDecodeReads(t *testing.T) {
	push := func(m protocol.Message) []byte {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(`{"type":"message",`), data[1:]...)
	}
	data := push(protocol.Message{ConversationID: "c1", Seq: 7, SenderID: "alice", Kind: protocol.KindText,
		Body: "chatbench 123", Quote: &protocol.Quote{SenderID: "bob", Body: "earlier"}})
	f, ok := quickMessage(data)
	if !ok {
		t.Fatalf("quickMessage refused %s", data)
	}
	var full frame
	if err := json.Unmarshal(data, &full); err != nil {
		t.Fatal(err)
	}
	if f.Type != full.Type || f.SenderID != full.SenderID || f.Body != full.Body {
		t.Fatalf("quick read %+v; a full decode reads type %q sender %q body %q", f, full.Type, full.SenderID, full.Body)
	}
	if _, ok := quickMessage(push(protocol.Message{SenderID: "alice", Body: `say "hi"`})); ok {
		t.Fatal("quickMessage read a body with escapes; want it left to the full decode")
	}
	if _, ok := quickMessage([]byte(`{"type":"ack","id":"1","senderId":"x","body":"y"}`)); ok {
		t.Fatal("quickMessage read an ack; want only message pushes")
	}
}
