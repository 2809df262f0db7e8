package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// Harness settings, each with its reason.
const (
	// clusterSize is three of everything: the smallest cluster that keeps a majority after losing one.
	clusterSize = 3
	// testPartitions is small, so each node owns two or three partitions and /debug/partitions
	// is easy to read in a failure message.
	testPartitions = 8
	// startTimeout bounds one process's start; chatd itself waits up to 30 s for its dependencies.
	startTimeout = 60 * time.Second
	// stopTimeout is how long a process gets after SIGTERM before SIGKILL; a chat node's graceful
	// stop has stages of up to 10 s each.
	stopTimeout = 30 * time.Second
	// pollInterval is how often conditions are polled (testenv.CheckFor); short against every
	// bound waited for.
	pollInterval = 50 * time.Millisecond
)

// repoRoot is where nats.conf and deploy/ are, seen from this package's directory.
const repoRoot = ".."

// nginxBinary finds Debian's nginx, which is not on a non-root PATH. The multi-node tests need a
// real load balancer, so its absence fails them rather than skipping them.
func nginxBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Fatal("nginx is not installed: the multi-node tests run behind a real nginx (scripts/test installs it; apt-get install nginx)")
	return ""
}

// process is a child process of the test, its output in a log file in the test's directory.
type process struct {
	name   string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // why it exited; valid once exited is closed
}

// startProcess starts bin and stops it when the test ends (SIGTERM, then SIGKILL after
// stopTimeout); if the test failed, the end of its log goes into the test log.
func startProcess(t testing.TB, dir, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create log of %s: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(childEnv(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a signal reaches nginx's workers with their master; and SIGKILL
	// if the test binary dies, so no server outlives a crashed or timed-out test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close() // the child has exited; nothing more is written
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("end of the log of %s:\n%s", name, tail(logPath, 25))
		}
	})
	return p
}

// childEnv is the test's environment without CHAT_ and NATS_ settings, so nothing from the
// developer's shell changes how the children run.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAT_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	return env
}

// alive returns an error if the process has exited, with the end of its log. The error wraps
// testenv.ErrGiveUp: a wait for a condition of a process that is gone ends at once.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v), %w; end of its log:\n%s", p.name, p.err, testenv.ErrGiveUp, tail(p.log, 15))
	default:
		return nil
	}
}

func (p *process) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig) // it may have exited already; Wait reports that
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process gracefully, or with SIGKILL after stopTimeout.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.kill()
	}
}

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// probeClient asks health and debug endpoints; a server that does not answer in two seconds is
// treated as down. It keeps no connection open between probes, so none outlives the tests (see
// TestMain).
var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// getOK GETs url and returns the body of a 200 answer.
func getOK(url string) ([]byte, error) {
	resp, err := probeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// natsServer is one nats-server process of the test's cluster, configured by the repository's
// nats.conf with its addresses moved to loopback ports by flags, as scripts/cluster runs it.
type natsServer struct {
	*process
	clientPort, monitorPort int
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.clientPort) }

// healthy asks the monitoring endpoint, which answers 200 once the server is routed and
// JetStream has a meta leader.
func (s *natsServer) healthy() error {
	if err := s.alive(); err != nil {
		return err
	}
	if _, err := getOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", s.monitorPort)); err != nil {
		return fmt.Errorf("%s not healthy: %w", s.name, err)
	}
	return nil
}

// clientNames lists the names of the clients connected to this server ("chatd chat-1", ...).
func (s *natsServer) clientNames() ([]string, error) {
	body, err := getOK(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1024", s.monitorPort))
	if err != nil {
		return nil, err
	}
	var connz struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if err := json.Unmarshal(body, &connz); err != nil {
		return nil, fmt.Errorf("decode connz of %s: %w", s.name, err)
	}
	names := make([]string, len(connz.Connections))
	for i, c := range connz.Connections {
		names[i] = c.Name
	}
	return names, nil
}

// chatNode is one chatd process.
type chatNode struct {
	*process
	id        string
	port      int
	adminPort int
}

func (n *chatNode) url() string { return fmt.Sprintf("http://127.0.0.1:%d", n.port) }

// adminURL is the node's admin listener: metrics, /debug/partitions.
func (n *chatNode) adminURL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.adminPort) }

