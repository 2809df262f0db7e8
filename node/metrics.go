package node

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// natsMetrics count what the node's NATS connection goes through. A nil *natsMetrics records
// nothing.
type natsMetrics struct {
	reconnects    prometheus.Counter
	slowConsumers prometheus.Counter
}

// newRegistry is one node's registry: the Go runtime and process collectors beside the
// components' instruments. Each node has its own, so several nodes in one process (tests) do
// not collide.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newNATSMetrics(reg prometheus.Registerer) *natsMetrics {
	f := promauto.With(reg)
	return &natsMetrics{
		reconnects: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_nats_reconnects_total",
			Help: "Reconnects of the node's NATS connection; each is followed by a resync of the live conversations.",
		}),
		slowConsumers: f.NewCounter(prometheus.CounterOpts{
			Name: "chatd_nats_slow_consumers_total",
			Help: "Slow-consumer errors of the node's NATS subscriptions (messages dropped by the client library).",
		}),
	}
}
