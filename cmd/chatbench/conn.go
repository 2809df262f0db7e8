package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/protocol"
)

// benchConn is one load-generating WebSocket. It does not use client.Conn, which decodes every
// field of every frame and runs a pump goroutine per connection: at 18,000 connections the
// generator would measure itself. benchConn decodes only the fields the bench reads and hands
// pushes to a callback on its read goroutine.
type benchConn struct {
	ws     *websocket.Conn
	index  int
	userID string
	onPush func(c *benchConn, f *frame, at time.Time)

	synced int // conversations the first sync listed

	nextID  uint64
	mu      sync.Mutex
	waiting map[string]chan *frame
	joined  map[string]bool // conversations the server told this session it is in

	done chan struct{}
	err  error
}

// frame is the part of a server frame the bench reads.
type frame struct {
	Type           string `json:"type"`
	ID             string `json:"id"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	Retryable      bool   `json:"retryable"`
	UserID         string `json:"userId"`
	ConversationID string `json:"conversationId"`
	Seq            int64  `json:"seq"`
	SenderID       string `json:"senderId"`
	Body           string `json:"body"`
	Conversation   *struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"createdAt"`
	} `json:"conversation"`
	// Conversations are only counted (a sync's reply): left undecoded.
	Conversations []json.RawMessage `json:"conversations"`
}

// Frames the bench never looks at are skipped before decoding: badges, cursors, typing and
// receipts follow every read, and decoding them would only add to the generator's work.
var skippedPrefixes = [][]byte{[]byte(`{"type":"badge"`), []byte(`{"type":"cursor"`), []byte(`{"type":"typing"`), []byte(`{"type":"receipt"`)}

// dialBench opens a connection as userID, waits for the server's hello and syncs (a fresh
// client holds nothing), so a returned connection is an authenticated, registered session that
// gets live pushes at once.
func dialBench(ctx context.Context, d *dialer, wsURL, token string, index int, userID string,
	onPush func(*benchConn, *frame, time.Time)) (*benchConn, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", wsURL, err)
	}
	q := u.Query()
	q.Set("token", token)
	u.RawQuery = q.Encode()
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: d.next()})
	if err != nil {
		if resp != nil {
			return nil, &dialError{status: resp.StatusCode}
		}
		return nil, &dialError{err: errors.New(redact(err.Error(), token))}
	}
	ws.SetReadLimit(1 << 20)
	c := &benchConn{ws: ws, index: index, userID: userID, onPush: onPush,
		waiting: make(map[string]chan *frame), joined: make(map[string]bool), done: make(chan struct{})}
	hello := make(chan struct{})
	go c.readLoop(hello)
	select {
	case <-hello:
		r, err := c.request(ctx, protocol.ClientFrame{Type: protocol.TypeSync})
		if err != nil {
			c.close()
			return nil, &dialError{err: fmt.Errorf("sync: %w", err)}
		}
		c.synced = len(r.Conversations)
		return c, nil
	case <-c.done:
		return nil, &dialError{err: fmt.Errorf("closed before hello: %w", c.err)}
	case <-ctx.Done():
		c.ws.CloseNow()
		<-c.done
		return nil, &dialError{err: fmt.Errorf("waiting for hello: %w", ctx.Err())}
	}
}

// dialError is a failed connection: an HTTP status from a refused upgrade, or a network error.
type dialError struct {
	status int
	err    error
}

func (e *dialError) Error() string {
	if e.status != 0 {
		return "upgrade refused with HTTP " + strconv.Itoa(e.status)
	}
	return e.err.Error()
}

func (e *dialError) code() string {
	if e.status != 0 {
		return "http_" + strconv.Itoa(e.status)
	}
	return "dial"
}

func redact(s, secret string) string {
	return string(bytes.ReplaceAll([]byte(s), []byte(secret), []byte("REDACTED")))
}

