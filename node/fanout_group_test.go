package node_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// This file holds the fan-out benchmarks' group of fanMembers receivers, in this process or in a
// process of its own (BenchmarkFanoutApart5000): this test binary run again with receiverChildEnv
// set, which TestMain hands to runReceiverChild. The two processes speak in lines: the child
// writes "ready", "joined", "first <receiver> <unix ns>", "last <receiver> <unix ns>",
// "problems <text>" and "fail <text>" on its stdout; it reads "check" on its stdin, and ends when
// its stdin does. A stamp is taken in the child when its receiver read the frame, so when the
// line reaches this process does not change the figures.

// receiverChildEnv, set, makes this test binary the receivers' process: "chatd <http base>" or
// "bare <ws base>" (receiverTarget.spec).
const receiverChildEnv = "CHAT_FANOUT_RECEIVERS"

// fanChildTimeout bounds a question to the receivers' process and its end once told to stop.
const fanChildTimeout = 30 * time.Second

// groupReceivers are the fanMembers receivers of a fan-out benchmark, counting the message
// frames of the group into the tally they were started with.
type groupReceivers interface {
	// joined is how many receivers were told of a conversation (always 0 for the bare server).
	joined() int64
	// problems describes what went wrong so far: sockets the server closed, message frames that
	// were not their receiver's next seq; empty if nothing.
	problems() string
	// sample is a message frame a receiver got, or nil if none or the receivers are apart.
	sample() []byte
	close()
}

// receiverTarget is what the receivers connect to.
type receiverTarget struct {
	chatd bool   // sign in as the names of groupNames on the node; otherwise the bare server
	url   string // the node's http:// base, or the bare server's ws:// base
}

func (t receiverTarget) spec() string {
	if t.chatd {
		return "chatd " + t.url
	}
	return "bare " + t.url
}

func parseTarget(spec string) (receiverTarget, error) {
	kind, url, ok := strings.Cut(spec, " ")
	if !ok || (kind != "chatd" && kind != "bare") {
		return receiverTarget{}, fmt.Errorf("%s=%q: want \"chatd <url>\" or \"bare <url>\"", receiverChildEnv, spec)
	}
	return receiverTarget{chatd: kind == "chatd", url: url}, nil
}

func (t receiverTarget) dialer() func(ctx context.Context, i int) (*websocket.Conn, error) {
	if t.chatd {
		return chatdDialer(t.url, groupNames())
	}
	return func(ctx context.Context, _ int) (*websocket.Conn, error) {
		c, _, err := websocket.Dial(ctx, t.url+"/ws", nil)
		return c, err
	}
}

// groupNames are the receivers' user names on the node (dev-mode user ids are the names).
func groupNames() []string {
	names := make([]string, fanMembers)
	for i := range names {
		names[i] = fmt.Sprintf("fan%04d", i)
	}
	return names
}

// startGroup connects the receivers to target, here or, if apart, in a process of their own.
func startGroup(ctx context.Context, apart bool, target receiverTarget, fan *tally) (groupReceivers, error) {
	if apart {
		g, err := startChildGroup(ctx, target, fan)
		if err != nil {
			return nil, err
		}
		return g, nil
	}
	count := newGroupCount(fan, target.chatd)
	recv, err := dialReceivers(ctx, fanMembers, target.dialer(), count.onFrame)
	if err != nil {
		return nil, err
	}
	return &localGroup{recv: recv, count: count}, nil
}

// groupCount is what the receivers learn from their frames.
type groupCount struct {
	fan      *tally
	checkSeq bool // the bare server sends the same frame every round
	lastSeq  []int64
	badSeq   atomic.Int64 // message frames whose seq was not the receiver's last plus one
	joinedN  atomic.Int64 // receivers told of a conversation
	first    atomic.Pointer[[]byte]
}

func newGroupCount(fan *tally, checkSeq bool) *groupCount {
	return &groupCount{fan: fan, checkSeq: checkSeq, lastSeq: make([]int64, fanMembers)}
}

// onFrame is receiver i's reader's handler of every frame it reads.
func (g *groupCount) onFrame(i int, data []byte) {
	switch {
	case bytes.HasPrefix(data, fanMessagePrefix):
		seq := frameSeq(data)                    // the bare side parses it too, to cost what chatd's side does
		if g.checkSeq && seq != g.lastSeq[i]+1 { // only this receiver's reader touches its element
			g.badSeq.Add(1)
		}
		g.lastSeq[i] = seq
		if i == 0 && g.first.Load() == nil {
			frame := bytes.Clone(data)
			g.first.Store(&frame)
		}
		g.fan.add(i)
	case bytes.HasPrefix(data, fanConversationPrefix):
		g.joinedN.Add(1)
	}
}

// problems describes bad seqs and the sockets of recv the server closed.
func (g *groupCount) problems(recv *receivers) string {
	var out []string
	if n := g.badSeq.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d message frames were not the next seq of their receiver (gap, duplicate or reorder)", n))
	}
	if s := recv.unexpectedCloses(); s != "" {
		out = append(out, "the server closed receivers' sockets: "+s)
	}
	return strings.Join(out, "; ")
}

// localGroup is the receivers in this process.
type localGroup struct {
	recv  *receivers
	count *groupCount
}

func (g *localGroup) joined() int64    { return g.count.joinedN.Load() }
func (g *localGroup) problems() string { return g.count.problems(g.recv) }
func (g *localGroup) close()           { g.recv.close() }

func (g *localGroup) sample() []byte {
	if p := g.count.first.Load(); p != nil {
		return *p
	}
	return nil
}

