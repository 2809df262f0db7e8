package cluster

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/sequencer"
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
	// pollInterval is how often conditions are polled (testenv.CheckFor); short against every
	// bound waited for.
	pollInterval = 50 * time.Millisecond
)

// repoRoot is where nats.conf is, seen from this package's directory.
const repoRoot = ".."

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
	*testenv.Process
	clientPort, monitorPort int
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.clientPort) }

// healthy asks the monitoring endpoint's full health check, which answers 200 once the server
// listens for clients and routes, is current with the JetStream meta leader and every stream and
// consumer replica it holds has caught up: for a restarted server, once it has rejoined
// JetStream. The monitoring port must be the server's own for its answer to count.
func (s *natsServer) healthy() error {
	if err := s.Alive(); err != nil {
		return err
	}
	if err := s.Holds(s.monitorPort); err != nil {
		return err
	}
	if _, err := getOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", s.monitorPort)); err != nil {
		return fmt.Errorf("%s not healthy: %w", s.Name, err)
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
		return nil, fmt.Errorf("decode connz of %s: %w", s.Name, err)
	}
	names := make([]string, len(connz.Connections))
	for i, c := range connz.Connections {
		names[i] = c.Name
	}
	return names, nil
}

// chatNode is one chatd process.
type chatNode struct {
	*testenv.Process
	id        string
	port      int
	adminPort int
}

func (n *chatNode) url() string { return fmt.Sprintf("http://127.0.0.1:%d", n.port) }

// adminURL is the node's admin listener: metrics, /debug/partitions.
func (n *chatNode) adminURL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.adminPort) }

func (n *chatNode) ready() error {
	if err := n.Alive(); err != nil {
		return err
	}
	if err := n.Holds(n.port, n.adminPort); err != nil {
		return err
	}
	if _, err := getOK(n.url() + "/readyz"); err != nil {
		return fmt.Errorf("%s not ready: %w", n.id, err)
	}
	return nil
}

// owned asks the node which partitions it owns right now.
func (n *chatNode) owned() ([]int, error) {
	if err := n.Alive(); err != nil {
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

// starve takes CPU time away from the running node for total: it stops it (SIGSTOP) for
// stopped, lets it run (SIGCONT) for running, and so on, then leaves it running. A cleanup sends
// SIGCONT too, so a test that ends early never leaves a process stopped.
func (n *chatNode) starve(t testing.TB, total, stopped, running time.Duration) {
	t.Helper()
	t.Cleanup(func() { n.Signal(syscall.SIGCONT) })
	defer n.Signal(syscall.SIGCONT)
	for end := time.Now().Add(total); time.Now().Before(end); {
		n.Signal(syscall.SIGSTOP)
		time.Sleep(stopped) // the pattern itself, not a wait for a condition
		n.Signal(syscall.SIGCONT)
		time.Sleep(running)
	}
}

// cluster is one deployment started for a test: a NATS cluster, a shared store, chat nodes and
// nginx in front. Clients reach it only through lb.URL.
type cluster struct {
	t     *testing.T
	dir   string
	nats  []*natsServer
	store storage.Config
	nodes []*chatNode
	lb    *testenv.Nginx
}

// startCluster starts everything and returns once every node is ready, the partitions are
// spread over all nodes, and nginx answers.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	began := time.Now()
	c := &cluster{t: t, dir: t.TempDir()}
	c.store = testenv.StoreConfig(t)
	c.startNATS()
	c.startNodes()
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
	_ = c.lb.Stop() // how the load balancer exits is no part of any test
	testenv.StopAll(c.nodes)
	testenv.StopAll(c.nats)
	c.t.Logf("cluster stopped in %s", time.Since(began).Round(time.Millisecond))
}

// startNATS starts the NATS servers and returns once every one is healthy. The test picks their
// ports (testenv.StartOnPorts), not the kernel: each server's routes name every cluster port
// before any server starts, and a restarted server comes back on the ports it had.
func (c *cluster) startNATS() {
	bin := testenv.NATSBinary.Path(c.t)
	conf, err := filepath.Abs(filepath.Join(repoRoot, "nats.conf"))
	if err != nil {
		c.t.Fatalf("find nats.conf: %v", err)
	}
	testenv.StartOnPorts(c.t, 3*clusterSize, func(ports []int) error {
		routes := make([]string, clusterSize)
		for i := range clusterSize {
			routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[2*clusterSize+i])
		}
		c.nats = nil
		for i := range clusterSize {
			name := fmt.Sprintf("nats-%d", i+1)
			storeDir := filepath.Join(c.dir, name)
			if err := os.RemoveAll(storeDir); err != nil { // what a try that failed left
				return err
			}
			s := &natsServer{clientPort: ports[i], monitorPort: ports[clusterSize+i]}
			env := []string{"NATS_SERVER_NAME=" + name, "NATS_STORE_DIR=" + storeDir}
			args := []string{"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(s.clientPort), "-m", strconv.Itoa(s.monitorPort),
				"--cluster", routes[i], "--routes", strings.Join(routes, ",")}
			s.Process = testenv.StartProcess(c.t, c.dir, name, env, bin, args...)
			c.nats = append(c.nats, s)
		}
		return testenv.WaitStarted(c.nats, startTimeout, c.natsHealthy)
	})
}

