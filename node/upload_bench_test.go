package node_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/testenv"
)

// benchUploadSize is the default per-file limit: the largest upload a node takes.
const benchUploadSize = attach.DefaultMaxFileBytes

// benchUploaders is how many users upload at once in one op of BenchmarkTenConcurrentUploads.
const benchUploaders = 10

// BenchmarkTenConcurrentUploads25MiB: each op is ten users uploading a 25 MiB file at once
// through a node's HTTP endpoint (with a Content-Length, as the page and chatctl send them) into
// the blob store, a directory or an S3 bucket on versitygw. B/op is everything the test process
// allocated per op (the node, and the HTTP clients, whose bodies are made up as they are read);
// peak-RSS-growth-MiB is the most the process's peak RSS rose above its RSS before an op (Linux:
// writing 5 to /proc/self/clear_refs resets the peak, VmHWM).
func BenchmarkTenConcurrentUploads25MiB(b *testing.B) {
	for _, s3 := range []bool{false, true} {
		b.Run(map[bool]string{false: "dir", true: "s3"}[s3], func(b *testing.B) {
			env := testenv.NewEnv(b)
			cfg := env.NodeConfig()
			cfg.Sequencer.Partitions = blockPartitions
			cfg.Files.UploadsPerHour, cfg.Files.BytesPerHour = 1<<20, 1<<50 // the limits are not what is measured
			if s3 {
				srv := testenv.StartS3(b)
				store, err := blob.OpenS3(ctxB(b), blob.S3Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(b), Region: srv.Region,
					AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(store.Close)
				cfg.Blobs = store
			}
			n := testenv.StartNode(b, cfg)
			tokens := make([]string, benchUploaders)
			names := make([]string, benchUploaders)
			for i := range tokens {
				names[i] = fmt.Sprintf("uploader%d", i)
				var err error
				if tokens[i], _, err = client.Login(ctxB(b), nil, n.URL(), names[i]); err != nil {
					b.Fatal(err)
				}
			}
			owner := testenv.Connect(b, n.URL(), names[0])
			group, err := owner.CreateGroup(ctxB(b), "uploads", names[1:])
			if err != nil {
				b.Fatal(err)
			}
			var peak int64
			b.SetBytes(benchUploaders * benchUploadSize)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				before := procStatusKiB(b, "VmRSS")
				if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
					b.Fatalf("reset the peak RSS: %v", err)
				}
				b.StartTimer()
				var wg sync.WaitGroup
				errs := make(chan error, benchUploaders)
				for _, token := range tokens {
					wg.Go(func() {
						body := io.LimitReader(&testenv.PatternReader{}, benchUploadSize)
						if _, err := client.UploadFile(ctxB(b), nil, n.URL(), token, group.ID, "big.bin", body, benchUploadSize); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				peak = max(peak, procStatusKiB(b, "VmHWM")-before)
				b.StartTimer()
			}
			b.ReportMetric(float64(peak)/1024, "peak-RSS-growth-MiB")
		})
	}
}

// ctxB is a context for one step of a benchmark, ended when the benchmark ends.
func ctxB(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// procStatusKiB reads one of the process's memory figures from /proc/self/status, in KiB.
func procStatusKiB(b *testing.B, field string) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
