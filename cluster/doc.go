// Package cluster holds the multi-node tests: three chat nodes as real processes, a three-server
// NATS JetStream cluster, one shared store and nginx in front, with clients connecting through
// nginx, the way a deployment runs (docker-compose.yml, scripts/cluster), or straight to one node
// where a test needs a node's own clients. The tests kill processes with SIGKILL to show what a
// crash loses (nothing that was acknowledged), kill and restart NATS servers and starve a node's
// CPU to show what they cost: no partition moves between live nodes, acks resume within bounds.
//
// The package has no code outside its tests. It needs nginx (Debian's package; scripts/test
// installs it) and builds chatd and nats-server itself, without the race detector, unless
// CHAT_TEST_CHATD_BIN and CHAT_TEST_NATS_BIN name prebuilt binaries.
package cluster
