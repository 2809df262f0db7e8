package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chatd/chatd/testenv"
)

// Settings of BenchmarkIdleMemory, each with its reason.
const (
	// idleBenchConns is the connections held by chatd and then by the bare server: enough that
	// the per-connection cost dwarfs the noise of a process's RSS, within the 20,000 open files
	// this benchmark's process may hold.
	idleBenchConns = 5000
	// idleBenchMaxRatio is what fails the benchmark: chatd's memory per idle connection more
	// than this many times the bare server's, measured in the same run. The target is 1.3x;
	// twice the floor means a change has put a goroutine, a buffer or a queue back on every
	// idle socket.
	idleBenchMaxRatio = 2
	// idleBenchSettle lets the collector and the scavenger run before RSS is read.
	idleBenchSettle = 15 * time.Second
)

// BenchmarkIdleMemory measures the RSS per idle authenticated connection of a chatd process (store
// in its own process, NATS in chatd's) and of a bare coder/websocket server holding as many
// connections, one after the other in the same run, with chatbench's -idle -floor; it reports
// both and their ratio, and fails when the ratio exceeds idleBenchMaxRatio. Each iteration is one
// whole run of a few minutes (5,000 sign-ins and dials):
//
//	go test -run '^$' -bench IdleMemory -benchtime 1x -count 3 -timeout 60m ./cmd/chatbench/
func BenchmarkIdleMemory(b *testing.B) {
	store := testenv.StartStoreProcess(b, b.TempDir())
	for b.Loop() {
		j := idleMemoryRun(b, store.URI).toJSON()
		if j.Floor == nil || j.Floor.Ratio == 0 {
			b.Fatalf("no floor figure in the report: %+v", j)
		}
		b.ReportMetric(j.RSSPerConnKiB, "chatd-KiB/conn")
		b.ReportMetric(j.Floor.RSSPerConnKiB, "bare-KiB/conn")
		b.ReportMetric(j.Floor.Ratio, "x-bare")
		if j.Floor.Ratio > idleBenchMaxRatio {
			b.Errorf("chatd holds an idle connection in %.1f KiB, %.2fx the bare server's %.1f KiB measured in the same run; more than %dx",
				j.RSSPerConnKiB, j.Floor.Ratio, j.Floor.RSSPerConnKiB, idleBenchMaxRatio)
		}
	}
}

// idleMemoryRun starts a fresh chatd on the store at storeURI and runs chatbench -idle -floor
// against it.
func idleMemoryRun(b *testing.B, storeURI string) *report {
	b.Helper()
	chatd := testenv.StartChatd(b, b.TempDir(), []string{"CHAT_MONGO_URI=" + storeURI + "?maxPoolSize=16"}, "-admin-addr=")
	defer func() { _ = chatd.Stop() }() // each run measures a chatd of its own
	base := "http://" + chatd.Addr
	cfg, err := parseFlags([]string{"-url", base, "-idle", "-floor", "-clients", strconv.Itoa(idleBenchConns),
		"-prefix", "idle", "-hold", "1s", "-settle", idleBenchSettle.String(), "-dial-concurrency", "16",
		"-timeout", "120s", "-server-pid", strconv.Itoa(chatd.Pid())}, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var log bytes.Buffer
	rep, err := runBench(ctx, cfg, &log)
	if err != nil {
		b.Fatalf("chatbench: %v\n%s", err, log.String()) // the end of chatd's log follows (StartProcess)
	}
	return rep
}
