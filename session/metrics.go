package session

import (
	"strconv"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/chatd/chatd/protocol"
)

// Label values outside the known sets. Every label value comes from a fixed list, never from a
// user, a conversation, a session or a string the client sent, so each metric has a bounded
// number of series however clients behave.
const (
	labelOther   = "other"   // a close or error code not in the known lists
	labelUnknown = "unknown" // a frame type the protocol does not define
	labelInvalid = "invalid" // a frame that did not decode far enough to have a type
)

// clientFrameTypes are the values of chatd_frames_received_total's type label, besides
// labelUnknown and labelInvalid: the protocol's client frame types. A type added to protocol
// is counted as unknown until it is added here.
var clientFrameTypes = []string{
	protocol.TypeSend, protocol.TypeOpenDM, protocol.TypeCreateGroup, protocol.TypeListConversations,
	protocol.TypeSync, protocol.TypeHistory, protocol.TypeRead, protocol.TypeReceipts, protocol.TypeTyping,
	protocol.TypeDeleteMessage, protocol.TypeHideConversation, protocol.TypeAddMembers,
	protocol.TypeRemoveMember, protocol.TypeLeave, protocol.TypeSetPrivacy, protocol.TypePing,
	protocol.TypeBlockUser, protocol.TypeUnblockUser, protocol.TypeListBlocks, protocol.TypeEditMessage,
	protocol.TypeReact, protocol.TypeReactions, protocol.TypeFocus, protocol.TypeDelivered,
	protocol.TypePresence, protocol.TypeModerate, protocol.TypeListInvites, protocol.TypeInvitePreview,
	protocol.TypeJoinInvite, protocol.TypeReport, protocol.TypeListReports,
}

// errorCodes are the values of chatd_frames_refused_total's code label, besides labelOther: the
// protocol's error codes. A code added to protocol is counted as other until it is added here.
var errorCodes = []string{
	protocol.CodeBadFrame, protocol.CodeUnknownType, protocol.CodeInvalidField, protocol.CodeTooLarge,
	protocol.CodeNotMember, protocol.CodeNotFound, protocol.CodeForbidden, protocol.CodeLimit, protocol.CodeRateLimited,
	protocol.CodeUnavailable, protocol.CodeInternal,
}

// closeCodes are the values of chatd_connections_closed_total's code label, besides labelOther:
// the standard codes 1000-1015 (1005, 1006 and 1015 are never sent but are what a session
// observes) and the ones this server uses. A client may close with any code; the rest are other.
func closeCodes() []websocket.StatusCode {
	codes := []websocket.StatusCode{StatusRemoved, StatusSlowConsumer, StatusPolicyAbuse, StatusTooManyConnections}
	for c := websocket.StatusNormalClosure; c <= websocket.StatusTLSHandshake; c++ {
		codes = append(codes, c)
	}
	return codes
}

// Metrics are the session instruments: connections, the frames clients send and are refused,
// what the writer writes, and the ephemeral frames and sessions given up on for readers who fall
// behind. One Metrics is shared by all of a node's sessions and is safe for concurrent use. A nil
// *Metrics records nothing, so tests and tools need not build one.
type Metrics struct {
	open             prometheus.Gauge
	opened           prometheus.Counter
	framesWritten    prometheus.Counter
	bytesWritten     prometheus.Counter
	coalesced        prometheus.Counter
	dropped          prometheus.Counter
	slowConsumerCuts prometheus.Counter

	// The labelled counters are looked up once here, so that counting a frame is a read of a map
	// that never changes (safe without a lock) instead of hashing label values on every frame.
	// A key not in a map falls back to the other, unknown or invalid counter.
	closed          map[websocket.StatusCode]prometheus.Counter
	closedOther     prometheus.Counter
	received        map[string]prometheus.Counter
	receivedUnknown prometheus.Counter
	receivedInvalid prometheus.Counter
	refused         map[string]prometheus.Counter
	refusedOther    prometheus.Counter
}