func (n *chatNode) ready() error {
	if err := n.alive(); err != nil {
		return err
	}
	if _, err := getOK(n.url() + "/readyz"); err != nil {
		return fmt.Errorf("%s not ready: %w", n.id, err)
	}
	return nil
}

// owned asks the node which partitions it owns right now.
func (n *chatNode) owned() ([]int, error) {
	if err := n.alive(); err != nil {
		return nil, err
	}
	body, err := getOK(n.adminURL() + "/debug/partitions")
	if err != nil {
		return nil, err
	}
	var out struct {
		Node  string `json:"node"`
		Owned []int  `json:"owned"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode /debug/partitions of %s: %w", n.id, err)
	}
	if out.Node != n.id {
		return nil, fmt.Errorf("node on port %d calls itself %q, want %q", n.port, out.Node, n.id)
	}
	return out.Owned, nil
}

// cluster is one deployment started for a test: a NATS cluster, a shared store, chat nodes and
// nginx in front. Clients reach it only through LBURL.
type cluster struct {
	t         *testing.T
	dir       string
	nats      []*natsServer
	store     storage.Config
	nodes     []*chatNode
	lb        *process
	lbURL     string
	accessLog string
}

// startCluster starts everything and returns once every node is ready, the partitions are
// spread over all nodes, and nginx answers.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	began := time.Now()
	c := &cluster{t: t, dir: t.TempDir()}
	c.startNATS()
	c.store = testenv.StoreConfig(t)
	for _, s := range c.nats {
		testenv.CheckFor(t, startTimeout, pollInterval, s.healthy)
	}
	c.startNodes()
	for _, n := range c.nodes {
		testenv.CheckFor(t, startTimeout, pollInterval, n.ready)
	}
	c.owners(startTimeout)
	c.startLB()
	t.Logf("cluster of %d NATS servers, %d chat nodes and nginx started in %s", len(c.nats), len(c.nodes), time.Since(began).Round(time.Millisecond))
	t.Cleanup(c.stop)
	return c
}

// stop stops the load balancer, then the nodes together (they hand their partitions over while
// NATS and the store are still up), then the NATS servers together. Each process's own cleanup
// would do the same one process at a time.
func (c *cluster) stop() {
	began := time.Now()
	c.lb.stop()
	stopAll := func(ps []*process) {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Go(p.stop)
		}
		wg.Wait()
	}
	var nodes, servers []*process
	for _, n := range c.nodes {
		nodes = append(nodes, n.process)
	}
	for _, s := range c.nats {
		servers = append(servers, s.process)
	}
	stopAll(nodes)
	stopAll(servers)
	c.t.Logf("cluster stopped in %s", time.Since(began).Round(time.Millisecond))
}

func (c *cluster) startNATS() {
	bin := testenv.NATSBinary.Path(c.t)
	ports := testenv.FreePorts(c.t, 3*clusterSize)
	routes := make([]string, clusterSize)
	for i := range clusterSize {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[2*clusterSize+i])
	}
	conf, err := filepath.Abs(filepath.Join(repoRoot, "nats.conf"))
	if err != nil {
		c.t.Fatalf("find nats.conf: %v", err)
	}
	for i := range clusterSize {
		name := fmt.Sprintf("nats-%d", i+1)
		s := &natsServer{clientPort: ports[i], monitorPort: ports[clusterSize+i]}
		s.process = startProcess(c.t, c.dir, name,
			[]string{"NATS_SERVER_NAME=" + name, "NATS_STORE_DIR=" + filepath.Join(c.dir, name)},
			bin, "-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(s.clientPort), "-m", strconv.Itoa(s.monitorPort),
			"--cluster", routes[i], "--routes", strings.Join(routes, ","))
		c.nats = append(c.nats, s)
	}
}

func (c *cluster) natsURLs() string {
	urls := make([]string, len(c.nats))
	for i, s := range c.nats {
		urls[i] = s.url()
	}
	return strings.Join(urls, ",")
}

func (c *cluster) startNodes() {
	bin := testenv.ChatdBinary.Path(c.t)
	ports := testenv.FreePorts(c.t, 2*clusterSize)
	for i := range clusterSize {
		id := fmt.Sprintf("chat-%d", i+1)
		n := &chatNode{id: id, port: ports[2*i], adminPort: ports[2*i+1]}
		n.process = startProcess(c.t, c.dir, id, []string{
			"CHAT_NODE_ID=" + id,
			"CHAT_ADDR=127.0.0.1:" + strconv.Itoa(n.port),
			"CHAT_ADMIN_ADDR=127.0.0.1:" + strconv.Itoa(n.adminPort),
			"CHAT_DATA_DIR=" + filepath.Join(c.dir, id),
			"CHAT_MONGO_URI=" + c.store.URI,
			"CHAT_MONGO_DB=" + c.store.Database,
			"CHAT_NATS_URL=" + c.natsURLs(),
			// One secret for every node, with dev-mode sign-in, so a token from any node is good
			// on all of them.
			"CHAT_JWT_SECRET=" + string(testenv.TestSecret),
			"CHAT_DEV_MODE=true",
			"CHAT_PARTITIONS=" + strconv.Itoa(testPartitions),
			"CHAT_LEASE_REPLICAS=3",
			// The tests send as fast as acks come back, from few connections.
			"CHAT_SEND_RATE=-1",
		}, bin)
		c.nodes = append(c.nodes, n)
	}
}

// live returns the nodes whose process is running.
func (c *cluster) live() []*chatNode {
	var out []*chatNode
	for _, n := range c.nodes {
		if n.alive() == nil {
			out = append(out, n)
		}
	}
	return out
}

// owners waits until the live nodes together own every partition exactly once, each owning at
// least one, and returns the owner of each partition.
func (c *cluster) owners(timeout time.Duration) map[int]*chatNode {
	c.t.Helper()
	var owner map[int]*chatNode
	// Each error says which of "every partition owned by exactly one node, every node owning
	// some" does not hold yet.
	testenv.CheckFor(c.t, timeout, pollInterval, func() error {
		owner = make(map[int]*chatNode)
		for _, n := range c.live() {
			owned, err := n.owned()
			if err != nil {
				return err
			}
			if len(owned) == 0 {
				return fmt.Errorf("%s owns no partition", n.id)
			}
			for _, p := range owned {
				if other, ok := owner[p]; ok {
					return fmt.Errorf("partition %d owned by both %s and %s", p, other.id, n.id)
				}
				owner[p] = n
			}
		}
		for p := range testPartitions {
			if owner[p] == nil {
				return fmt.Errorf("partition %d has no owner", p)
			}
		}
		return nil
	})
	return owner
}

// startLB renders the repository's nginx templates for this cluster and starts nginx.
func (c *cluster) startLB() {
	bin := nginxBinary(c.t)
	port := testenv.FreePorts(c.t, 1)[0]
	runDir := filepath.Join(c.dir, "nginx")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		c.t.Fatalf("make nginx dir: %v", err)
	}
	var upstreams strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&upstreams, "server 127.0.0.1:%d max_fails=1 fail_timeout=5s; ", n.port)
	}
	c.accessLog = filepath.Join(c.dir, "nginx-access.log")
	renderTemplate(c.t, "local.conf.template", filepath.Join(runDir, "nginx.conf"), map[string]string{
		"CHAT_LB_RUN_DIR": runDir,
	})
	renderTemplate(c.t, "chat.conf.template", filepath.Join(runDir, "chat.conf"), map[string]string{
		"CHAT_LB_LISTEN":     "127.0.0.1:" + strconv.Itoa(port),
		"CHAT_LB_UPSTREAMS":  upstreams.String(),
		"CHAT_LB_ACCESS_LOG": c.accessLog,
	})
	c.lb = startProcess(c.t, c.dir, "nginx", nil, bin, "-p", runDir, "-c", "nginx.conf", "-e", "stderr")
	c.lbURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.CheckFor(c.t, startTimeout, pollInterval, func() error {
		if err := c.lb.alive(); err != nil {
			return err
		}
		if _, err := getOK(c.lbURL + "/lb/healthz"); err != nil {
			return fmt.Errorf("nginx not answering: %w", err)
		}
		return nil
	})
}

// renderTemplate fills the ${NAME} placeholders of deploy/nginx/<name> and writes the result to
// dst; a placeholder left unfilled fails the test.
func renderTemplate(t testing.TB, name, dst string, values map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "nginx", name))
	if err != nil {
		t.Fatalf("read nginx template: %v", err)
	}
	text := string(data)
	for k, v := range values {
		text = strings.ReplaceAll(text, "${"+k+"}", v)
	}
	if i := strings.Index(text, "${CHAT_LB_"); i >= 0 {
		t.Fatalf("%s: placeholder %s... left unfilled", name, text[i:min(len(text), i+30)])
	}
	if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
		t.Fatalf("write %s: %v", dst, err)
	}
}

// wsSessions counts, by node, the WebSocket sessions nginx has logged. nginx logs a request when
// it ends, so a session appears once it is closed.
func (c *cluster) wsSessions() (map[string]int, error) {
	data, err := os.ReadFile(c.accessLog)
	if err != nil {
		return nil, fmt.Errorf("read nginx access log: %w", err)
	}
	byPort := make(map[string]string, len(c.nodes))
	for _, n := range c.nodes {
		byPort["127.0.0.1:"+strconv.Itoa(n.port)] = n.id
	}
	counts := make(map[string]int)
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, `"GET /ws" 101 `) {
			continue
		}
		_, upstream, _ := strings.Cut(line, "upstream=")
		upstream, _, _ = strings.Cut(upstream, " ")
		node, ok := byPort[upstream]
		if !ok {
			return nil, fmt.Errorf("access log names an unknown upstream: %s", line)
		}
		counts[node]++
	}
	return counts, nil
}

// natsServerOf returns the NATS server a chat node's connection is on.
func (c *cluster) natsServerOf(n *chatNode) (*natsServer, error) {
	for _, s := range c.nats {
		if s.alive() != nil {
			continue
		}
		names, err := s.clientNames()
		if err != nil {
			return nil, err
		}
		if slices.Contains(names, "chatd "+n.id) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s is connected to no NATS server", n.id)
}

// streamLeader returns the NATS server leading a JetStream stream, as the live servers report it.
func (c *cluster) streamLeader(stream string) (*natsServer, error) {
	for _, s := range c.nats {
		if s.alive() != nil {
			continue
		}
		body, err := getOK(fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", s.monitorPort))
		if err != nil {
			return nil, err
		}
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if err := json.Unmarshal(body, &jsz); err != nil {
			return nil, fmt.Errorf("decode jsz of %s: %w", s.name, err)
		}
		for _, a := range jsz.Accounts {
			for _, st := range a.Streams {
				if st.Name != stream {
					continue
				}
				for _, leader := range c.nats {
					if leader.name == st.Cluster.Leader {
						return leader, nil
					}
				}
				return nil, fmt.Errorf("stream %s is led by %q, not one of the test's servers", stream, st.Cluster.Leader)
			}
		}
	}
	return nil, fmt.Errorf("no live server knows stream %s", stream)
}

// openStore opens the cluster's store from the test, to check what was stored.
func (c *cluster) openStore() *storage.Store {
	return testenv.OpenStore(c.t, c.store)
}
