// Package client is a Go client of the chat protocol, used by chatctl, chatbench and the tests:
// dev-mode sign-in, dialing, requests matched to replies by id, and a stream of pushed frames.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
)

// Pushed frames wait for the reader of Pushes in a channel of pushBuffer frames and, past it, in
// an overflow that a pump goroutine moves into the channel while it is not empty; at most
// maxQueuedPushes wait in all before the client drops the connection: a test or tool that stops
// reading must not stall the socket silently. Nothing beyond the channel is allocated up front:
// a channel of maxQueuedPushes frames held 35 MB per connection, and a hundred test clients under
// the race detector stalled their process for seconds in page faults and collection.
const (
	pushBuffer      = 1024
	maxQueuedPushes = 65536
)

// Login signs in by display name on a dev-mode server and returns the token and user id.
func Login(ctx context.Context, httpClient *http.Client, baseURL, name string) (token, userID string, err error) {
	a, err := SignIn(ctx, httpClient, baseURL, name)
	return a.Token, a.UserID, err
}

// Account is what a dev-mode sign-in answers: a token, the user id it is for, and the user's
// display name (the clean form of the name given, or the one kept from an earlier sign-in).
type Account struct {
	Token  string `json:"token"`
	UserID string `json:"userId"`
	Name   string `json:"name"`
}

// SignIn signs in by display name on a dev-mode server, as Login does, and returns the whole
// answer.
func SignIn(ctx context.Context, httpClient *http.Client, baseURL, name string) (Account, error) {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		return Account{}, fmt.Errorf("encode login: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+"/api/login", bytes.NewReader(body))
	if err != nil {
		return Account{}, fmt.Errorf("build login request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return Account{}, fmt.Errorf("login as %s: %w", name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Account{}, fmt.Errorf("read login response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Account{}, fmt.Errorf("login as %s: %s: %s", name, resp.Status, bytes.TrimSpace(data))
	}
	var a Account
	if err := json.Unmarshal(data, &a); err != nil {
		return Account{}, fmt.Errorf("decode login response: %w", err)
	}
	return a, nil
}

// Options tune a connection; nil means defaults.
type Options struct {
	// HTTPClient dials the WebSocket; set its transport's dialer to pick a source address.
	HTTPClient *http.Client
	// Origin is sent as the Origin header; default none (non-browser clients send none).
	Origin string
	// Since is the sync sent on connect: per conversation, the highest seq the caller holds. The
	// server replays what follows before Dial returns, and holds live message pushes until then.
	Since map[string]int64
	// SkipSync sends no sync on connect, for callers that send their own first frame.
	SkipSync bool
}

// Conn is one WebSocket connection to a chat server.
type Conn struct {
	ws      *websocket.Conn
	nextID  atomic.Uint64
	mu      sync.Mutex
	waiting map[string]chan protocol.ServerFrame
	done    chan struct{} // closed by the read loop when the connection has ended
	err     error

	pushes chan protocol.ServerFrame // pushBuffer frames
	// The read loop puts pushes in the channel while nothing overflows, else in overflow, which
	// the pump moves into the channel in order. Whoever ends last of the read loop and the pump
	// closes the channel.
	overflowMu sync.Mutex
	overflow   []protocol.ServerFrame
	pumping    bool
	ended      bool // the read loop has ended
	pump       sync.WaitGroup
	closing    chan struct{} // closed by Close: the pump stops even if nobody reads
	closeOnce  sync.Once
}

// Dial connects to wsURL (ws://host/ws) with token.
func Dial(ctx context.Context, wsURL, token string, opts *Options) (*Conn, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := url.Parse(wsURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", wsURL, err)
	}
	q := u.Query()
	q.Set("token", token)
	u.RawQuery = q.Encode()
	header := http.Header{}
	if opts.Origin != "" {
		header.Set("Origin", opts.Origin)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: opts.HTTPClient, HTTPHeader: header})
	if err != nil {
		if resp != nil {
			return nil, &DialError{Status: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	ws.SetReadLimit(1 << 24)
	c := &Conn{
		ws:      ws,
		waiting: make(map[string]chan protocol.ServerFrame),
		done:    make(chan struct{}),
		pushes:  make(chan protocol.ServerFrame, pushBuffer),
		closing: make(chan struct{}),
	}
	go c.readLoop()
	if !opts.SkipSync {
		if _, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSync, Since: opts.Since}); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("sync on connect: %w", err)
		}
	}
	return c, nil
}

// DialError is a refused WebSocket upgrade with its HTTP status.
type DialError struct {
	Status int
	Err    error
}

func (e *DialError) Error() string {
	return "dial refused with HTTP " + strconv.Itoa(e.Status) + ": " + e.Err.Error()
}
func (e *DialError) Unwrap() error { return e.Err }

func (c *Conn) readLoop() {
	defer close(c.done)
	defer c.endPushes()
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		var f protocol.ServerFrame
		if err := json.Unmarshal(data, &f); err != nil {
			c.err = fmt.Errorf("decode server frame: %w", err)
			_ = c.ws.Close(websocket.StatusProtocolError, "undecodable frame")
			return
		}
		if f.ID != "" && c.deliverReply(f) {
			continue
		}
		if !c.enqueue(f) {
			c.err = errors.New("push queue full: nobody reads Pushes")
			_ = c.ws.Close(websocket.StatusPolicyViolation, "client too slow")
			return
		}
	}
}