// NewMetrics creates the session instruments and registers them with reg. Every labelled series
// exists from the start at zero, so rate() and alerts see the first increment.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		open: f.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_connections_open",
			Help: "WebSocket sessions currently open (opened and not yet ended).",
		}),
		opened: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_connections_opened_total",
			Help: "WebSocket sessions opened; sessions refused when opening are not counted.",
		}),
		framesWritten: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_frames_written_total",
			Help: "Frames written to sockets.",
		}),
		bytesWritten: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_bytes_written_total",
			Help: "Payload bytes of the frames written to sockets, without WebSocket framing.",
		}),
		coalesced: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_ephemeral_frames_coalesced_total",
			Help: "Ephemeral frames (typing, receipts, badges, cursors) replaced by a newer one with the same key before being written.",
		}),
		dropped: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_ephemeral_frames_dropped_total",
			Help: "Ephemeral frames dropped because a session's ephemeral queue was full.",
		}),
		slowConsumerCuts: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_slow_consumer_cuts_total",
			Help: "Sessions cut with 4008 because the client stopped reading frames it must receive.",
		}),
	}

	closed := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_connections_closed_total",
		Help: "WebSocket sessions ended, including those refused when opening, by the close code the server used or observed (1006: the connection broke); other for codes outside the known set.",
	}, []string{"code"})
	m.closed = make(map[websocket.StatusCode]prometheus.Counter)
	for _, c := range closeCodes() {
		m.closed[c] = closed.WithLabelValues(strconv.Itoa(int(c)))
	}
	m.closedOther = closed.WithLabelValues(labelOther)

	received := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_frames_received_total",
		Help: "Client frames read, by frame type; unknown for a type the protocol does not define, invalid for a frame that did not decode.",
	}, []string{"type"})
	m.received = make(map[string]prometheus.Counter)
	for _, t := range clientFrameTypes {
		m.received[t] = received.WithLabelValues(t)
	}
	m.receivedUnknown = received.WithLabelValues(labelUnknown)
	m.receivedInvalid = received.WithLabelValues(labelInvalid)

	refused := f.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_frames_refused_total",
		Help: "Error frames sent in answer to a client frame, by error code: refusals by the session (rate_limited, bad_frame, ...) and errors of the handler.",
	}, []string{"code"})
	m.refused = make(map[string]prometheus.Counter)
	for _, c := range errorCodes {
		m.refused[c] = refused.WithLabelValues(c)
	}
	m.refusedOther = refused.WithLabelValues(labelOther)
	return m
}

// sessionOpened counts a session whose Opened succeeded.
func (m *Metrics) sessionOpened() {
	if m == nil {
		return
	}
	m.opened.Inc()
	m.open.Inc()
}

// sessionEnded counts the end of a session counted by sessionOpened.
func (m *Metrics) sessionEnded(code websocket.StatusCode) {
	if m == nil {
		return
	}
	m.open.Dec()
	m.sessionClosed(code)
}

// sessionClosed counts a session that ended with code, opened or refused by Opened.
func (m *Metrics) sessionClosed(code websocket.StatusCode) {
	if m == nil {
		return
	}
	c, ok := m.closed[code]
	if !ok {
		c = m.closedOther
	}
	c.Inc()
}

// frameReceived counts a client frame of type typ after decoding; an empty typ is a frame that
// did not decode far enough to have a type (not text, not JSON, or no type), counted as invalid.
func (m *Metrics) frameReceived(typ string) {
	if m == nil {
		return
	}
	c, ok := m.received[typ]
	switch {
	case typ == "":
		c = m.receivedInvalid
	case !ok:
		c = m.receivedUnknown // never the client's string: that would make a series per string
	}
	c.Inc()
}

// frameRefused counts an error frame with code sent in answer to a client frame.
func (m *Metrics) frameRefused(code string) {
	if m == nil {
		return
	}
	c, ok := m.refused[code]
	if !ok {
		c = m.refusedOther
	}
	c.Inc()
}

// frameWritten counts a frame of n payload bytes written to a socket.
func (m *Metrics) frameWritten(n int) {
	if m == nil {
		return
	}
	m.framesWritten.Inc()
	m.bytesWritten.Add(float64(n))
}

// ephemeralCoalesced counts an ephemeral frame replaced by a newer one with the same key.
func (m *Metrics) ephemeralCoalesced() {
	if m == nil {
		return
	}
	m.coalesced.Inc()
}

// ephemeralDropped counts an ephemeral frame dropped because the ephemeral queue was full.
func (m *Metrics) ephemeralDropped() {
	if m == nil {
		return
	}
	m.dropped.Inc()
}

// slowConsumerCut counts a session cut with StatusSlowConsumer. It is counted where the cut is
// made, not from the close code, because a client may close with 4008 itself.
func (m *Metrics) slowConsumerCut() {
	if m == nil {
		return
	}
	m.slowConsumerCuts.Inc()
}
