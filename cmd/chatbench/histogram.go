package main

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// Latencies are recorded in microseconds into log-linear buckets: every power of two is split into
// 2^subBits buckets, so a reported percentile is within 1/2^subBits (3%) of the true value from
// 1 µs up to days, in a fixed array that many goroutines can add to with atomics and that several
// processes' reports can be summed from.
const (
	subBits    = 5
	subBuckets = 1 << subBits
	maxExp     = 40 // 2^40 µs is twelve days; anything longer is clamped
	numBuckets = (maxExp-subBits+1)*subBuckets + subBuckets
)

// histogram counts latencies. The zero value is ready; it is safe for concurrent use.
type histogram struct {
	counts [numBuckets]atomic.Uint64
	maxUs  atomic.Int64
}

func bucketOf(us int64) int {
	if us < subBuckets {
		return int(max(us, 0))
	}
	exp := min(bits.Len64(uint64(us))-1, maxExp) // exp >= subBits
	if exp == maxExp {
		return numBuckets - 1
	}
	sub := int(us>>(exp-subBits)) & (subBuckets - 1)
	return (exp-subBits+1)*subBuckets + sub
}

// bucketUpper is the largest latency, in µs, that falls in bucket i.
func bucketUpper(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	exp := i/subBuckets + subBits - 1
	sub := int64(i % subBuckets)
	low := (int64(subBuckets) + sub) << (exp - subBits)
	return low + (int64(1) << (exp - subBits)) - 1
}

func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	h.counts[bucketOf(us)].Add(1)
	for {
		m := h.maxUs.Load()
		if us <= m || h.maxUs.CompareAndSwap(m, us) {
			return
		}
	}
}

func (h *histogram) count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// quantile returns the latency at or below which a fraction q of the samples fall, rounded up to
// the bucket's upper edge and never above the largest sample.
func (h *histogram) quantile(q float64) time.Duration {
	total := h.count()
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	if rank >= total {
		rank = total - 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen > rank {
			return time.Duration(min(bucketUpper(i), h.maxUs.Load())) * time.Microsecond
		}
	}
	return h.max()
}

func (h *histogram) max() time.Duration { return time.Duration(h.maxUs.Load()) * time.Microsecond }

// merge adds o's samples to h.
func (h *histogram) merge(o *histogram) {
	for i := range o.counts {
		if n := o.counts[i].Load(); n > 0 {
			h.counts[i].Add(n)
		}
	}
	for {
		m, om := h.maxUs.Load(), o.maxUs.Load()
		if om <= m || h.maxUs.CompareAndSwap(m, om) {
			return
		}
	}
}

// histogramJSON is the wire form between processes: only the buckets that hold samples.
type histogramJSON struct {
	MaxUs   int64       `json:"maxUs"`
	Buckets [][2]uint64 `json:"buckets"` // [bucket index, count]
}

func (h *histogram) MarshalJSON() ([]byte, error) {
	out := histogramJSON{MaxUs: h.maxUs.Load(), Buckets: [][2]uint64{}}
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			out.Buckets = append(out.Buckets, [2]uint64{uint64(i), n})
		}
	}
	return json.Marshal(out)
}

func (h *histogram) UnmarshalJSON(data []byte) error {
	var in histogramJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	for _, b := range in.Buckets {
		if b[0] >= numBuckets {
			return fmt.Errorf("histogram bucket %d out of range", b[0])
		}
		h.counts[b[0]].Add(b[1])
	}
	h.maxUs.Store(in.MaxUs)
	return nil
}
