package node

import (
	"github.com/chatd/chatd/push"
	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/server"
	"github.com/chatd/chatd/storage"
)

// startPush starts the node's Web Push notifier when a VAPID key pair is configured, and makes it
// the sequencer's observer (it hears the messages of the partitions this node owns) and the
// reader of every read cursor move made here (to withdraw what a read covers).
func (n *Node) startPush(cfg *Config) error {
	cfg.Push.Metrics = push.NewMetrics(n.metrics) // registered either way: dashboards read 0, not nothing
	if cfg.Push.VAPIDPublicKey == "" {
		return nil
	}
	cfg.Push.NodeID = cfg.NodeID
	cfg.Push.Nodes = leaseNodes{n}
	notifier, err := push.New(cfg.Push, n.store, n.log)
	if err != nil {
		return err
	}
	n.push = notifier
	cfg.Sequencer.Observer = notifier
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
