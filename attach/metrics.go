package attach

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/chatd/chatd/blob"
)

// Why an upload was refused or failed: the values of chatd_upload_refusals_total's reason label.
const (
	refusedTooLarge    = "too_large"
	refusedRateLimited = "rate_limited"
	refusedBadName     = "bad_name"
	refusedBadImage    = "bad_image"
	refusedFailed      = "failed"
)

var refusalReasons = []string{refusedTooLarge, refusedRateLimited, refusedBadName, refusedBadImage, refusedFailed}

// blobOps are the values of the blob store metrics' op label.
var blobOps = []string{"put", "get", "stat", "delete", "list"}

// storeBuckets span a small object on a local disk (a millisecond) to a 25 MiB file sent to a
// remote object store over a slow link (a minute).
var storeBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the attachments' instruments. A nil *Metrics records nothing.
type Metrics struct {
	uploads     prometheus.Counter
	bytes       prometheus.Counter
	refusals    map[string]prometheus.Counter
	deletions   map[string]prometheus.Counter
	blobSeconds map[string]prometheus.Observer
	blobErrors  map[string]prometheus.Counter
}

// NewMetrics registers the attachments' instruments with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		uploads: f.NewCounter(prometheus.CounterOpts{Name: "chatd_uploads_total",
			Help: "Files uploaded and stored (pending until a send attaches them)."}),
		bytes: f.NewCounter(prometheus.CounterOpts{Name: "chatd_upload_bytes_total",
			Help: "Bytes of the files stored by uploads (an image's clean copy, without its thumbnail)."}),
		refusals: make(map[string]prometheus.Counter), deletions: make(map[string]prometheus.Counter),
		blobSeconds: make(map[string]prometheus.Observer), blobErrors: make(map[string]prometheus.Counter),
	}
	refusals := f.NewCounterVec(prometheus.CounterOpts{Name: "chatd_upload_refusals_total",
		Help: "Uploads refused or failed, by reason; nothing of them is kept."}, []string{"reason"})
	for _, r := range refusalReasons {
		m.refusals[r] = refusals.WithLabelValues(r)
	}
	deletions := f.NewCounterVec(prometheus.CounterOpts{Name: "chatd_files_deleted_total",
		Help: "Uploaded files deleted, by reason: their message deleted for everyone, their account deleted, collected unattached, or an object without a record."}, []string{"reason"})
	for _, r := range deleteReasons {
		m.deletions[r] = deletions.WithLabelValues(r)
	}
	seconds := f.NewHistogramVec(prometheus.HistogramOpts{Name: "chatd_blob_operation_seconds",
		Help: "Duration of one blob store operation (a put streams the whole file; a get only opens it; a list is one whole listing), failed ones included, by op.", Buckets: storeBuckets}, []string{"op"})
	errs := f.NewCounterVec(prometheus.CounterOpts{Name: "chatd_blob_errors_total",
		Help: "Blob store operations that failed, by op; a get or stat of an object that does not exist is not a failure."}, []string{"op"})
	for _, op := range blobOps {
		m.blobSeconds[op] = seconds.WithLabelValues(op)
		m.blobErrors[op] = errs.WithLabelValues(op)
	}
	return m
}

func (m *Metrics) stored(bytes int64) {
	if m != nil {
		m.uploads.Inc()
		m.bytes.Add(float64(bytes))
	}
}

// uploaded counts a refused or failed upload by its reason.
func (m *Metrics) uploaded(err error) {
	if m == nil || err == nil {
		return
	}
	var limited *RateLimitedError
	reason := refusedFailed
	switch {
	case errors.Is(err, ErrTooLarge):
		reason = refusedTooLarge
	case errors.As(err, &limited):
		reason = refusedRateLimited
	case errors.Is(err, ErrBadName):
		reason = refusedBadName
	case errors.Is(err, ErrBadImage):
		reason = refusedBadImage
	}
	m.refusals[reason].Inc()
}

func (m *Metrics) deleted(why string, n int) {
	if m != nil && n > 0 {
		m.deletions[why].Add(float64(n))
	}
}

func (m *Metrics) observe(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.blobSeconds[op].Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, blob.ErrNotFound) {
		m.blobErrors[op].Inc()
	}
}

// timedStore records the latency and failures of every operation of a blob store.
type timedStore struct {
	blob.Store
	m *Metrics
}

func (t timedStore) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (blob.Info, error) {
	start := time.Now()
	info, err := t.Store.Put(ctx, key, r, size, contentType)
	t.m.observe("put", start, err)
	return info, err
}

func (t timedStore) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	start := time.Now()
	body, info, err := t.Store.Get(ctx, key)
	t.m.observe("get", start, err)
	return body, info, err
}

func (t timedStore) Stat(ctx context.Context, key string) (blob.Info, error) {
	start := time.Now()
	info, err := t.Store.Stat(ctx, key)
	t.m.observe("stat", start, err)
	return info, err
}

func (t timedStore) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := t.Store.Delete(ctx, key)
	t.m.observe("delete", start, err)
	return err
}

func (t timedStore) ListOlder(ctx context.Context, prefix string, before time.Time) iter.Seq2[blob.Info, error] {
	return func(yield func(blob.Info, error) bool) {
		start := time.Now()
		var failed error
		defer func() { t.m.observe("list", start, failed) }()
		for info, err := range t.Store.ListOlder(ctx, prefix, before) {
			failed = err
			if !yield(info, err) {
				return
			}
		}
	}
}