// childGroup is the receivers in a process of their own.
type childGroup struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	fan     *tally
	ready   chan struct{} // closed when every receiver is connected
	ended   chan struct{} // closed when the child's output ends
	answers chan string   // to "check"
	joinedN atomic.Int64
	failed  atomic.Pointer[string] // the child's "fail" line
	mu      sync.Mutex             // one question at a time
}

func startChildGroup(ctx context.Context, target receiverTarget, fan *tally) (*childGroup, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), receiverChildEnv+"="+target.spec())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("receivers' process stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("receivers' process stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the receivers' process: %w", err)
	}
	g := &childGroup{cmd: cmd, stdin: stdin, fan: fan, ready: make(chan struct{}), ended: make(chan struct{}),
		answers: make(chan string, 1)}
	go g.listen(stdout) // ends with the child's output; close waits for that
	select {
	case <-g.ready:
		return g, nil
	case <-g.ended:
		g.close()
		return nil, fmt.Errorf("the receivers' process ended before its receivers connected: %s", g.failure())
	case <-ctx.Done():
		g.close()
		return nil, fmt.Errorf("connect the receivers' process: %w", ctx.Err())
	}
}

// listen reads the child's lines until its output ends.
func (g *childGroup) listen(stdout io.Reader) {
	defer close(g.ended)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		switch word {
		case "ready":
			close(g.ready)
		case "joined":
			g.joinedN.Store(fanMembers)
		case "first", "last":
			s, err := parseStamp(rest)
			if err != nil {
				msg := err.Error()
				g.failed.CompareAndSwap(nil, &msg)
				continue
			}
			ch := g.fan.firsts
			if word == "last" {
				ch = g.fan.lasts
			}
			offer(ch, s)
		case "problems":
			select { // an answer that came after problems gave up is dropped, never waited on
			case g.answers <- rest:
			default:
			}
		case "fail":
			g.failed.CompareAndSwap(nil, &rest)
		}
	}
}

func parseStamp(s string) (stamp, error) {
	who, ns, _ := strings.Cut(s, " ")
	w, err1 := strconv.Atoi(who)
	n, err2 := strconv.ParseInt(ns, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return stamp{}, fmt.Errorf("receivers' process stamp %q: %w", s, err)
	}
	return stamp{at: time.Unix(0, n), who: w}, nil
}

func (g *childGroup) failure() string {
	if p := g.failed.Load(); p != nil {
		return *p
	}
	return "no reason given"
}

func (g *childGroup) joined() int64  { return g.joinedN.Load() }
func (g *childGroup) sample() []byte { return nil }

func (g *childGroup) problems() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := io.WriteString(g.stdin, "check\n"); err != nil {
		return fmt.Sprintf("ask the receivers' process: %v (%s)", err, g.failure())
	}
	select {
	case answer := <-g.answers:
		return answer
	case <-g.ended:
		return "the receivers' process ended: " + g.failure()
	case <-time.After(fanChildTimeout):
		return fmt.Sprintf("the receivers' process did not answer within %s", fanChildTimeout)
	}
}

// close ends the child by ending its stdin, killing it if it does not end in time.
func (g *childGroup) close() {
	_ = g.stdin.Close() // the child's signal to stop; an error means it is gone already
	select {
	case <-g.ended:
	case <-time.After(fanChildTimeout):
		_ = g.cmd.Process.Kill()
		<-g.ended
	}
	_ = g.cmd.Wait() // its exit status says no more than its lines did
}

// runReceiverChild is the receivers' process: it connects fanMembers receivers to the target of
// spec and reports on stdout until its stdin ends. It returns the process's exit code.
func runReceiverChild(spec string) int {
	out := &lineWriter{w: os.Stdout}
	target, err := parseTarget(spec)
	if err != nil {
		out.say("fail %v", err)
		return 2
	}
	fan := newTally(fanMembers)
	count := newGroupCount(fan, target.chatd)
	ctx, cancel := context.WithTimeout(context.Background(), fanSetupTimeout)
	recv, err := dialReceivers(ctx, fanMembers, target.dialer(), count.onFrame)
	cancel()
	if err != nil {
		out.say("fail connect receivers: %v", err)
		return 1
	}
	defer recv.close()
	out.say("ready")

	stop := make(chan struct{})
	var reporter sync.WaitGroup
	reporter.Go(func() { reportStamps(out, fan, count, stop) })
	defer reporter.Wait()
	defer close(stop)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "check" {
			out.say("problems %s", count.problems(recv))
		}
	}
	return 0
}

// reportStamps writes the child's stamps as they come, and "joined" once every receiver was told
// of a conversation, until stop.
func reportStamps(out *lineWriter, fan *tally, count *groupCount, stop <-chan struct{}) {
	joinedPoll := time.NewTicker(20 * time.Millisecond)
	defer joinedPoll.Stop()
	for {
		select {
		case s := <-fan.firsts:
			out.say("first %d %d", s.who, s.at.UnixNano())
		case s := <-fan.lasts:
			out.say("last %d %d", s.who, s.at.UnixNano())
		case <-joinedPoll.C:
			if count.joinedN.Load() >= fanMembers {
				out.say("joined")
				joinedPoll.Stop() // once
			}
		case <-stop:
			return
		}
	}
}

// lineWriter writes whole lines, one write each, so the reader sees each at once.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) say(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ") + "\n"
	if _, err := io.WriteString(l.w, line); err != nil {
		fmt.Fprintf(os.Stderr, "receivers' process: write %q: %v\n", line, err)
	}
}
