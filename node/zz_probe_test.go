package node_test

import (
	"testing"
	"time"

	"github.com/chatd/chatd/testenv"
)

func TestZZProbe(t *testing.T) {
	t0 := time.Now()
	nats := testenv.NATS(t)
	t.Logf("nats %v", time.Since(t0))
	t0 = time.Now()
	cfg := testenv.StoreConfig(t)
	t.Logf("store %v", time.Since(t0))
	t0 = time.Now()
	env := testenv.Env{NATSURL: nats, MongoURI: cfg.URI, Database: cfg.Database}
	c := env.NodeConfig(); c.Sequencer.Partitions = 4; n := testenv.StartNode(t, c)
	t.Logf("node %v", time.Since(t0))
	t0 = time.Now()
	testenv.Connect(t, n.URL(), "alice")
	t.Logf("connect %v", time.Since(t0))
	t0 = time.Now()
	n.Stop()
	t.Logf("stop %v", time.Since(t0))
}
