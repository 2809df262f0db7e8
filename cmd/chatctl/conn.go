package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

// tokenPath is where login saves the token: $XDG_CONFIG_HOME/chatctl/token, or
// ~/.config/chatctl/token.
func (c *cli) tokenPath() (string, error) {
	dir := c.getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := c.getenv("HOME")
		if home == "" {
			return "", errors.New("neither XDG_CONFIG_HOME nor HOME is set; pass -token or set CHAT_TOKEN")
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "chatctl", "token"), nil
}

// saveToken writes the token readable by its owner only: it is a password for its lifetime.
func (c *cli) saveToken(token string) (string, error) {
	path, err := c.tokenPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create config directory: %w", err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save token: %w", err)
	}
	return path, nil
}

// bearer returns the token to use: -token, then CHAT_TOKEN, then the saved file.
func (c *cli) bearer() (string, error) {
	if c.token != "" {
		return c.token, nil
	}
	path, err := c.tokenPath()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", errors.New("not signed in: run chatctl login <name>, or pass -token or set CHAT_TOKEN")
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// errUnauthorized is a refused token; no retry helps.
var errUnauthorized = errors.New("the server refused the token (HTTP 401); sign in again with chatctl login")

// session is an open connection and the user it is signed in as.
type session struct {
	conn   *client.Conn
	userID string
}

// connect dials the server and waits for its hello, so the session is open and its user known
// before any request is sent.
func (c *cli) connect(ctx context.Context) (*session, error) {
	token, err := c.bearer()
	if err != nil {
		return nil, err
	}
	u, err := wsURL(c.server)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	conn, err := client.Dial(ctx, u, token, nil)
	var de *client.DialError
	if errors.As(err, &de) && de.Status == http.StatusUnauthorized {
		return nil, errUnauthorized
	}
	if err != nil {
		return nil, &redacted{err: err, secret: token}
	}
	for {
		select {
		case f, ok := <-conn.Pushes():
			if !ok {
				return nil, fmt.Errorf("the server closed the connection before greeting: %w", conn.Err())
			}
			if f.Type == protocol.TypeHello {
				return &session{conn: conn, userID: f.UserID}, nil
			}
		case <-ctx.Done():
			_ = conn.Close() // the handshake failed already; its close error adds nothing
			return nil, fmt.Errorf("waiting for the server's hello: %w", ctx.Err())
		}
	}
}

// redacted hides a secret that an error's text would show: the dial error quotes the URL, and
// the URL carries the token.
type redacted struct {
	err    error
	secret string
}

func (e *redacted) Error() string { return strings.ReplaceAll(e.err.Error(), e.secret, "REDACTED") }
func (e *redacted) Unwrap() error { return e.err }

// close ends the session; a close that fails after the command's work is done is not reported.
func (s *session) close() { _ = s.conn.Close() }

// retryable reports whether a failed send may be repeated with the same clientMsgId: the server
// said so, or the reply never came (timeout, lost connection), which leaves the outcome unknown.
func retryable(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, errUnauthorized)
}
