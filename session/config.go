package session

import (
	"cmp"
	"errors"
	"time"

	"github.com/chatd/chatd/protocol"
)

// Defaults, each with its reason. Config fields left zero take these values.
const (
	// DefaultReadLimit bounds one client frame. A maximal message body must fit however it is
	// escaped: JSON encoders write a control character (and encoding/json also '<', '>', '&') as
	// six bytes, \u0001, so the limit is six bodies plus room for the other fields.
	DefaultReadLimit = 6*protocol.MaxBodyBytes + 4<<10

	// DefaultMaxInFlight bounds the frames of one session being handled at once. A page has a
	// handful of requests outstanding (a send per conversation being typed in, a history page, a
	// read); 32 leaves room for bursts of sends to several conversations, while a script cannot
	// make one socket hold more than 32 goroutines and store round trips.
	DefaultMaxInFlight = 32

	// DefaultMaxQueuedBytes bounds the must-deliver bytes (Push) waiting for one socket. A reading
	// client drains this in milliseconds; only a client that stopped reading reaches it, and it is
	// cut with StatusSlowConsumer so that it reconnects and syncs. Replies to the client's own
	// requests (PushWait, Reply) wait while everything queued reaches it, so one session holds at
	// most about twice this much.
	DefaultMaxQueuedBytes = 4 << 20

	// DefaultSlowConsumerGrace is how long the must-deliver bytes of a socket may stay past
	// MaxQueuedBytes before it is cut: a reader on a slow link catching up after a burst gets a
	// few seconds, one that stopped reading does not get to hold memory.
	DefaultSlowConsumerGrace = 5 * time.Second

	// DefaultMaxEphemeral bounds the distinct keys of coalescible frames (typing, receipts,
	// badges, cursors) waiting for one socket. A user in 256 busy conversations at once is rare;
	// past that a lagging reader loses updates that the next one of each key supersedes anyway.
	DefaultMaxEphemeral = 256

	// DefaultPingInterval keeps NAT and load-balancer idle timers (often 60 s) from cutting idle
	// connections, and finds dead peers within about a minute.
	DefaultPingInterval = 25 * time.Second
	// DefaultPongTimeout is how long a peer has to answer a ping before it is taken as dead.
	DefaultPongTimeout = 15 * time.Second
	// DefaultWriteTimeout bounds one frame write; a peer that accepts no bytes for this long is gone.
	DefaultWriteTimeout = 10 * time.Second

	// DefaultSendRate and DefaultSendBurst bound a user's sends over all that user's connections
	// on this node: fast typing and pasting bursts pass, a script flooding a group does not.
	DefaultSendRate  = 20
	DefaultSendBurst = 40

	// DefaultFrameRate and DefaultFrameBurst bound every frame one connection sends (typing and
	// read frames fan out too): far above what a page sends, far below a flood.
	DefaultFrameRate  = 100
	DefaultFrameBurst = 200

	// DefaultUserFrameRate and DefaultUserFrameBurst bound every frame of one user over all that
	// user's connections on this node, so opening more tabs does not multiply what a user may
	// ask of the server: two busy connections pass, ten flooding ones do not.
	DefaultUserFrameRate  = 200
	DefaultUserFrameBurst = 400

	// DefaultAbuseRate and DefaultAbuseBurst bound the frames of one connection that are refused
	// (rate limits, in-flight cap). Refusing is cheap and tells a well-behaved client to slow
	// down, so a burst of 10,000 refused frames is tolerated; a client that keeps going past
	// 20,000 refusals beyond 200 a second is not listening and is closed with StatusPolicyAbuse.
	DefaultAbuseRate  = 200
	DefaultAbuseBurst = 20000

	// DefaultDirectWriters bounds the session writers of a server running on goroutines of their
	// own (see Writers): a message to a group of up to 64 on one node is written by as many
	// goroutines at once, while a larger fan-out queues the rest of its writes on the pool. 64
	// writes of a chat frame hold the cores for well under a millisecond.
	DefaultDirectWriters = 64
)

// slowConsumerHardFactor bounds a socket's must-deliver bytes at this many times MaxQueuedBytes
// whatever the grace, so a burst cannot make one session hold unbounded memory.
const slowConsumerHardFactor = 4

// inFlightRetryAfter is the retry hint for a frame refused because MaxInFlight frames are running:
// about one store round trip, after which one of them has usually finished.
const inFlightRetryAfter = 50 * time.Millisecond

