package node

import (
	"cmp"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/server"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/webhook"
)

// startPush starts the node's Web Push notifier when a VAPID key pair is configured: it hears the
// messages of the partitions this node owns (startObservers), and every read cursor move made
// here (readsWithPush, to withdraw what a read covers).
func (n *Node) startPush(cfg *Config) error {
	cfg.Push.Metrics = push.NewMetrics(n.metrics) // registered either way: dashboards read 0, not nothing
	if cfg.Push.VAPIDPublicKey == "" {
		return nil
	}
	cfg.Push.NodeID = cfg.NodeID
	cfg.Push.Nodes = leaseNodes{n}
	subject := cmp.Or(cfg.Sequencer.SubjectPrefix, sequencer.DefaultSubjectPrefix) + ".push.devices"
	cfg.Push.Announce = func(userID string) {
		if err := n.nc.Publish(subject, []byte(userID)); err != nil {
			// The other nodes see the change when their cache of the user expires.
			n.log.Warn().Err(err).Str("user", userID).Msg("announce a change of push devices")
		}
	}
	notifier, err := push.New(cfg.Push, n.store, n.log)
	if err != nil {
		return err
	}
	// Every node hears every change of anyone's devices: they are rare (a browser subscribing).
	if _, err := n.nc.Subscribe(subject, func(m *nats.Msg) { notifier.ForgetDevices(string(m.Data)) }); err != nil {
		notifier.Stop()
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	n.push = notifier
	return nil
}

// observers are the parts that hear the owner's stored messages and changes: webhooks always,
// Web Push when it is on.
type observers []sequencer.Observer

func (o observers) Stored(m protocol.Message, members []string) {
	for _, x := range o {
		x.Stored(m, members)
	}
}

func (o observers) Changed(c sequencer.Change) {
	for _, x := range o {
		x.Changed(c)
	}
}

// startObservers starts the webhook dispatcher and Web Push, and makes them the sequencer's
// observer.
func (n *Node) startObservers(cfg *Config) error {
	cfg.Webhooks.Metrics = webhook.NewMetrics(n.metrics)
	n.webhooks = webhook.New(cfg.Webhooks, n.store, n.log)
	all := observers{n.webhooks}
	if err := n.startPush(cfg); err != nil {
		return err
	}
	if n.push != nil {
		all = append(all, n.push)
	}
	cfg.Sequencer.Observer = all
	return nil
}

// leaseNodes asks the node's leases, started after the notifier, which nodes live.
type leaseNodes struct{ n *Node }

func (l leaseNodes) Alive(node string) bool { return l.n.leases != nil && l.n.leases.Alive(node) }

// readsWithPush is the read coalescer that also tells the notifier of each read.
type readsWithPush struct {
	*readstate.Coalescer
	push *push.Notifier
}

// Advance queues the cursor move and notes the read for withdrawals.
func (r readsWithPush) Advance(cur storage.Cursor) {
	r.Coalescer.Advance(cur)
	r.push.Read(cur.UserID, cur.ConversationID, cur.ReadSeq)
}

// pushAPI is the notifier as the server's Web Push endpoints see it: nil (no endpoints) without
// Web Push, never an interface holding a nil notifier.
func (n *Node) pushAPI() server.Push {
	if n.push == nil {
		return nil
	}
	return n.push
}
