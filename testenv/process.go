package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// processStopTimeout is how long a child process gets after SIGTERM before SIGKILL: a chat
// node's graceful stop has stages of up to 10 s each.
const processStopTimeout = 30 * time.Second

// Process is a child process of a test: a server the test runs as its own program (chatstore,
// chatd, nats-server, nginx), in its own process group, with what it writes to stdout and stderr
// appended to a log file.
type Process struct {
	// Name names the process in errors and in the test log.
	Name string
	// Log is the path of its log file, which every run of the process appends to.
	Log string

	bin  string
	args []string
	env  []string

	mu  sync.Mutex
	run *processRun // the current run; Restart replaces it
}

// processRun is one run of a Process.
type processRun struct {
	cmd     *exec.Cmd
	logFrom int64         // the log's size when this run started: what it wrote comes after
	exited  chan struct{} // closed once it has exited and err is set
	err     error         // why it exited
}

// StartProcess starts bin with args, and env added to the test's environment without its CHAT_,
// NATS_ and GOGC settings (so nothing from the developer's shell changes how the child runs). Its
// output goes to <dir>/<name>.log. It is stopped when the test ends (Stop), and if the test failed
// the end of its log goes into the test log. It returns once the process has started, not once it
// serves: the caller waits for that (WaitStarted).
func StartProcess(t testing.TB, dir, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, Log: filepath.Join(dir, name+".log"), bin: bin, args: args, env: env}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop() // why it exited is the test's business, and only if it asked (Stop)
		if t.Failed() {
			t.Logf("end of the log of %s:\n%s", name, p.Tail(25))
		}
	})
	return p
}

// Restart starts the process again as it was started, after it exited (Kill, Stop or on its own),
// as a supervisor or an operator brings a server back; its output continues the same log. The
// cleanup of StartProcess stops this run too.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	if p.Alive() == nil {
		t.Fatalf("restart %s: it is still running", p.Name)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
}

func (p *Process) start() error {
	out, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the log of %s: %w", p.Name, err)
	}
	info, err := out.Stat()
	if err != nil {
		_ = out.Close()
		return fmt.Errorf("open the log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(childEnv(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a signal reaches nginx's workers with their master; and SIGKILL
	// if the test binary dies, so no server outlives a crashed or timed-out test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	r := &processRun{cmd: cmd, logFrom: info.Size(), exited: make(chan struct{})}
	go func() { // ends when the child exits, which the test's cleanup sees to at the latest
		r.err = cmd.Wait()
		_ = out.Close() // the child has exited; nothing more is written
		close(r.exited)
	}()
	p.mu.Lock()
	p.run = r
	p.mu.Unlock()
	return nil
}

// current returns the current run.
func (p *Process) current() *processRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.run
}

// childEnv is the test's environment without CHAT_, NATS_ and GOGC settings.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAT_") && !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "GOGC=") {
			env = append(env, kv)
		}
	}
	return env
}

// Pid is the process id of the current run.
func (p *Process) Pid() int { return p.current().cmd.Process.Pid }

// Alive returns nil while the process runs, and once it has exited an error saying how, with the
// end of its log. The error wraps ErrGiveUp: a wait for a condition of a process that is gone ends
// at once.
func (p *Process) Alive() error {
	r := p.current()
	select {
	case <-r.exited:
		return fmt.Errorf("%s exited (%v), %w; end of its log:\n%s", p.Name, r.err, ErrGiveUp, p.Tail(15))
	default:
		return nil
	}
}

// Holds returns nil if the process itself listens on every one of ports on 127.0.0.1. A server
// started on ports the test picked may find one taken and exit, and until it has, whatever took
// the port answers there in its name (HoldsPort).
func (p *Process) Holds(ports ...int) error {
	for _, port := range ports {
		if err := HoldsPort(p.Pid(), port); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return nil
}

// Signal sends sig to the process's group.
func (p *Process) Signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.Pid(), sig) // it may have exited already; Wait reports that
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.current().exited
}

// Stop ends the process gracefully (SIGTERM), or with SIGKILL after 30 s, and returns why it
// exited: nil for a clean exit. A process that had exited already is left as it is.
func (p *Process) Stop() error {
	r := p.current()
	select {
	case <-r.exited:
		return r.err
	default:
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(processStopTimeout):
		p.Kill()
	}
	return r.err
}

// Output returns what the current run has written to the log so far.
func (p *Process) Output() (string, error) {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return "", err
	}
	return string(data[min(p.current().logFrom, int64(len(data))):]), nil
}

// LogLines returns the lines of the log, of every run, that contain s.
func (p *Process) LogLines(s string) []string {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return []string{fmt.Sprintf("(cannot read %s: %v)", p.Log, err)}
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// Tail returns the last n lines of the log, for failure messages.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.Log, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// StopAll stops the processes together.
func StopAll[P interface{ Stop() error }](ps []P) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Stop() }) // stopped, not checked: a test that cares calls Stop itself
	}
	wg.Wait()
}

// WaitStarted polls (every 50 ms, up to timeout) until ready returns nil while the processes just
// started all run. If one exits first (on a port that was taken, say), it returns at once why,
// with the end of its log; on any error it stops them all, so that a new try (StartOnPorts) can
// start afresh.
func WaitStarted[P interface {
	Alive() error
	Stop() error
}](ps []P, timeout time.Duration, ready func() error) error {
	err := Poll(timeout, 50*time.Millisecond, func() error {
		for _, p := range ps {
			if err := p.Alive(); err != nil {
				return err
			}
		}
		return ready()
	})
	if err != nil {
		StopAll(ps)
	}
	return err
}
