// Command chatbench is a load generator for chat nodes (issue 8). It signs in N users on dev-mode
// nodes, opens one WebSocket per user spread over several source addresses, creates DMs and groups
// among them, sends at a target rate for a duration and reports acked sends per second, send->ack
// and send->delivered latency percentiles, delivered messages per second, errors by code and, given
// the nodes' process ids, their resident memory per connection. With -idle it only opens the
// connections and holds them, for the memory measurement; -floor then measures a bare
// coder/websocket server holding as many connections in the same run, the floor chatd's memory
// per connection is compared with.
//
// Each message carries its send time, so delivery latency is computed by the receiver with no
// shared state; that also lets the load be spread over several processes (-procs), which the
// per-process limit on open files requires past about 19,000 connections.
//
// `chatbench seed` writes a data set straight into the store and `chatbench page` times history
// pages at given depths (seed.go, page.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults, each with its reason.
const (
	// defaultSendLimit is the server's per-connection send rate (session.DefaultSendRate); the
	// bench warns when one connection's share of the load would exceed it.
	defaultSendLimit = 20
	// defaultSources spreads loopback connections over 16 source addresses: about 450,000
	// source ports, more than one node can hold.
	defaultSources = "127.0.0.2-127.0.0.17"
	// spareFiles is what a process needs besides its sockets: stdio, the sign-in pool, pipes.
	spareFiles = 100
)