// Config tunes sessions. Zero fields take the defaults above. A negative rate (SendRate,
// FrameRate, UserFrameRate, AbuseRate) disables that limit; a negative AbuseRate means refused
// frames never close the connection. When sessions share a Limits, the per-user fields SendRate,
// SendBurst, UserFrameRate and UserFrameBurst are taken from the Config given to NewLimits.
type Config struct {
	// ReadLimit bounds one client frame in bytes.
	ReadLimit int64
	// MaxInFlight bounds the frames of one session handled at once; more are refused.
	MaxInFlight int
	// MaxQueuedBytes bounds the must-deliver bytes waiting for one socket; past it for
	// SlowConsumerGrace (or past four times it at all) the socket is cut.
	MaxQueuedBytes    int
	SlowConsumerGrace time.Duration
	// MaxEphemeral bounds the distinct keys of coalescible frames waiting for one socket.
	MaxEphemeral int
	// PingInterval is how often the server pings an otherwise quiet peer.
	PingInterval time.Duration
	// PongTimeout is how long a peer has to answer a ping.
	PongTimeout time.Duration
	// WriteTimeout bounds one frame write, and the flush when a session closes.
	WriteTimeout time.Duration
	// SendRate (per second) and SendBurst bound one user's send frames.
	SendRate  float64
	SendBurst int
	// FrameRate (per second) and FrameBurst bound every frame of one connection.
	FrameRate  float64
	FrameBurst int
	// UserFrameRate (per second) and UserFrameBurst bound every frame of one user.
	UserFrameRate  float64
	UserFrameBurst int
	// AbuseRate (per second) and AbuseBurst bound the refused frames of one connection before
	// it is closed with StatusPolicyAbuse.
	AbuseRate  float64
	AbuseBurst int
	// Metrics, if set, records connections and frames; nil records nothing.
	Metrics *Metrics
	// Writers, shared by the sessions of a server, bounds the writers running at once; nil runs
	// each session's writer on a goroutine of its own whenever frames wait.
	Writers *Writers
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		ReadLimit:         DefaultReadLimit,
		MaxInFlight:       DefaultMaxInFlight,
		MaxQueuedBytes:    DefaultMaxQueuedBytes,
		SlowConsumerGrace: DefaultSlowConsumerGrace,
		MaxEphemeral:      DefaultMaxEphemeral,
		PingInterval:      DefaultPingInterval,
		PongTimeout:       DefaultPongTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		SendRate:          DefaultSendRate,
		SendBurst:         DefaultSendBurst,
		FrameRate:         DefaultFrameRate,
		FrameBurst:        DefaultFrameBurst,
		UserFrameRate:     DefaultUserFrameRate,
		UserFrameBurst:    DefaultUserFrameBurst,
		AbuseRate:         DefaultAbuseRate,
		AbuseBurst:        DefaultAbuseBurst,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.ReadLimit < 0 || c.MaxInFlight < 0 || c.MaxQueuedBytes < 0 || c.MaxEphemeral < 0 {
		return errors.New("session: limits must not be negative")
	}
	if c.PingInterval < 0 || c.PongTimeout < 0 || c.WriteTimeout < 0 || c.SlowConsumerGrace < 0 {
		return errors.New("session: timeouts must not be negative")
	}
	if c.SendBurst < 0 || c.FrameBurst < 0 || c.UserFrameBurst < 0 || c.AbuseBurst < 0 {
		return errors.New("session: bursts must not be negative")
	}
	return nil
}

// withDefaults fills every zero field from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.ReadLimit = cmp.Or(c.ReadLimit, d.ReadLimit)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, d.MaxInFlight)
	c.MaxQueuedBytes = cmp.Or(c.MaxQueuedBytes, d.MaxQueuedBytes)
	c.SlowConsumerGrace = cmp.Or(c.SlowConsumerGrace, d.SlowConsumerGrace)
	c.MaxEphemeral = cmp.Or(c.MaxEphemeral, d.MaxEphemeral)
	c.PingInterval = cmp.Or(c.PingInterval, d.PingInterval)
	c.PongTimeout = cmp.Or(c.PongTimeout, d.PongTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, d.WriteTimeout)
	c.SendRate = cmp.Or(c.SendRate, d.SendRate)
	c.SendBurst = cmp.Or(c.SendBurst, d.SendBurst)
	c.FrameRate = cmp.Or(c.FrameRate, d.FrameRate)
	c.FrameBurst = cmp.Or(c.FrameBurst, d.FrameBurst)
	c.UserFrameRate = cmp.Or(c.UserFrameRate, d.UserFrameRate)
	c.UserFrameBurst = cmp.Or(c.UserFrameBurst, d.UserFrameBurst)
	c.AbuseRate = cmp.Or(c.AbuseRate, d.AbuseRate)
	c.AbuseBurst = cmp.Or(c.AbuseBurst, d.AbuseBurst)
	return c
}
