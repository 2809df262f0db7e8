// Command chatstore runs the embedded MongoDB-wire store (FerretDB v1 on SQLite) on its own, so
// several chat nodes on one machine can share it and tests can run it outside their race-detector
// build. It prints the MongoDB URI on stdout once it accepts connections, and stops on SIGTERM.
//
// Unless GOGC is set, its garbage collector runs at a quarter of Go's default frequency
// (GOGC=400): FerretDB allocates for every document it reads or writes, and its live heap is a few
// tens of megabytes (SQLite's pages are outside it), so the collector was a tenth of the store's
// CPU under a send load for little memory saved (docs/BENCHMARKS.md, "Issue 33 targets").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/chatd/chatd/embedded"
)

// storeGCPercent is the store's GOGC unless the environment sets one: its heap grows to five
// times the live data between collections (about 70 MB instead of 50 MB at 800 sends/s).
const storeGCPercent = 400

func main() {
	addr := flag.String("addr", "127.0.0.1:27017", "TCP address to listen on")
	dir := flag.String("dir", "./data/store", "directory for the SQLite files")
	sync := flag.String("sync", embedded.SyncInterval, "how the store waits for the disk: interval (commits synced to disk every 100 ms: survives a killed process at once, a power loss after 100 ms), full (every commit synced) or normal (synced at checkpoints only)")
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(storeGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := embedded.StartMongo(embedded.MongoConfig{Dir: *dir, Addr: *addr, Sync: *sync})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatstore:", err)
		os.Exit(1)
	}
	fmt.Println(store.URI())
	<-ctx.Done()
	store.Stop()
}