// enqueue hands a push to Pushes, or to the overflow when the channel is full or the overflow
// is not empty (order), starting the pump if it is not running. It reports false when
// maxQueuedPushes already wait.
func (c *Conn) enqueue(f protocol.ServerFrame) bool {
	c.overflowMu.Lock()
	defer c.overflowMu.Unlock()
	if len(c.overflow) == 0 {
		select {
		case c.pushes <- f:
			return true
		default:
		}
	}
	if len(c.overflow) >= maxQueuedPushes-pushBuffer {
		return false
	}
	c.overflow = append(c.overflow, f)
	if !c.pumping {
		c.pumping = true
		c.pump.Go(c.pumpOverflow)
	}
	return true
}

// endPushes closes Pushes when the read loop ends, unless the pump still has frames to hand
// over: then the pump closes it.
func (c *Conn) endPushes() {
	c.overflowMu.Lock()
	defer c.overflowMu.Unlock()
	c.ended = true
	if !c.pumping {
		close(c.pushes)
	}
}

// pumpOverflow moves the overflow into Pushes in order until it is empty, or until Close.
func (c *Conn) pumpOverflow() {
	for {
		c.overflowMu.Lock()
		if len(c.overflow) == 0 {
			c.pumping = false
			if c.ended {
				close(c.pushes)
			}
			c.overflowMu.Unlock()
			return
		}
		f := c.overflow[0]
		c.overflowMu.Unlock()
		select {
		case c.pushes <- f:
			c.overflowMu.Lock()
			c.overflow[0] = protocol.ServerFrame{}
			c.overflow = c.overflow[1:]
			c.overflowMu.Unlock()
		case <-c.closing: // Close waited for the read loop: ended is set
			c.overflowMu.Lock()
			c.overflow, c.pumping = nil, false
			close(c.pushes)
			c.overflowMu.Unlock()
			return
		}
	}
}

func (c *Conn) deliverReply(f protocol.ServerFrame) bool {
	c.mu.Lock()
	ch, ok := c.waiting[f.ID]
	delete(c.waiting, f.ID)
	c.mu.Unlock()
	if ok {
		ch <- f
	}
	return ok
}

// Pushes streams every frame that is not a reply to a request: messages, badges, cursors,
// receipts. It is closed once the connection has ended (the frames still in it can be read), and
// frames beyond its buffer that nobody has read are dropped by Close.
func (c *Conn) Pushes() <-chan protocol.ServerFrame { return c.pushes }

// Done is closed when the connection has ended; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended; valid after Done is closed.
func (c *Conn) Err() error { return c.err }

// WriteRaw sends bytes as one text frame, for tests of malformed input.
func (c *Conn) WriteRaw(ctx context.Context, data []byte) error {
	if err := c.ws.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// Post sends a frame without waiting for a reply (read, typing).
func (c *Conn) Post(ctx context.Context, f protocol.ClientFrame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	return c.WriteRaw(ctx, data)
}

// Request sends a frame with a fresh id and waits for the reply with that id. An error frame
// comes back as a *protocol.Error.
func (c *Conn) Request(ctx context.Context, f protocol.ClientFrame) (protocol.ServerFrame, error) {
	f.ID = "r" + strconv.FormatUint(c.nextID.Add(1), 10)
	ch := make(chan protocol.ServerFrame, 1)
	c.mu.Lock()
	c.waiting[f.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, f.ID)
		c.mu.Unlock()
	}()
	if err := c.Post(ctx, f); err != nil {
		return protocol.ServerFrame{}, err
	}
	select {
	case r := <-ch:
		if r.Type == protocol.TypeError {
			return r, &protocol.Error{Code: r.Code, Message: r.Message, Retryable: r.Retryable,
				RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond}
		}
		return r, nil
	case <-c.done:
		return protocol.ServerFrame{}, fmt.Errorf("connection closed waiting for %s reply: %w", f.Type, c.err)
	case <-ctx.Done():
		return protocol.ServerFrame{}, fmt.Errorf("waiting for %s reply: %w", f.Type, ctx.Err())
	}
}

// Send sends a message with a new clientMsgId and waits for its ack.
func (c *Conn) Send(ctx context.Context, conversationID, body string) (protocol.ServerFrame, error) {
	return c.SendWithID(ctx, conversationID, uuid.NewString(), body)
}

// SendWithID sends a message with a chosen clientMsgId, as a retry does.
func (c *Conn) SendWithID(ctx context.Context, conversationID, clientMsgID, body string) (protocol.ServerFrame, error) {
	return c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: conversationID, ClientMsgID: clientMsgID, Body: body})
}

// OpenDM opens (or finds) the DM with userID.
func (c *Conn) OpenDM(ctx context.Context, userID string) (protocol.Conversation, error) {
	r, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeOpenDM, UserID: userID})
	return conversationOf(r, err)
}

// CreateGroup creates a group with the caller and members.
func (c *Conn) CreateGroup(ctx context.Context, name string, members []string) (protocol.Conversation, error) {
	r, err := c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeCreateGroup, Name: name, Members: members})
	return conversationOf(r, err)
}

func conversationOf(r protocol.ServerFrame, err error) (protocol.Conversation, error) {
	if err != nil {
		return protocol.Conversation{}, err
	}
	if r.Conversation == nil {
		return protocol.Conversation{}, fmt.Errorf("%s reply has no conversation", r.Type)
	}
	return *r.Conversation, nil
}

// Close closes the connection normally.
func (c *Conn) Close() error {
	err := c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.done
	c.closeOnce.Do(func() { close(c.closing) })
	c.pump.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// CloseStatus is the WebSocket close code the server ended the connection with, or -1.
func (c *Conn) CloseStatus() websocket.StatusCode { return websocket.CloseStatus(c.err) }
