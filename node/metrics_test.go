package node_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
)

// metricsSample is one scrape of /metrics: each series (name and labels as exposed, e.g.
// `chatd_frames_received_total{type="send"}`) with its value.
type metricsSample map[string]float64

// scrapeMetrics reads the admin listener's /metrics and returns the series and the raw text.
func scrapeMetrics(t *testing.T, n *testenv.Node) (metricsSample, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, n.AdminURL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	sample := metricsSample{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("unparsable /metrics line %q", line)
		}
		sample[line[:i]] = v
	}
	return sample, body
}

// TestMetricsCountAScriptedSession runs a session a user would have (connect, send, read,
// history, a refused frame, a bad token, a reader so slow it is cut) against a real node and
// checks that the admin listener's counters moved by exactly what happened, and that the
// exposition passes promtool.
func TestMetricsCountAScriptedSession(t *testing.T) {
	const sends, flood = 5, 400
	n, _ := startSecurityNode(t, func(c *node.Config) {
		c.Session.MaxQueuedBytes = 16 * protocol.MaxBodyBytes
		c.Session.WriteTimeout = time.Minute
	})
	before, _ := scrapeMetrics(t, n)
	ctx := ctxT(t, 2*time.Minute)

	bob := connectReady(t, n, "bob")
	carol := connectReady(t, n, "carol")
	slothToken := login(t, n, "sloth")
	dm, err := bob.OpenDM(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	for i := range sends {
		if _, err := bob.Send(ctx, dm.ID, fmt.Sprintf("hello %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Messages(t, carol, dm.ID, sends, 30*time.Second)
	// A read is answered by a cursor push, not a reply.
	if err := carol.Post(ctx, protocol.ClientFrame{Type: protocol.TypeRead, ConversationID: dm.ID, Seq: sends}); err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, err := carol.Request(ctx, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: dm.ID}); err != nil {
		t.Fatalf("history: %v", err)
	}
	// A refused frame: bob writes to a group he is not in.
	others, err := carol.CreateGroup(ctx, "without bob", []string{"sloth"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.Send(ctx, others.ID, "let me in")
	wantCode(t, "send to a group bob is not in", err, protocol.CodeNotMember)
	// A refused upgrade: a token that is no token.
	if _, err := client.Dial(ctx, n.WSURL(), "not-a-token", nil); err == nil {
		t.Fatal("dial with a bad token succeeded")
	}

	// A slow consumer: sloth stops reading while a group gets many large messages.
	sloth, group := slothInBusyGroup(t, ctx, n, bob, slothToken)
	floodGroup(t, ctx, bob, group.ID, flood)()
	if _, code := sloth.readToClose(t, 30*time.Second); code != int(session.StatusSlowConsumer) {
		t.Fatalf("slow consumer closed with %d; want %d", code, session.StatusSlowConsumer)
	}

	// Exactly what the script did; the cut is counted when its session has ended, so poll.
	acked := float64(sends + flood)
	want := map[string]float64{
		`chatd_connections_opened_total`:                  3,
		`chatd_connections_closed_total{code="4008"}`:     1,
		`chatd_slow_consumer_cuts_total`:                  1,
		`chatd_connection_refusals_total{reason="token"}`: 1,
		`chatd_frames_received_total{type="send"}`:        acked + 1,
		`chatd_frames_received_total{type="read"}`:        1,
		`chatd_frames_received_total{type="history"}`:     1,
		`chatd_frames_refused_total{code="not_member"}`:   1,
		`chatd_sends_acked_total`:                         acked,
		`chatd_sends_failed_total{code="not_member"}`:     1,
		`chatd_send_ack_seconds_count`:                    acked,
		`chatd_history_pages_total`:                       1,
		`chatd_history_page_seconds_count`:                1,
		// carol's read; a send moves no cursor (the owner stores the sender's position).
		`chatd_read_cursor_moves_total`: 1,
	}
	// The owner acks every attempt it answers: a send whose first attempt timed out on a busy
	// machine and was retried is acked twice (the second from its memory of recent sends).
	atLeast := map[string]float64{`chatd_sequencer_acks_total`: acked}
	var after metricsSample
	var text []byte
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		after, text = scrapeMetrics(t, n)
		var wrong []string
		for series, delta := range want {
			if got := after[series] - before[series]; got != delta {
				wrong = append(wrong, fmt.Sprintf("%s moved by %v, want %v", series, got, delta))
			}
		}
		for series, delta := range atLeast {
			if got := after[series] - before[series]; got < delta {
				wrong = append(wrong, fmt.Sprintf("%s moved by %v, want at least %v", series, got, delta))
			}
		}
		// The gauge comes down when the cut session has finished, a moment after it is counted.
		if got := after[`chatd_connections_open`]; got != 2 {
			wrong = append(wrong, fmt.Sprintf("chatd_connections_open = %v with bob and carol connected, want 2", got))
		}
		if len(wrong) > 0 {
			return fmt.Errorf("after the scripted session: %s", strings.Join(wrong, "; "))
		}
		return nil
	})
	// carol got every message of the DM and of the flood; each is a delivery.
	if got := after[`chatd_deliveries_total`] - before[`chatd_deliveries_total`]; got < acked {
		t.Errorf("chatd_deliveries_total moved by %v; want at least %v", got, acked)
	}
	for _, series := range []string{`chatd_sequencer_batch_size_count`, `chatd_sequencer_store_insert_seconds_count`,
		`chatd_deliver_seconds_count`, `chatd_bytes_written_total`, `chatd_partitions_owned`} {
		if after[series] <= 0 {
			t.Errorf("%s = %v after the session; want more than 0", series, after[series])
		}
	}
	for series := range after {
		if strings.Contains(series, "bob") || strings.Contains(series, "carol") || strings.Contains(series, dm.ID) {
			t.Errorf("series %s names a user or conversation: unbounded label", series)
		}
	}
	promtool(t, text)
}

// promtool runs `promtool check metrics` (Debian package prometheus; scripts/test installs it)
// on an exposition.
func promtool(t *testing.T, exposition []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not installed (apt-get install prometheus; scripts/test does it): %v", err)
	}
	cmd := exec.CommandContext(ctxT(t, 30*time.Second), bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsOnlyOnTheAdminListener: the public listener answers 404 for /metrics, /debug/ and the
// admin API; the admin listener serves them and refuses the admin API without its secret; a node
// without an admin address has no admin listener at all.
func TestMetricsOnlyOnTheAdminListener(t *testing.T) {
	const adminSecret = "admin-secret-admin-secret-admin-secret"
	n, env := startSecurityNode(t, func(c *node.Config) { c.AdminSecret = []byte(adminSecret) })
	for _, path := range []string{"/metrics", "/debug/partitions", "/debug/pprof/", "/admin/users/alice/revoke"} {
		if got := apiStatus(t, http.MethodGet, n.URL()+path, "", ""); got != http.StatusNotFound {
			t.Errorf("GET %s on the public listener: %d; want 404", path, got)
		}
	}
	if got := apiStatus(t, http.MethodPost, n.URL()+"/admin/users/alice/revoke", adminSecret, ""); got != http.StatusNotFound {
		t.Errorf("POST the admin API on the public listener: %d; want 404", got)
	}
	for _, path := range []string{"/metrics", "/debug/partitions", "/debug/pprof/", "/healthz", "/readyz"} {
		if got := apiStatus(t, http.MethodGet, n.AdminURL()+path, "", ""); got != http.StatusOK {
			t.Errorf("GET %s on the admin listener: %d; want 200", path, got)
		}
	}
	if got := apiStatus(t, http.MethodPost, n.AdminURL()+"/admin/users/alice/revoke", "", ""); got != http.StatusUnauthorized {
		t.Errorf("POST the admin API without its secret: %d; want 401", got)
	}
	if got := apiStatus(t, http.MethodPost, n.AdminURL()+"/admin/users/alice/revoke", adminSecret, ""); got != http.StatusOK {
		t.Errorf("POST the admin API with its secret: %d; want 200", got)
	}

	cfg := env.NodeConfig()
	cfg.NodeID, cfg.AdminAddr, cfg.Sequencer.Partitions = "no-admin", "", securityPartitions
	quiet := testenv.StartNode(t, cfg)
	if addr := quiet.AdminAddr(); addr != "" {
		t.Errorf("node without an admin address listens on %s", addr)
	}
}

// TestMetricsAreDocumented keeps docs/METRICS.md and the Grafana dashboard true: every chatd_
// metric a node exposes has a row in the table and every row names an exposed metric, and every
// chatd_ metric the dashboard queries exists.
func TestMetricsAreDocumented(t *testing.T) {
	n, _ := startSecurityNode(t, nil)
	_, text := scrapeMetrics(t, n)
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (chatd_\w+) `).FindAllSubmatch(text, -1) {
		exposed[string(m[1])] = true
	}
	doc, err := os.ReadFile("../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(chatd_\\w+)` \\|").FindAllSubmatch(doc, -1) {
		documented[string(m[1])] = true
	}
	for name := range exposed {
		if !documented[name] {
			t.Errorf("%s is exposed but has no row in docs/METRICS.md", name)
		}
	}
	for name := range documented {
		if !exposed[name] {
			t.Errorf("docs/METRICS.md lists %s, which no node exposes", name)
		}
	}
	dashboard, err := os.ReadFile("../deploy/grafana/dashboards/chatd.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`chatd_\w+`).FindAll(dashboard, -1) {
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(string(m), "_bucket"), "_sum"), "_count")
		if !exposed[name] {
			t.Errorf("the dashboard queries %s, which no node exposes", m)
		}
	}
}
