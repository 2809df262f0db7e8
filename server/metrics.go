package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Reasons a WebSocket upgrade is refused, the values of chatd_connection_refusals_total's reason
// label: a fixed set, so the label's cardinality stays bounded.
const (
	reasonDraining     = "draining"
	reasonOrigin       = "origin"
	reasonToken        = "token"
	reasonAccount      = "account"
	reasonRevoked      = "revoked"
	reasonUnavailable  = "unavailable"
	reasonUpgrade      = "upgrade"
	reasonTooManyConns = "too_many_connections"
	reasonOpenFailed   = "open_failed"
)

var refusalReasons = []string{reasonDraining, reasonOrigin, reasonToken, reasonAccount, reasonRevoked,
	reasonUnavailable, reasonUpgrade, reasonTooManyConns, reasonOpenFailed}

// Metrics are the HTTP surface's instruments. A nil *Metrics records nothing, so tests and tools
// need not build one.
type Metrics struct {
	refusals *prometheus.CounterVec
}

// NewMetrics registers the server's instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refusals: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_connection_refusals_total",
			Help: "WebSocket connections refused before or right after the upgrade, by reason (too_many_connections is the per-user cap).",
		}, []string{"reason"}),
	}
	for _, r := range refusalReasons { // every series exists from the start, so rate() sees the first refusal
		m.refusals.WithLabelValues(r)
	}
	return m
}

// refused counts one refused connection.
func (m *Metrics) refused(reason string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(reason).Inc()
}