func (c *benchConn) readLoop(hello chan struct{}) {
	defer close(c.done)
	greeted := false
	for {
		_, data, err := c.ws.Read(context.Background())
		at := time.Now()
		if err != nil {
			c.err = err
			return
		}
		if skipped(data) {
			continue
		}
		if f, ok := quickMessage(data); ok {
			if c.onPush != nil {
				c.onPush(c, f, at)
			}
			continue
		}
		f := new(frame)
		if err := json.Unmarshal(data, f); err != nil {
			c.err = fmt.Errorf("decode server frame: %w", err)
			c.ws.CloseNow()
			return
		}
		if !greeted && f.Type == protocol.TypeHello {
			greeted = true
			close(hello)
			continue
		}
		if f.ID != "" && c.deliverReply(f) {
			continue
		}
		if f.Type == protocol.TypeConversation && f.Conversation != nil {
			c.mu.Lock()
			c.joined[f.Conversation.ID] = true
			c.mu.Unlock()
		}
		if c.onPush != nil {
			c.onPush(c, f, at)
		}
	}
}

// quickMessage reads a pushed message frame's sender and body without decoding the rest: at tens
// of thousands of pushes a second, decoding every field was a quarter of the generator's CPU,
// which it takes from the server on a shared machine. The first "senderId" and "body" keys of a
// message frame are the message's own (protocol.Message's field order; a quoted message comes
// after them), and a JSON string holds no bare quote. A body with an escape goes the slow way.
func quickMessage(data []byte) (*frame, bool) {
	if !bytes.HasPrefix(data, messagePrefix) {
		return nil, false
	}
	sender, ok := stringField(data, senderKey)
	if !ok {
		return nil, false
	}
	body, ok := stringField(data, bodyKey)
	if !ok {
		return nil, false
	}
	return &frame{Type: protocol.TypeMessage, SenderID: sender, Body: body}, true
}

var (
	messagePrefix = []byte(`{"type":"message",`)
	senderKey     = []byte(`"senderId":"`)
	bodyKey       = []byte(`"body":"`)
)

// stringField returns the value of the first string field key (`"name":"`) in data, if it has
// no escapes.
func stringField(data, key []byte) (string, bool) {
	i := bytes.Index(data, key)
	if i < 0 {
		return "", false
	}
	rest := data[i+len(key):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", false
	}
	return string(rest[:end]), true
}

func skipped(data []byte) bool {
	for _, p := range skippedPrefixes {
		if bytes.HasPrefix(data, p) {
			return true
		}
	}
	return false
}

func (c *benchConn) deliverReply(f *frame) bool {
	c.mu.Lock()
	ch, ok := c.waiting[f.ID]
	delete(c.waiting, f.ID)
	c.mu.Unlock()
	if ok {
		ch <- f
	}
	return ok
}

// hasJoined reports whether the server has told this session it is in conversation id.
func (c *benchConn) hasJoined(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined[id]
}

// request sends f with a fresh id and waits for the reply; an error frame becomes a
// *protocol.Error.
func (c *benchConn) request(ctx context.Context, f protocol.ClientFrame) (*frame, error) {
	ch := make(chan *frame, 1)
	c.mu.Lock()
	c.nextID++
	f.ID = strconv.FormatUint(c.nextID, 36)
	c.waiting[f.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, f.ID)
		c.mu.Unlock()
	}()
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.Type, err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, data); err != nil {
		return nil, fmt.Errorf("write %s: %w", f.Type, err)
	}
	select {
	case r := <-ch:
		if r.Type == protocol.TypeError {
			return r, &protocol.Error{Code: r.Code, Message: r.Message, Retryable: r.Retryable}
		}
		return r, nil
	case <-c.done:
		return nil, fmt.Errorf("connection closed waiting for %s reply: %w", f.Type, c.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for %s reply: %w", f.Type, ctx.Err())
	}
}

// close closes the connection normally and waits for its reader.
func (c *benchConn) close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "") // the bench is done with it either way
	<-c.done
}