// natsHealthy returns nil once every NATS server passes its full health check.
func (c *cluster) natsHealthy() error {
	for _, s := range c.nats {
		if err := s.healthy(); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) natsURLs() string {
	urls := make([]string, len(c.nats))
	for i, s := range c.nats {
		urls[i] = s.url()
	}
	return strings.Join(urls, ",")
}

// startNodes starts the chat nodes and returns once every one is ready. The test picks their
// ports (testenv.StartOnPorts), not the kernel: nginx lists every node's port, and still does
// after a test kills the node, and no listener on port 0 may take that port meanwhile.
func (c *cluster) startNodes() {
	bin := testenv.ChatdBinary.Path(c.t)
	testenv.StartOnPorts(c.t, 2*clusterSize, func(ports []int) error {
		c.nodes = nil
		for i := range clusterSize {
			id := fmt.Sprintf("chat-%d", i+1)
			n := &chatNode{id: id, port: ports[2*i], adminPort: ports[2*i+1]}
			n.Process = testenv.StartProcess(c.t, c.dir, id, []string{
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
		return testenv.WaitStarted(c.nodes, startTimeout, func() error {
			for _, n := range c.nodes {
				if err := n.ready(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// live returns the nodes whose process is running.
func (c *cluster) live() []*chatNode {
	var out []*chatNode
	for _, n := range c.nodes {
		if n.Alive() == nil {
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
	testenv.CheckFor(c.t, timeout, pollInterval, func() (err error) {
		owner, err = c.ownersNow()
		return err
	})
	return owner
}

// ownersNow returns the owner of each partition if the live nodes together own every partition
// exactly once, each owning at least one; else an error says which of these does not hold.
func (c *cluster) ownersNow() (map[int]*chatNode, error) {
	owner := make(map[int]*chatNode)
	for _, n := range c.live() {
		owned, err := n.owned()
		if err != nil {
			return nil, err
		}
		if len(owned) == 0 {
			return nil, fmt.Errorf("%s owns no partition", n.id)
		}
		for _, p := range owned {
			if other, ok := owner[p]; ok {
				return nil, fmt.Errorf("partition %d owned by both %s and %s", p, other.id, n.id)
			}
			owner[p] = n
		}
	}
	for p := range testPartitions {
		if owner[p] == nil {
			return nil, fmt.Errorf("partition %d has no owner", p)
		}
	}
	return owner, nil
}

// ownershipQuiet is how long ownership must stay the same before a test counts later changes as
// moves: a handover still going on from the cluster's start shows within a few renewals.
const ownershipQuiet = 3 * time.Second

// settledOwners waits until every partition has one owner and nothing changed for
// ownershipQuiet, and returns the owner of each partition.
func (c *cluster) settledOwners(timeout time.Duration) map[int]*chatNode {
	c.t.Helper()
	var (
		owner, last map[int]*chatNode
		since       time.Time
	)
	testenv.CheckFor(c.t, timeout, pollInterval, func() (err error) {
		if owner, err = c.ownersNow(); err != nil {
			return err
		}
		if !maps.Equal(owner, last) {
			last, since = owner, time.Now()
		}
		if quiet := time.Since(since); quiet < ownershipQuiet {
			return fmt.Errorf("ownership unchanged for only %s", quiet.Round(time.Millisecond))
		}
		return nil
	})
	return owner
}

// startLB starts nginx in front of the nodes (testenv.StartNginx), with the repository's
// configuration.
func (c *cluster) startLB() {
	var upstreams strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&upstreams, "server 127.0.0.1:%d max_fails=1 fail_timeout=5s; ", n.port)
	}
	c.lb = testenv.StartNginx(c.t, filepath.Join(c.dir, "nginx"), upstreams.String())
}

// wsSessions counts, by node, the WebSocket sessions nginx has logged. nginx logs a request when
// it ends, so a session appears once it is closed.
func (c *cluster) wsSessions() (map[string]int, error) {
	data, err := os.ReadFile(c.lb.AccessLog)
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
		if s.Alive() != nil {
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

// The JetStream streams that hold partition ownership.
const (
	// leaseStream is the partition claims bucket's stream.
	leaseStream = "KV_" + sequencer.DefaultSubjectPrefix + "-partitions"
	// nodesStream is the node heartbeats bucket's stream.
	nodesStream = "KV_" + sequencer.DefaultSubjectPrefix + "-nodes"
	// metaGroup stands for the JetStream meta group among the stream names of jetStreamLeaders.
	metaGroup = "JetStream meta group"
)

// jetStreamLeaders returns the name of the server leading the JetStream meta group (under
// metaGroup) and each stream, as the live servers report them; a group electing a leader at
// that moment has "".
func (c *cluster) jetStreamLeaders() (map[string]string, error) {
	leaders := make(map[string]string)
	asked := 0
	for _, s := range c.nats {
		if s.Alive() != nil {
			continue
		}
		body, err := getOK(fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", s.monitorPort))
		if err != nil {
			continue // a server still starting; the others know as much
		}
		var jsz struct {
			Meta struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
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
			return nil, fmt.Errorf("decode jsz of %s: %w", s.Name, err)
		}
		asked++
		if leaders[metaGroup] == "" {
			leaders[metaGroup] = jsz.Meta.Leader
		}
		for _, a := range jsz.Accounts {
			for _, st := range a.Streams {
				if leaders[st.Name] == "" {
					leaders[st.Name] = st.Cluster.Leader
				}
			}
		}
	}
	if asked == 0 {
		return nil, errors.New("no live NATS server answers /jsz")
	}
	return leaders, nil
}

// natsNamed returns the test's server of that name.
func (c *cluster) natsNamed(name string) (*natsServer, error) {
	for _, s := range c.nats {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%q is not one of the test's NATS servers", name)
}

// streamLeader returns the NATS server leading a JetStream stream, as the live servers report it.
func (c *cluster) streamLeader(stream string) (*natsServer, error) {
	leaders, err := c.jetStreamLeaders()
	if err != nil {
		return nil, err
	}
	name, ok := leaders[stream]
	switch {
	case !ok:
		return nil, fmt.Errorf("no live server knows stream %s", stream)
	case name == "":
		return nil, fmt.Errorf("stream %s has no leader", stream)
	}
	return c.natsNamed(name)
}

// ledBy lists what the server named leads among the ownership streams and the meta group.
func ledBy(leaders map[string]string, name string) []string {
	var led []string
	for _, what := range []string{leaseStream, nodesStream, metaGroup} {
		if leaders[what] == name {
			led = append(led, what)
		}
	}
	return led
}

// ownershipLeader waits until the ownership state has a leader and returns that server: the
// leader of the partition claims stream, or of the heartbeat stream where there is no claims
// stream, with everything it leads among them and the meta group.
func (c *cluster) ownershipLeader(timeout time.Duration) (*natsServer, []string) {
	c.t.Helper()
	var (
		leader *natsServer
		led    []string
	)
	testenv.CheckFor(c.t, timeout, pollInterval, func() error {
		leaders, err := c.jetStreamLeaders()
		if err != nil {
			return err
		}
		for _, stream := range []string{leaseStream, nodesStream} {
			name, ok := leaders[stream]
			if !ok {
				continue
			}
			if name == "" {
				return fmt.Errorf("stream %s has no leader", stream)
			}
			if leader, err = c.natsNamed(name); err != nil {
				return err
			}
			led = ledBy(leaders, name)
			return nil
		}
		return fmt.Errorf("neither %s nor %s exists; leaders: %v", leaseStream, nodesStream, leaders)
	})
	return leader, led
}

// gatherOwnershipLeaders makes one server lead the whole ownership state, so that killing it is
// the worst case every time rather than when the elections happen to fall that way: it asks the
// streams of both ownership buckets to hand their leadership to the JetStream meta leader (the
// meta group itself can be moved only from the system account, which nats.conf does not set
// up), and waits until that server leads them all.
func (c *cluster) gatherOwnershipLeaders(timeout time.Duration) {
	c.t.Helper()
	var target string
	testenv.CheckFor(c.t, timeout, pollInterval, func() error {
		leaders, err := c.jetStreamLeaders()
		if err != nil {
			return err
		}
		if target = leaders[metaGroup]; target == "" {
			return errors.New("no JetStream meta leader")
		}
		return nil
	})
	nc, err := nats.Connect(c.natsURLs(), nats.Name("cluster test"))
	if err != nil {
		c.t.Fatalf("connect to NATS: %v", err)
	}
	defer nc.Close()
	request, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": target}})
	if err != nil {
		c.t.Fatalf("encode stepdown request: %v", err)
	}
	// Each pass asks every stream not led by target yet to step down in its favour; an election
	// may still be settling from the previous pass, so the check is retried.
	testenv.CheckFor(c.t, timeout, 500*time.Millisecond, func() error {
		leaders, err := c.jetStreamLeaders()
		if err != nil {
			return err
		}
		var pending []string
		for _, stream := range []string{leaseStream, nodesStream} {
			leader, ok := leaders[stream]
			if !ok || leader == target {
				continue
			}
			pending = append(pending, stream+" led by "+leader)
			if leader == "" {
				continue // electing
			}
			reply, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, request, 2*time.Second)
			if err != nil {
				return fmt.Errorf("ask %s to step down: %w", stream, err)
			}
			var answer struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(reply.Data, &answer); err != nil {
				return fmt.Errorf("decode stepdown answer of %s: %w", stream, err)
			}
			if answer.Error != nil {
				return fmt.Errorf("%s refused to step down to %s: %s", stream, target, answer.Error.Description)
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("not all led by %s yet: %s", target, strings.Join(pending, ", "))
		}
		return nil
	})
}

// ledNow lists what the server leads among the ownership streams and the meta group right now,
// for the test log; it says so when the servers cannot tell.
func (c *cluster) ledNow(s *natsServer) string {
	leaders, err := c.jetStreamLeaders()
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	if led := ledBy(leaders, s.Name); len(led) > 0 {
		return strings.Join(led, ", ")
	}
	return "none of the ownership streams or the meta group"
}

// openStore opens the cluster's store from the test, to check what was stored.
func (c *cluster) openStore() *storage.Store {
	return testenv.OpenStore(c.t, c.store)
}

// ownershipSampleInterval is how often an ownershipSampler asks every node what it owns: often
// enough to see a partition that was unowned for a moment, short against a lease TTL.
const ownershipSampleInterval = 200 * time.Millisecond

// ownershipSampler asks every chat node which partitions it owns, every
// ownershipSampleInterval, from a moment when ownership has settled until stop, so a test can
// tell a partition that moved to another node from one that was unowned for a moment.
type ownershipSampler struct {
	c       *cluster
	began   time.Time
	initial map[int]*chatNode
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	report  ownershipReport

	mu      sync.Mutex
	samples []ownershipSample
}

// ownershipSample is what the nodes said at one moment.
type ownershipSample struct {
	at     time.Time
	claims map[int][]string // partition -> the nodes that said they own it
	failed []string         // running nodes whose /debug/partitions did not answer
	dead   map[string]bool  // nodes whose process had exited: they own nothing
}

// sampleOwnership waits for ownership to settle (settledOwners) and starts sampling; stop ends
// it, and so does the end of the test.
func (c *cluster) sampleOwnership() *ownershipSampler {
	c.t.Helper()
	s := &ownershipSampler{c: c, initial: c.settledOwners(startTimeout), quit: make(chan struct{}), done: make(chan struct{})}
	s.began = time.Now()
	s.take()
	go s.run()
	c.t.Cleanup(func() { s.stop() })
	return s
}

func (s *ownershipSampler) run() {
	defer close(s.done)
	tick := time.NewTicker(ownershipSampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-tick.C:
			s.take()
		}
	}
}

// take asks every node at once, so the answers describe nearly one moment.
func (s *ownershipSampler) take() {
	sample := ownershipSample{at: time.Now(), claims: make(map[int][]string), dead: make(map[string]bool)}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, n := range s.c.nodes {
		wg.Go(func() {
			owned, err := n.owned()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case n.Alive() != nil:
				sample.dead[n.id] = true
			case err != nil:
				sample.failed = append(sample.failed, n.id)
			default:
				for _, p := range owned {
					sample.claims[p] = append(sample.claims[p], n.id)
				}
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	s.samples = append(s.samples, sample)
	s.mu.Unlock()
}

// elapsed is the time since the sampling began, the origin of the times in its report.
func (s *ownershipSampler) elapsed() string {
	return "+" + time.Since(s.began).Round(time.Millisecond).String()
}

// stop ends the sampling with one last sample and returns what the samples show.
func (s *ownershipSampler) stop() ownershipReport {
	s.once.Do(func() {
		close(s.quit)
		<-s.done
		s.take()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.report = analyseOwnership(s.began, s.samples)
	})
	return s.report
}

// ownershipReport is what a sampler saw.
type ownershipReport struct {
	duration time.Duration
	samples  int
	// moves are partitions whose owner became another node, directly or after no node owned
	// them for a while; blips are partitions no node owned for a while that came back on the
	// same node.
	moves, blips []partitionMove
	// unownedAtEnd are partitions no node owned at the last sample.
	unownedAtEnd []int
	// doubled counts partition samples that two nodes claimed at once.
	doubled int
	// failed counts, per node, the answers that did not come while its process was running.
	failed map[string]int
}

// partitionMove is one change of a partition's owner, or a blip when from and to are the same.
type partitionMove struct {
	partition int
	from, to  string
	// at is when the new owner was first seen, from the start of the sampling.
	at time.Duration
	// unowned is how long no node owned the partition before, as far as the samples tell; zero
	// when the new owner was seen right after the old one.
	unowned time.Duration
	// fromAlive is whether the old owner's process was still running when the new owner was
	// seen: a move away from a live node, which nothing but a rebalance should cause.
	fromAlive bool
}

func (m partitionMove) String() string {
	from := m.from
	if !m.fromAlive {
		from += " (dead)"
	}
	return fmt.Sprintf("partition %d %s -> %s at +%s after %s unowned", m.partition, from, m.to,
		m.at.Round(time.Millisecond), m.unowned.Round(time.Millisecond))
}

// analyseOwnership follows each partition through the samples. A sample in which a running node
// did not answer says nothing about the partitions nobody claimed (that node may own them), and
// a sample in which two nodes claimed a partition says nothing about it either (the two answers
// come from moments a few milliseconds apart).
func analyseOwnership(began time.Time, samples []ownershipSample) ownershipReport {
	r := ownershipReport{samples: len(samples), failed: make(map[string]int)}
	if len(samples) > 0 {
		r.duration = samples[len(samples)-1].at.Sub(began)
	}
	for _, sample := range samples {
		for _, id := range sample.failed {
			r.failed[id]++
		}
	}
	for p := range testPartitions {
		var (
			owner         string    // last node seen owning p alone
			unownedSince  time.Time // first sample since then in which nobody owned p; zero if none
			unownedAtLast bool
		)
		for _, sample := range samples {
			claims := sample.claims[p]
			switch {
			case len(claims) > 1:
				r.doubled++
				continue
			case len(claims) == 0 && len(sample.failed) > 0:
				continue
			case len(claims) == 0:
				if unownedSince.IsZero() {
					unownedSince = sample.at
				}
				unownedAtLast = true
				continue
			}
			unownedAtLast = false
			now := claims[0]
			if owner != "" && (now != owner || !unownedSince.IsZero()) {
				m := partitionMove{partition: p, from: owner, to: now, at: sample.at.Sub(began), fromAlive: !sample.dead[owner]}
				if !unownedSince.IsZero() {
					m.unowned = sample.at.Sub(unownedSince)
				}
				if now == owner {
					r.blips = append(r.blips, m)
				} else {
					r.moves = append(r.moves, m)
				}
			}
			owner, unownedSince = now, time.Time{}
		}
		if unownedAtLast {
			r.unownedAtEnd = append(r.unownedAtEnd, p)
		}
	}
	sortMoves := func(ms []partitionMove) {
		slices.SortFunc(ms, func(a, b partitionMove) int { return cmp.Compare(a.at, b.at) })
	}
	sortMoves(r.moves)
	sortMoves(r.blips)
	return r
}

// liveMoves returns the moves away from a node that was still running: partitions a live node
// lost.
func (r ownershipReport) liveMoves() []partitionMove {
	var out []partitionMove
	for _, m := range r.moves {
		if m.fromAlive {
			out = append(out, m)
		}
	}
	return out
}

// lostBy returns the moves away from one node.
func (r ownershipReport) lostBy(id string) []partitionMove {
	var out []partitionMove
	for _, m := range r.moves {
		if m.from == id {
			out = append(out, m)
		}
	}
	return out
}

// log writes the report to the test log, one line of figures and one line per change.
func (r ownershipReport) log(t testing.TB) {
	t.Helper()
	t.Logf("ownership over %s (%d samples): %d moves between live nodes, %d from dead nodes, %d partitions unowned for a while that came back on the same node, unowned at the end %v, %d doubly claimed samples, failed answers %v",
		r.duration.Round(time.Millisecond), r.samples, len(r.liveMoves()), len(r.moves)-len(r.liveMoves()), len(r.blips), r.unownedAtEnd, r.doubled, r.failed)
	const most = 20
	for i, m := range slices.Concat(r.moves, r.blips) {
		if i == most {
			t.Logf("  ... and %d more", len(r.moves)+len(r.blips)-most)
			break
		}
		kind := "moved"
		if m.from == m.to {
			kind = "blip"
		}
		t.Logf("  %s: %s", kind, m)
	}
}
