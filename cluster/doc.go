// Package cluster holds the multi-node tests: three chat nodes as real processes, a three-server
// NATS JetStream cluster, one shared store and nginx in front, with clients connecting only
// through nginx, the way a deployment runs (docker-compose.yml, scripts/cluster). The tests kill
// processes with SIGKILL to show what a crash loses: nothing that was acknowledged.
//
// The package has no code outside its tests. It needs nginx (Debian's package; scripts/test
// installs it) and builds chatd and nats-server itself, without the race detector, unless
// CHAT_TEST_CHATD_BIN and CHAT_TEST_NATS_BIN name prebuilt binaries.
package cluster