// config is one run, or one process's share of it: children get theirs as JSON.
type config struct {
	URLs             []string      `json:"urls"`
	Clients          int           `json:"clients"`
	UserPrefix       string        `json:"userPrefix"`
	UserOffset       int           `json:"userOffset"`
	Index            int           `json:"index"`
	Sources          string        `json:"sources"`
	DMs              int           `json:"dms"`
	Groups           int           `json:"groups"`
	GroupSize        int           `json:"groupSize"`
	Senders          int           `json:"senders"`
	Rate             float64       `json:"rate"`
	Duration         time.Duration `json:"duration"`
	Drain            time.Duration `json:"drain"`
	Timeout          time.Duration `json:"timeout"`
	BodyBytes        int           `json:"bodyBytes"`
	MaxInflight      int           `json:"maxInflight"`
	DialConcurrency  int           `json:"dialConcurrency"`
	SetupConcurrency int           `json:"setupConcurrency"`
	Seed             int64         `json:"seed"`

	// Only the parent uses these.
	Idle       bool          `json:"-"`
	Floor      bool          `json:"-"`
	Warmup     bool          `json:"-"`
	Hold       time.Duration `json:"-"`
	Settle     time.Duration `json:"-"`
	Procs      int           `json:"-"`
	ServerPIDs []int         `json:"-"`
	StorePID   int           `json:"-"`
	JSON       bool          `json:"-"`
	CPUProfile string        `json:"-"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getenv(floorEnv) != "" {
		if err := runFloorServer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "chatbench floor server:", err)
			os.Exit(1)
		}
		return
	}
	if spec := os.Getenv(childEnv); spec != "" {
		if err := runChild(ctx, spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "chatbench child:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "seed" || os.Args[1] == "page") {
		if err := runSubcommand(ctx, os.Args[1], os.Args[2:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return
			}
			fmt.Fprintf(os.Stderr, "chatbench %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(2)
	}
	stopProfile := func() {}
	if cfg.CPUProfile != "" {
		if stopProfile, err = startCPUProfile(cfg.CPUProfile); err != nil {
			fmt.Fprintln(os.Stderr, "chatbench:", err)
			os.Exit(1)
		}
	}
	rep, err := runBench(ctx, cfg, os.Stderr)
	stopProfile() // written whole before the os.Exit of a failed run, which skips deferred calls
	if rep != nil {
		if perr := rep.print(os.Stdout, cfg.JSON); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(1)
	}
}

// startCPUProfile profiles the generator into path until the returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "chatbench: cpu profile:", err)
		}
	}, nil
}

// runSubcommand runs `chatbench seed` or `chatbench page`.
func runSubcommand(ctx context.Context, name string, args []string) error {
	if name == "seed" {
		cfg, err := parseSeedFlags(args, os.Getenv, os.Stderr)
		if err != nil {
			return err
		}
		return runSeed(ctx, cfg, os.Stderr)
	}
	cfg, err := parsePageFlags(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	return runPage(ctx, cfg, os.Stdout)
}

func parseFlags(args []string, getenv func(string) string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("chatbench", flag.ContinueOnError)
	server := getenv("CHAT_SERVER")
	if server == "" {
		server = "http://localhost:8080"
	}
	urls := fs.String("url", server, "comma-separated node base URLs; users are spread over them round robin (CHAT_SERVER)")
	fs.IntVar(&cfg.Clients, "clients", 100, "connections to open, one user each")
	fs.StringVar(&cfg.UserPrefix, "prefix", "cb", "user names are <prefix><n>; use a new prefix for a fresh set of users")
	sources := fs.String("source-ips", "auto", `source addresses, e.g. "127.0.0.2-127.0.0.17,127.0.1.1"; "auto" spreads over `+defaultSources+` when every URL is on loopback; "none" lets the kernel pick`)
	fs.IntVar(&cfg.DMs, "dms", -1, "DMs to create between pairs of users; default clients/2 unless -groups or -idle is given")
	fs.IntVar(&cfg.Groups, "groups", 0, "groups to create")
	fs.IntVar(&cfg.GroupSize, "group-size", 10, "members per group, the creator included")
	fs.IntVar(&cfg.Senders, "senders", 0, "members of each conversation who send; 0 means all (in large groups few people talk)")
	fs.Float64Var(&cfg.Rate, "rate", 100, "target sends per second, over all connections")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to send")
	fs.DurationVar(&cfg.Drain, "drain", 10*time.Second, "how long to wait after the last ack for deliveries still in flight")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "bound on one sign-in, dial or request")
	fs.IntVar(&cfg.BodyBytes, "body-bytes", 0, "pad message bodies to this size")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 50000, "sends waiting for acks before further sends are skipped (and counted)")
	fs.IntVar(&cfg.DialConcurrency, "dial-concurrency", 32, "sign-ins and dials in flight at once")
	fs.IntVar(&cfg.SetupConcurrency, "setup-concurrency", 8, "conversations being created at once")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of the send order")
	fs.BoolVar(&cfg.Warmup, "warmup", true, "send one unmeasured message to every conversation first, so owners have loaded them")
	fs.BoolVar(&cfg.Idle, "idle", false, "only open the connections, create the -dms and -groups if given (none by default), and hold them (memory per connection)")
	fs.BoolVar(&cfg.Floor, "floor", false, "with -idle, then hold as many idle connections to a bare coder/websocket server (a child process) and report its memory per connection and chatd's ratio to it")
	fs.DurationVar(&cfg.Hold, "hold", 0, "with -idle, how long to hold the connections; 0 holds until interrupted")
	fs.DurationVar(&cfg.Settle, "settle", 5*time.Second, "wait after connecting before reading the servers' memory")
	fs.IntVar(&cfg.Procs, "procs", 1, "processes to spread the connections over (each process may hold about 19,900 sockets)")
	pids := fs.String("server-pid", "", "comma-separated process ids of the nodes, to report their memory (VmRSS) per connection")
	fs.IntVar(&cfg.StorePID, "store-pid", 0, "process id of the store (chatstore), to report the CPU it used signing in, connecting and sending")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as JSON")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write the generator's own CPU profile to this file (what measuring costs on a shared machine)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, u := range strings.Split(*urls, ",") {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return cfg, fmt.Errorf("url %q must start with http:// or https://", u)
		}
		cfg.URLs = append(cfg.URLs, u)
	}
	for _, p := range strings.Split(*pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pid, err := strconv.Atoi(p)
		if err != nil {
			return cfg, fmt.Errorf("server pid %q: %w", p, err)
		}
		cfg.ServerPIDs = append(cfg.ServerPIDs, pid)
	}
	switch *sources {
	case "none":
	case "auto":
		if allLoopback(cfg.URLs) {
			cfg.Sources = defaultSources
		}
	default:
		if _, err := parseSources(*sources); err != nil {
			return cfg, err
		}
		cfg.Sources = *sources
	}
	if cfg.DMs < 0 {
		cfg.DMs = 0
		if cfg.Groups == 0 && !cfg.Idle {
			cfg.DMs = cfg.Clients / 2
		}
	}
	switch {
	case cfg.Clients < 1:
		return cfg, errors.New("-clients must be at least 1")
	case cfg.Procs < 1 || cfg.Procs > cfg.Clients:
		return cfg, errors.New("-procs must be between 1 and -clients")
	case cfg.Floor && !cfg.Idle:
		return cfg, errors.New("-floor needs -idle")
	case !cfg.Idle && cfg.Rate <= 0:
		return cfg, errors.New("-rate must be positive")
	case cfg.GroupSize < 2 && cfg.Groups > 0:
		return cfg, errors.New("-group-size must be at least 2")
	}
	return cfg, nil
}

func allLoopback(urls []string) bool {
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return false
		}
		h := u.Hostname()
		if h != "localhost" && !strings.HasPrefix(h, "127.") {
			return false
		}
	}
	return true
}

// split divides the run between procs processes: each gets a contiguous range of users, its share
// of the conversations and of the rate.
func split(cfg config) []config {
	shares := make([]config, cfg.Procs)
	offset := 0
	for i := range shares {
		s := cfg
		s.Index = i
		s.Clients = part(cfg.Clients, cfg.Procs, i)
		s.UserOffset = offset
		offset += s.Clients
		s.DMs = part(cfg.DMs, cfg.Procs, i)
		s.Groups = part(cfg.Groups, cfg.Procs, i)
		s.Rate = cfg.Rate * float64(s.Clients) / float64(cfg.Clients)
		shares[i] = s
	}
	return shares
}

// part is the i-th of n near-equal parts of total.
func part(total, n, i int) int {
	p := total / n
	if i < total%n {
		p++
	}
	return p
}

// checkFiles fails early when a process could not hold its sockets.
func checkFiles(perProcess int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the open-file limit: %w", err)
	}
	if need := uint64(perProcess + spareFiles); need > lim.Cur {
		return fmt.Errorf("each process needs about %d open files but may hold %d: raise ulimit -n or use more -procs", need, lim.Cur)
	}
	return nil
}

// logf reports progress on stderr.
func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// encodeConfig is the JSON a child process receives its share in.
func encodeConfig(cfg config) (string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encode child config: %w", err)
	}
	return string(b), nil
}
