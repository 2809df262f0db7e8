package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// childEnv carries a child process's share of the run, as JSON.
const childEnv = "CHATBENCH_CHILD"

// share is one process's part of the run: the worker in this process, or a child process that
// runs a worker and answers each phase with its result on one line of JSON.
type share interface {
	run(ctx context.Context, phase string) (*result, error)
	stop() error
}

type localShare struct{ w *worker }

func (s localShare) run(ctx context.Context, phase string) (*result, error) {
	return s.w.run(ctx, phase)
}
func (s localShare) stop() error { return nil }

type childShare struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startChild(cfg config, stderr io.Writer) (*childShare, error) {
	spec, err := encodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child %d: %w", cfg.Index, err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	return &childShare{cmd: cmd, stdin: stdin, lines: lines}, nil
}

// run asks the child for one phase. A phase is not interrupted half way: the child sees the
// interrupt too and ends its phase early by itself.
func (s *childShare) run(_ context.Context, phase string) (*result, error) {
	if _, err := io.WriteString(s.stdin, phase+"\n"); err != nil {
		return nil, fmt.Errorf("ask child for %s: %w", phase, err)
	}
	if !s.lines.Scan() {
		if err := s.lines.Err(); err != nil {
			return nil, fmt.Errorf("read child's %s result: %w", phase, err)
		}
		return nil, fmt.Errorf("child exited during %s", phase)
	}
	var r result
	if err := json.Unmarshal(s.lines.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("decode child's %s result: %w", phase, err)
	}
	return &r, nil
}

func (s *childShare) stop() error {
	_ = s.stdin.Close() // the child exits at end of input; Wait reports how
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("child: %w", err)
	}
	return nil
}

// runChild is a child process: it runs the phases its parent names, one per input line.
func runChild(ctx context.Context, spec string, in io.Reader, out io.Writer) error {
	var cfg config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	w, err := newWorker(cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	closed := false
	for sc.Scan() {
		r, err := w.run(ctx, sc.Text())
		if err != nil {
			return err
		}
		closed = closed || sc.Text() == phaseClose
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	if !closed {
		w.closeAll()
	}
	return sc.Err()
}

// runAll runs a phase on every share at once and merges what they report.
func runAll(ctx context.Context, shares []share, phase string) (*result, error) {
	results := make([]*result, len(shares))
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	for i, s := range shares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.run(ctx, phase)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	merged := &result{}
	for _, r := range results {
		merged.merge(r)
	}
	return merged, nil
}

// runBench runs the whole benchmark and returns its report; on an error the report holds what was
// measured before it.
func runBench(ctx context.Context, cfg config, log io.Writer) (rep *report, err error) {
	log = &lockedWriter{w: log} // the children's stderr is copied into it too
	shareCfgs := split(cfg)
	perProcess := shareCfgs[0].Clients
	if cfg.Floor {
		perProcess = max(perProcess, cfg.Clients) // this process holds every floor connection
	}
	if err := checkFiles(perProcess); err != nil {
		return nil, err
	}
	var shares []share
	defer func() {
		for _, s := range shares {
			if serr := s.stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	if cfg.Procs == 1 {
		w, err := newWorker(shareCfgs[0])
		if err != nil {
			return nil, err
		}
		shares = append(shares, localShare{w})
	} else {
		for _, sc := range shareCfgs {
			s, err := startChild(sc, log)
			if err != nil {
				return nil, err
			}
			shares = append(shares, s)
		}
	}
	rep = newReport(cfg)
	sample := func(what string) int64 {
		kib, err := totalRSS(cfg.ServerPIDs)
		if err != nil {
			logf(log, "cannot read server memory %s: %v", what, err)
		}
		return kib
	}

	storeCPU := func() float64 {
		if cfg.StorePID == 0 {
			return 0
		}
		return serverCPU([]int{cfg.StorePID})
	}

	logf(log, "signing in %d users over %d URL(s), %d process(es)", cfg.Clients, len(cfg.URLs), cfg.Procs)
	cpuBefore := storeCPU()
	if rep.Login, err = runAll(ctx, shares, phaseLogin); err != nil {
		return rep, err
	}
	rep.StoreCPU.SignIn = storeCPU() - cpuBefore
	rep.RSS.BeforeKiB = sample("before connecting")
	logf(log, "connecting %d WebSockets", rep.Login.OK)
	cpuBefore = storeCPU()
	if rep.Connect, err = runAll(ctx, shares, phaseConnect); err != nil {
		return rep, err
	}
	rep.StoreCPU.Connect = storeCPU() - cpuBefore
	if cfg.Idle && (cfg.DMs > 0 || cfg.Groups > 0) {
		// Idle users in a few conversations each: the node then holds their routes too.
		logf(log, "%d connected in %s; creating %d DMs and %d groups of %d", rep.Connect.OK,
			rep.Connect.Elapsed.Round(time.Millisecond), cfg.DMs, cfg.Groups, cfg.GroupSize)
		if rep.Setup, err = runAll(ctx, shares, phaseSetup); err != nil {
			return rep, err
		}
	}
	logf(log, "%d connected in %s; waiting %s for memory to settle", rep.Connect.OK, rep.Connect.Elapsed.Round(time.Millisecond), cfg.Settle)
	sleep(ctx, cfg.Settle)
	rep.RSS.ConnectedKiB = sample("after connecting")
	rep.RSS.Connections = rep.Connect.OK

	if cfg.Idle {
		if cfg.Hold > 0 {
			logf(log, "holding the connections for %s", cfg.Hold)
		} else {
			logf(log, "holding the connections until interrupted")
		}
		holdStart := time.Now()
		if cfg.Hold > 0 {
			sleep(ctx, cfg.Hold)
		} else {
			<-ctx.Done()
		}
		rep.RSS.HeldKiB = sample("after holding")
		rep.HeldFor = time.Since(holdStart)
		if ctx.Err() != nil {
			ctx = context.WithoutCancel(ctx) // the interrupt ends the hold, not the close
		}
	} else {
		logf(log, "creating %d DMs and %d groups of %d", cfg.DMs, cfg.Groups, cfg.GroupSize)
		if rep.Setup, err = runAll(ctx, shares, phaseSetup); err != nil {
			return rep, err
		}
		if rep.Setup.MaxConnRate > defaultSendLimit {
			logf(log, "warning: the busiest connection would send %.1f/s, above the server's default limit of %d/s; use more clients",
				rep.Setup.MaxConnRate, defaultSendLimit)
		}
		if cfg.Warmup {
			logf(log, "warming up: one send per conversation")
			if rep.Warmup, err = runAll(ctx, shares, phaseWarmup); err != nil {
				return rep, err
			}
		}
		logf(log, "sending %.0f/s for %s", cfg.Rate, cfg.Duration)
		cpuBefore, storeBefore := serverCPU(cfg.ServerPIDs), storeCPU()
		if rep.Drive, err = runAll(ctx, shares, phaseDrive); err != nil {
			return rep, err
		}
		rep.ServerCPUSeconds = serverCPU(cfg.ServerPIDs) - cpuBefore
		rep.StoreCPU.Drive = storeCPU() - storeBefore
		rep.RSS.AfterLoadKiB = sample("after the load")
	}
	logf(log, "closing")
	if _, err = runAll(ctx, shares, phaseClose); err != nil {
		return rep, err
	}
	if cfg.Floor {
		// After chatd's connections are closed, so that the floor's sockets and chatd's are
		// never open at once in this process.
		floor, err := measureFloor(ctx, cfg, log)
		if err != nil {
			return rep, err
		}
		rep.Floor = &floor
	}
	return rep, nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
