package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nginxStartTimeout bounds nginx's start: it takes milliseconds; the margin is for a loaded
// machine.
const nginxStartTimeout = 30 * time.Second

// Nginx is an nginx process started by StartNginx: the load balancer the repository ships, in
// front of chat nodes.
type Nginx struct {
	*Process
	// URL is where clients reach it: http://127.0.0.1:<port>.
	URL string
	// AccessLog is its access log: a line a request, naming the node that served it (upstream=).
	AccessLog string
}

// StartNginx renders the repository's nginx templates (deploy/nginx) into dir, with upstreams as
// the chat nodes (server directives on one line, as chat.conf.template says), and starts nginx on
// a port picked by StartOnPorts: nginx listens where its configuration says. It returns once nginx
// holds that port and answers /lb/healthz; it is stopped when the test ends. Without nginx
// installed the test fails: the tests that call it are about the real load balancer.
func StartNginx(t testing.TB, dir, upstreams string) *Nginx {
	t.Helper()
	bin := nginxBinary(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("make nginx's directory: %v", err)
	}
	lb := &Nginx{AccessLog: filepath.Join(dir, "access.log")}
	renderNginx(t, "local.conf.template", filepath.Join(dir, "nginx.conf"), map[string]string{"CHAT_LB_RUN_DIR": dir})
	StartOnPorts(t, 1, func(ports []int) error {
		listen := "127.0.0.1:" + strconv.Itoa(ports[0])
		renderNginx(t, "chat.conf.template", filepath.Join(dir, "chat.conf"), map[string]string{
			"CHAT_LB_LISTEN":     listen,
			"CHAT_LB_UPSTREAMS":  upstreams,
			"CHAT_LB_ACCESS_LOG": lb.AccessLog,
		})
		lb.URL = "http://" + listen
		lb.Process = StartProcess(t, dir, "nginx", nil, bin, "-p", dir, "-c", "nginx.conf", "-e", "stderr")
		// On a port taken meanwhile nginx tries to bind for 2.5 s, then exits saying so.
		return WaitStarted([]*Process{lb.Process}, nginxStartTimeout, func() error {
			if err := lb.Holds(ports[0]); err != nil {
				return err
			}
			return lbHealthy(lb.URL)
		})
	})
	return lb
}

// lbHealthy returns nil if nginx answers its own health check with 200.
func lbHealthy(url string) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url + "/lb/healthz")
	if err != nil {
		return fmt.Errorf("nginx not answering: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nginx not answering: GET /lb/healthz: %s", resp.Status)
	}
	return nil
}

// nginxBinary finds Debian's nginx, which is not on a non-root PATH.
func nginxBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Fatal("nginx is not installed: this test runs behind a real nginx (scripts/test installs it; apt-get install nginx)")
	return ""
}

// renderNginx fills the ${NAME} placeholders of deploy/nginx/<name> and writes the result to dst;
// a placeholder left unfilled fails the test.
func renderNginx(t testing.TB, name, dst string, values map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "nginx", name))
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

// repoRoot is the repository's root: the nearest directory above the test's own (go test runs a
// test in its package's directory) that holds go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory: run the test with go test")
		}
		dir = parent
	}
}
