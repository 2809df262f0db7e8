package search

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The corpus of the benchmarks: messages of 4 to 15 words drawn from a vocabulary of 50,000 with
// Zipf's law (as words are in real text), one in ten a Japanese or Arabic sentence, spread over
// 10,000 conversations of 5,000 senders, a send every 100 ms.
const (
	benchVocabulary    = 50_000
	benchConversations = 10_000
	benchSenders       = 5_000
)

var syllables = strings.Fields("ka ri to mo ne sa lu vi po de ha mi ku ze ro ta na fe gi bo")

// benchWord is the word of frequency rank i (0 the most frequent); every rank spells a different word.
func benchWord(i int) string {
	var b strings.Builder
	for {
		b.WriteString(syllables[i%len(syllables)])
		i /= len(syllables)
		if i == 0 {
			return b.String()
		}
		i--
	}
}

var benchSentences = []string{
	"明日東京に行きます", "会議は午後三時からです", "我们明天在北京开会", "今日はありがとうございました",
	"مرحبا بالعالم، كيف حالك؟", "سأصل إلى المكتب غدا", "Ёлка стоит у соседа", "José llega mañana a München",
}

// benchCorpus makes message i of a deterministic corpus, the same on every run.
type benchCorpus struct {
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newBenchCorpus(seed uint64) *benchCorpus {
	rng := rand.New(rand.NewPCG(seed, 1))
	return &benchCorpus{rng: rng, zipf: rand.NewZipf(rng, 1.1, 2, benchVocabulary-1)}
}

func (c *benchCorpus) message(i int) Message {
	var body string
	if c.rng.IntN(10) == 0 {
		body = benchSentences[c.rng.IntN(len(benchSentences))]
	} else {
		words := make([]string, 4+c.rng.IntN(12))
		for j := range words {
			words[j] = benchWord(int(c.zipf.Uint64()))
		}
		body = strings.Join(words, " ")
	}
	return Message{
		ConversationID: "conv" + strconv.Itoa(c.rng.IntN(benchConversations)),
		Seq:            int64(i + 1), // unique per conversation too, which is all the index needs
		SenderID:       "user" + strconv.Itoa(c.rng.IntN(benchSenders)),
		CreatedAt:      t0.Add(time.Duration(i) * 100 * time.Millisecond),
		Body:           body,
	}
}

// applyBatches indexes messages from..to-1 of the corpus in batches of size.
func applyBatches(tb testing.TB, ix *Index, c *benchCorpus, from, to, size int) {
	b := ix.NewBatch()
	for i := from; i < to; i++ {
		if err := b.Put(c.message(i)); err != nil {
			tb.Fatal(err)
		}
		if b.Len() == size || i == to-1 {
			if err := ix.Apply(context.Background(), b); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkIndex measures sustained indexing: each op applies one batch (durably on disk) to an
// index that grows as the benchmark runs. batch=1 is a send indexed alone, what a quiet node does;
// under load a feed that takes everything waiting makes the larger batches.
//
//	go test ./search -run '^$' -bench BenchmarkIndex -benchtime 20000x
func BenchmarkIndex(b *testing.B) {
	for _, size := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ix := newIndex(b)
			c := newBenchCorpus(1)
			b.ReportAllocs()
			start := time.Now()
			n := 0
			for b.Loop() {
				applyBatches(b, ix, c, n, n+size, size)
				n += size
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkIndexFeed plays sends arriving at a steady 500/s to a feed that applies everything
// waiting as one batch, the way the sequencer batches sends: each op is one message, and the
// metric that matters is lag-max, the longest a message waited from its arrival until its batch
// was on disk. A feed that falls behind shows as a lag that grows with the run.
//
//	go test ./search -run '^$' -bench BenchmarkIndexFeed -benchtime 15000x
func BenchmarkIndexFeed(b *testing.B) {
	const rate = 500 // sends per second
	ix := newIndex(b)
	c := newBenchCorpus(1)
	batch := ix.NewBatch()
	var lagMax time.Duration
	var batches int
	b.ReportAllocs()
	start := time.Now()
	arrival := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / rate) }
	n, first := 0, 0 // messages put, and the first of the batch being gathered
	apply := func() {
		if err := ix.Apply(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		lagMax = max(lagMax, time.Since(arrival(first)))
		batches++
		first = n
	}
	for b.Loop() { // an op is one message
		if wait := time.Until(arrival(n)); wait > 0 {
			time.Sleep(wait)
		}
		if err := batch.Put(c.message(n)); err != nil {
			b.Fatal(err)
		}
		n++
		if arrival(n).After(time.Now()) {
			apply() // nothing else is waiting
		}
	}
	if batch.Len() > 0 {
		apply()
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(lagMax.Microseconds())/1000, "ms-lag-max")
	b.ReportMetric(float64(n)/float64(batches), "msgs/batch")
}

// BenchmarkSearch measures queries over an index of $CHATD_SEARCH_BENCH_MESSAGES messages (default
// 100,000), built in batches of 1,000 and kept in $CHATD_SEARCH_BENCH_DIR when set, so that later
// runs reuse it; each op is one query, and the median and 99th percentile are reported.
//
//	CHATD_SEARCH_BENCH_MESSAGES=1000000 CHATD_SEARCH_BENCH_DIR=/tmp/chatd-search-1m \
//	  go test ./search -run '^$' -bench BenchmarkSearch -benchtime 2000x -timeout 60m
func BenchmarkSearch(b *testing.B) {
	total := 100_000
	if s := os.Getenv("CHATD_SEARCH_BENCH_MESSAGES"); s != "" {
		var err error
		if total, err = strconv.Atoi(s); err != nil {
			b.Fatalf("CHATD_SEARCH_BENCH_MESSAGES: %v", err)
		}
	}
	ix := benchIndex(b, total)

	rng := rand.New(rand.NewPCG(2, 2))
	memberships := func(n int) []string {
		convs := make([]string, n)
		for i := range convs {
			convs[i] = "conv" + strconv.Itoa(rng.IntN(benchConversations))
		}
		return convs
	}
	for _, tc := range []struct {
		name    string
		words   func() string
		members int // conversations of the asker
		one     bool
	}{
		{"common word/50 conversations", func() string { return benchWord(rng.IntN(10)) }, 50, false},
		{"mid word/50 conversations", func() string { return benchWord(100 + rng.IntN(900)) }, 50, false},
		{"rare word/50 conversations", func() string { return benchWord(5_000 + rng.IntN(20_000)) }, 50, false},
		{"two words/50 conversations", func() string { return benchWord(rng.IntN(100)) + " " + benchWord(rng.IntN(100)) }, 50, false},
		{"japanese/50 conversations", func() string { return []string{"東京", "会議", "北京", "ありがとう"}[rng.IntN(4)] }, 50, false},
		{"common word/1 conversation", func() string { return benchWord(rng.IntN(10)) }, 50, true},
		{"common word/1000 conversations", func() string { return benchWord(rng.IntN(10)) }, 1000, false},
		{"mid word/1000 conversations", func() string { return benchWord(100 + rng.IntN(900)) }, 1000, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var took []time.Duration
			hits := 0
			for b.Loop() {
				q := Query{Text: tc.words(), Conversations: memberships(tc.members)}
				if tc.one {
					q.Conversation = q.Conversations[0]
				}
				start := time.Now()
				p, err := ix.Search(context.Background(), q)
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				hits += len(p.Hits)
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "ms-p99")
			b.ReportMetric(float64(hits)/float64(len(took)), "hits/op")
		})
	}
}

// benchIndex opens the benchmark's index of total messages, building it when its directory does
// not hold exactly that many.
func benchIndex(b *testing.B, total int) *Index {
	dir := os.Getenv("CHATD_SEARCH_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	dir = filepath.Join(dir, strconv.Itoa(total))
	if ix, err := Open(Config{Dir: dir}); err == nil {
		n, err := ix.index.DocCount()
		if err == nil && n == uint64(total) {
			b.Cleanup(func() { _ = ix.Close() })
			return ix
		}
		_ = ix.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	ix := openIndex(b, dir)
	start := time.Now()
	c := newBenchCorpus(1)
	const step = 100_000
	for from := 0; from < total; from += step {
		applyBatches(b, ix, c, from, min(from+step, total), 1000)
		b.Logf("indexed %d messages in %v (%.0f/s)", min(from+step, total), time.Since(start).Round(time.Second), float64(min(from+step, total))/time.Since(start).Seconds())
	}
	return ix
}
