package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// floorEnv makes a chatbench process the bare server of -floor instead of a load generator.
const floorEnv = "CHATBENCH_FLOOR"

// The floor of -idle -floor is the memory a WebSocket costs in a server that does nothing but
// hold it: coder/websocket, as chatd uses it, in a process of its own so that its RSS is its own,
// with one reader goroutine (the HTTP server's, as in chatd) and one writer goroutine per
// connection that echoes what the reader got, the shape of most Go WebSocket servers. No sign-in,
// no pings, no queues, no registry. It is measured in the same run as chatd, so that both figures
// see the same machine, the same load on it and the same clients.

// runFloorServer serves bare WebSockets on a loopback port, writes the port's address to out and
// serves until in ends.
func runFloorServer(in io.Reader, out io.Writer) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serveFloor), ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	if _, err := fmt.Fprintln(out, l.Addr().String()); err != nil {
		return fmt.Errorf("write address: %w", err)
	}
	_, _ = io.Copy(io.Discard, in) // the parent closes stdin when it is done
	_ = srv.Close()                // hijacked connections die with the process
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// serveFloor holds one bare WebSocket: it reads on the HTTP server's goroutine and echoes what it
// reads from a writer goroutine.
func serveFloor(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echo := make(chan []byte, 1)
	var writer sync.WaitGroup
	defer writer.Wait()
	defer close(echo)
	writer.Go(func() {
		for data := range echo {
			if c.Write(ctx, websocket.MessageText, data) != nil {
				cancel()
			}
		}
	})
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		select {
		case echo <- data:
		case <-ctx.Done():
			return
		}
	}
}

// floorServer is the bare server running as a child process.
type floorServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

func startFloorServer(stderr io.Writer) (*floorServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floorEnv+"=1")
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("floor server stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("floor server stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start floor server: %w", err)
	}
	f := &floorServer{cmd: cmd, stdin: stdin}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = f.stop()
		return nil, fmt.Errorf("read the floor server's address: %w", err)
	}
	f.url = "ws://" + strings.TrimSpace(addr) + "/"
	return f, nil
}

func (f *floorServer) pid() int { return f.cmd.Process.Pid }

func (f *floorServer) stop() error {
	_ = f.stdin.Close() // the server exits at end of input; Wait reports how
	if err := f.cmd.Wait(); err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	return nil
}

// measureFloor starts the bare server, holds cfg.Clients idle connections to it for cfg.Settle
// and returns its memory before and with them.
func measureFloor(ctx context.Context, cfg config, log io.Writer) (rep rssReport, err error) {
	srv, err := startFloorServer(log)
	if err != nil {
		return rep, err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	sources, err := parseSources(cfg.Sources)
	if err != nil {
		return rep, err
	}
	d := newDialer(sources)
	if rep.BeforeKiB, err = rssKiB(srv.pid()); err != nil {
		return rep, err
	}
	logf(log, "floor: connecting %d WebSockets to a bare coder/websocket server", cfg.Clients)
	conns := make([]*websocket.Conn, cfg.Clients)
	var readers sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	parallel(cfg.Clients, cfg.DialConcurrency, func(i int) {
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		c, _, err := websocket.Dial(dctx, srv.url, &websocket.DialOptions{HTTPClient: d.next()})
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		conns[i] = c
		// Read so that a close from the server is seen; the bare server sends nothing else.
		readers.Go(func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		})
	})
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.CloseNow()
			}
		}
		readers.Wait()
	}()
	if p := firstErr.Load(); p != nil {
		return rep, fmt.Errorf("floor: %d of %d connections failed, the first with: %w", failed.Load(), cfg.Clients, *p)
	}
	rep.Connections = int64(cfg.Clients)
	logf(log, "floor: %d connected; waiting %s for memory to settle", cfg.Clients, cfg.Settle)
	sleep(ctx, cfg.Settle)
	if rep.ConnectedKiB, err = rssKiB(srv.pid()); err != nil {
		return rep, err
	}
	return rep, nil
}
