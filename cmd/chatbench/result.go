package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/chatd/chatd/protocol"
)

// result is what one process reports for one phase. Results of several processes merge into one.
type result struct {
	// Elapsed is how long the phase took; merged as the longest.
	Elapsed time.Duration `json:"elapsed"`
	// OK counts what succeeded: sign-ins, connections, conversations.
	OK int64 `json:"ok"`
	// Errors counts failures by code (a protocol error code, "timeout", "closed", "http_401"...).
	Errors map[string]int64 `json:"errors,omitempty"`
	// Examples holds the first error message seen for each code.
	Examples map[string]string `json:"examples,omitempty"`
	// Latency is the time to connect (connect phase) or from send to ack (drive phase).
	Latency *histogram `json:"latency,omitempty"`

	// Connect: the fewest and most conversations a connection's first sync listed; nil when
	// nothing connected.
	Synced *[2]int64 `json:"synced,omitempty"`

	// Setup.
	Memberships int64   `json:"memberships,omitempty"`
	Unconfirmed int64   `json:"unconfirmed,omitempty"` // joins the server had not pushed by the deadline
	MaxConnRate float64 `json:"maxConnRate,omitempty"` // the busiest connection's share of -rate, sends/s

	// Drive.
	Attempted      int64         `json:"attempted,omitempty"`
	Skipped        int64         `json:"skipped,omitempty"` // not sent: too many sends already waiting for acks
	Expected       int64         `json:"expected,omitempty"`
	Delivered      int64         `json:"delivered,omitempty"`
	SendWindow     time.Duration `json:"sendWindow,omitempty"`
	AckWindow      time.Duration `json:"ackWindow,omitempty"` // from the first send to the last ack
	DeliveryWindow time.Duration `json:"deliveryWindow,omitempty"`
	Delivery       *histogram    `json:"delivery,omitempty"`
}

// merge adds o into r.
func (r *result) merge(o *result) {
	r.Elapsed = max(r.Elapsed, o.Elapsed)
	if o.Synced != nil {
		if r.Synced == nil {
			r.Synced = &[2]int64{o.Synced[0], o.Synced[1]}
		}
		r.Synced[0], r.Synced[1] = min(r.Synced[0], o.Synced[0]), max(r.Synced[1], o.Synced[1])
	}
	r.OK += o.OK
	for code, n := range o.Errors {
		if r.Errors == nil {
			r.Errors = map[string]int64{}
		}
		r.Errors[code] += n
	}
	for code, msg := range o.Examples {
		if r.Examples == nil {
			r.Examples = map[string]string{}
		}
		if _, ok := r.Examples[code]; !ok {
			r.Examples[code] = msg
		}
	}
	r.Latency = mergeHistograms(r.Latency, o.Latency)
	r.Memberships += o.Memberships
	r.Unconfirmed += o.Unconfirmed
	r.MaxConnRate = max(r.MaxConnRate, o.MaxConnRate)
	r.Attempted += o.Attempted
	r.Skipped += o.Skipped
	r.Expected += o.Expected
	r.Delivered += o.Delivered
	r.SendWindow = max(r.SendWindow, o.SendWindow)
	r.AckWindow = max(r.AckWindow, o.AckWindow)
	r.DeliveryWindow = max(r.DeliveryWindow, o.DeliveryWindow)
	r.Delivery = mergeHistograms(r.Delivery, o.Delivery)
}

func mergeHistograms(a, b *histogram) *histogram {
	switch {
	case b == nil:
		return a
	case a == nil:
		a = &histogram{}
	}
	a.merge(b)
	return a
}

// errorCounter counts failures by code from many goroutines, keeping one example of each.
type errorCounter struct {
	mu       sync.Mutex
	counts   map[string]int64
	examples map[string]string
}

func (e *errorCounter) add(err error) { e.addAs(errorCode(err), err) }

func (e *errorCounter) addAs(code string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts, e.examples = map[string]int64{}, map[string]string{}
	}
	e.counts[code]++
	if _, ok := e.examples[code]; !ok {
		e.examples[code] = err.Error()
	}
}

// fill copies the counts into r.
func (e *errorCounter) fill(r *result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r.Errors = make(map[string]int64, len(e.counts))
	r.Examples = make(map[string]string, len(e.examples))
	for k, v := range e.counts {
		r.Errors[k] = v
		r.Examples[k] = e.examples[k]
	}
}

// errorCode names a failure for the report: the server's code when it sent one.
func errorCode(err error) string {
	var pe *protocol.Error
	var de *dialError
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case errors.As(err, &de):
		return de.code()
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "connection closed"):
		return "closed"
	default:
		return "other"
	}
}
