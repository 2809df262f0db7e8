package search

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Bleve's scorch runs goroutines per open index: this proves Close stops them. Its analysis
// workers are process-wide, started when scorch's package initialises, and never stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func openIndex(t testing.TB, dir string) *Index {
	t.Helper()
	ix, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	return ix
}

func newIndex(t testing.TB) *Index {
	return openIndex(t, filepath.Join(t.TempDir(), "search"))
}

func put(t testing.TB, ix *Index, msgs ...Message) {
	t.Helper()
	b := ix.NewBatch()
	for _, m := range msgs {
		if err := b.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func find(t testing.TB, ix *Index, q Query) Page {
	t.Helper()
	p, err := ix.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("search %q: %v", q.Text, err)
	}
	return p
}

// keys names hits as conversation/seq, in their order.
func keys(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = fmt.Sprintf("%s/%d", h.ConversationID, h.Seq)
	}
	return out
}

func matched(s []Run) []string {
	var out []string
	for _, r := range s {
		if r.Match {
			out = append(out, r.Text)
		}
	}
	return out
}

func text(s []Run) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteString(r.Text)
	}
	return b.String()
}

func TestFindsAWordInEveryScript(t *testing.T) {
	ix := newIndex(t)
	bodies := map[string]string{
		"ja": "明日東京に行きます",
		"zh": "我们明天在北京开会",
		"ar": "مرحبا بالعالم، كيف حالك؟",
		"he": "שָׁלוֹם לְכֻלָּם",
		"ru": "Ёлка стоит у ПРИВЕТЛИВОГО соседа",
		"el": "Καλημέρα σε όλους",
		"es": "José llega mañana",
		"de": "Wir treffen uns in MÜNCHEN",
	}
	var convs []string
	for c, body := range bodies {
		put(t, ix, Message{ConversationID: c, Seq: 1, SenderID: "u1", CreatedAt: t0, Body: body})
		convs = append(convs, c)
	}

	for _, tc := range []struct {
		query, conv, marked string
	}{
		{"東京", "ja", "東京"},
		{"東", "ja", "東"}, // a one-character word
		{"行きます", "ja", "行きます"},
		{"北京", "zh", "北京"},
		{"开会", "zh", "开会"},
		{"مرحبا", "ar", "مرحبا"},
		{"العالم", "ar", "بالعالم"}, // the article and the preposition are part of the written word
		{"שלום", "he", "שָׁלוֹם"},   // niqqud ignored
		{"елка", "ru", "Ёлка"},
		{"приветливого", "ru", "ПРИВЕТЛИВОГО"},
		{"καλημερα", "el", "Καλημέρα"},
		{"jose", "es", "José"},
		{"MANANA", "es", "mañana"},
		{"münchen", "de", "MÜNCHEN"},
		{"munchen", "de", "MÜNCHEN"},
		{"大阪", "", ""},
		{"東京 大阪", "", ""}, // every word must match
	} {
		p := find(t, ix, Query{Text: tc.query, Conversations: convs})
		if tc.conv == "" {
			if len(p.Hits) != 0 {
				t.Errorf("%q found %v, want nothing", tc.query, keys(p.Hits))
			}
			continue
		}
		if len(p.Hits) != 1 || p.Hits[0].ConversationID != tc.conv {
			t.Errorf("%q found %v, want %s/1 only", tc.query, keys(p.Hits), tc.conv)
			continue
		}
		h := p.Hits[0]
		if got := matched(h.Snippet); !slices.Equal(got, []string{tc.marked}) {
			t.Errorf("%q marked %q in %q, want %q", tc.query, got, text(h.Snippet), tc.marked)
		}
		if text(h.Snippet) != bodies[tc.conv] {
			t.Errorf("%q snippet %q, want the whole short body %q", tc.query, text(h.Snippet), bodies[tc.conv])
		}
	}
}

func TestHitCarriesTheMessage(t *testing.T) {
	ix := newIndex(t)
	at := t0.Add(1234 * time.Millisecond)
	put(t, ix, Message{ConversationID: "c1", Seq: 42, SenderID: "ana", CreatedAt: at, Body: "see you at the station"})
	p := find(t, ix, Query{Text: "station", Conversations: []string{"c1"}})
	if len(p.Hits) != 1 {
		t.Fatalf("hits %v", keys(p.Hits))
	}
	h := p.Hits[0]
	if h.ConversationID != "c1" || h.Seq != 42 || h.SenderID != "ana" || !h.CreatedAt.Equal(at) {
		t.Errorf("hit %+v, want c1/42 by ana at %v", h, at)
	}
	if p.Next != "" {
		t.Errorf("one hit and a next cursor %q", p.Next)
	}
}

func TestSnippetIsPlainTextAroundTheMatch(t *testing.T) {
	ix := newIndex(t)
	markup := `<script>alert("x")</script> & <mark>fake</mark> hello`
	long := strings.Repeat("filler words before ", 40) + "the needle is here" + strings.Repeat(" and filler words after", 40)
	put(t, ix,
		Message{ConversationID: "c", Seq: 1, SenderID: "u", CreatedAt: t0, Body: markup},
		Message{ConversationID: "c", Seq: 2, SenderID: "u", CreatedAt: t0, Body: long},
	)

	p := find(t, ix, Query{Text: "hello", Conversations: []string{"c"}})
	if len(p.Hits) != 1 {
		t.Fatalf("hits %v", keys(p.Hits))
	}
	want := []Run{{Text: `<script>alert("x")</script> & <mark>fake</mark> `}, {Text: "hello", Match: true}}
	if !slices.Equal(p.Hits[0].Snippet, want) {
		t.Errorf("snippet %+v, want the body's own text unescaped with only hello matched: %+v", p.Hits[0].Snippet, want)
	}

	p = find(t, ix, Query{Text: "needle", Conversations: []string{"c"}})
	if len(p.Hits) != 1 {
		t.Fatalf("hits %v", keys(p.Hits))
	}
	s := text(p.Hits[0].Snippet)
	if !strings.HasPrefix(s, "…") || !strings.HasSuffix(s, "…") || len(s) > 300 || !strings.Contains(long, strings.Trim(s, "…")) || !strings.Contains(s, "needle") {
		t.Errorf("snippet of a %d-byte body is %d bytes %q, want a piece of it around the needle between ellipses", len(long), len(s), s)
	}
}

func TestEditIsFoundByTheNewTextOnly(t *testing.T) {
	ix := newIndex(t)
	put(t, ix, Message{ConversationID: "c", Seq: 7, SenderID: "u", CreatedAt: t0, Body: "lunch at noon"})
	put(t, ix, Message{ConversationID: "c", Seq: 7, SenderID: "u", CreatedAt: t0, Body: "dinner at eight"})

	if p := find(t, ix, Query{Text: "lunch", Conversations: []string{"c"}}); len(p.Hits) != 0 {
		t.Errorf("old text found: %v", keys(p.Hits))
	}
	p := find(t, ix, Query{Text: "at", Conversations: []string{"c"}})
	if got := keys(p.Hits); !slices.Equal(got, []string{"c/7"}) {
		t.Errorf("after the edit %q found %v, want c/7 once", "at", got)
	}
	if got := matched(find(t, ix, Query{Text: "dinner", Conversations: []string{"c"}}).Hits[0].Snippet); !slices.Equal(got, []string{"dinner"}) {
		t.Errorf("new text marked %q", got)
	}
}

func TestDeletedMessageIsGone(t *testing.T) {
	ix := newIndex(t)
	put(t, ix,
		Message{ConversationID: "c", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "secret plan"},
		Message{ConversationID: "c", Seq: 2, SenderID: "u", CreatedAt: t0, Body: "another plan"},
	)
	b := ix.NewBatch()
	b.Delete(Message{ConversationID: "c", Seq: 1, CreatedAt: t0})
	b.Delete(Message{ConversationID: "c", Seq: 99, CreatedAt: t0}) // never indexed
	if err := ix.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if p := find(t, ix, Query{Text: "plan", Conversations: []string{"c"}}); !slices.Equal(keys(p.Hits), []string{"c/2"}) {
		t.Errorf("after deleting c/1 found %v, want c/2", keys(p.Hits))
	}
}

func TestLastChangeInABatchWins(t *testing.T) {
	ix := newIndex(t)
	b := ix.NewBatch()
	m := Message{ConversationID: "c", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "first words"}
	_ = b.Put(m)
	b.Delete(m)
	m.Seq = 2
	_ = b.Put(m)
	m.Body = "second words"
	_ = b.Put(m)
	if err := ix.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("batch holds %d changes after Apply", b.Len())
	}
	if p := find(t, ix, Query{Text: "words", Conversations: []string{"c"}}); !slices.Equal(keys(p.Hits), []string{"c/2"}) {
		t.Errorf("found %v, want c/2 only", keys(p.Hits))
	}
	if p := find(t, ix, Query{Text: "first", Conversations: []string{"c"}}); len(p.Hits) != 0 {
		t.Errorf("replaced text found: %v", keys(p.Hits))
	}
}

func TestDeleteSenderAndConversation(t *testing.T) {
	ix := newIndex(t)
	// More than one round of deletePage, to prove the rounds go on until none is left.
	var msgs []Message
	for i := range deletePage + 250 {
		msgs = append(msgs, Message{ConversationID: fmt.Sprintf("g%d", i%3), Seq: int64(i + 1), SenderID: "leaver", CreatedAt: t0, Body: "hello from leaver"})
	}
	for i := range 5 {
		msgs = append(msgs,
			Message{ConversationID: fmt.Sprintf("g%d", i%3), Seq: int64(10_000 + i), SenderID: "stayer", CreatedAt: t0, Body: "hello from stayer"},
			Message{ConversationID: "dm", Seq: int64(i + 1), SenderID: "stayer", CreatedAt: t0, Body: "hello in the dm"},
		)
	}
	put(t, ix, msgs...)
	all := []string{"g0", "g1", "g2", "dm"}

	n, err := ix.DeleteSender(context.Background(), "leaver")
	if err != nil || n != deletePage+250 {
		t.Fatalf("DeleteSender = %d, %v; want %d", n, err, deletePage+250)
	}
	p := find(t, ix, Query{Text: "hello", Conversations: all, Limit: MaxLimit})
	if len(p.Hits) != 10 {
		t.Errorf("after deleting the sender %d hits, want the other sender's 10", len(p.Hits))
	}
	for _, h := range p.Hits {
		if h.SenderID != "stayer" {
			t.Errorf("deleted sender's message %s/%d found", h.ConversationID, h.Seq)
		}
	}

	n, err = ix.DeleteConversation(context.Background(), "dm")
	if err != nil || n != 5 {
		t.Fatalf("DeleteConversation = %d, %v; want 5", n, err)
	}
	p = find(t, ix, Query{Text: "hello", Conversations: all, Limit: MaxLimit})
	if len(p.Hits) != 5 || slices.ContainsFunc(p.Hits, func(h Hit) bool { return h.ConversationID == "dm" }) {
		t.Errorf("after deleting the dm found %v, want the 5 group messages", keys(p.Hits))
	}
}

func TestOnlyTheGivenConversations(t *testing.T) {
	ix := newIndex(t)
	put(t, ix,
		Message{ConversationID: "mine", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "the launch date"},
		Message{ConversationID: "also-mine", Seq: 1, SenderID: "u", CreatedAt: t0.Add(time.Second), Body: "launch moved"},
		Message{ConversationID: "theirs", Seq: 1, SenderID: "v", CreatedAt: t0.Add(2 * time.Second), Body: "launch secrets"},
	)
	for _, tc := range []struct {
		name string
		q    Query
		want []string
	}{
		{"memberships", Query{Conversations: []string{"mine", "also-mine"}}, []string{"also-mine/1", "mine/1"}},
		{"one of them", Query{Conversations: []string{"mine", "also-mine"}, Conversation: "mine"}, []string{"mine/1"}},
		{"one not among them", Query{Conversations: []string{"mine", "also-mine"}, Conversation: "theirs"}, nil},
		{"no memberships", Query{Conversation: "theirs"}, nil},
	} {
		tc.q.Text = "launch"
		if got := keys(find(t, ix, tc.q).Hits); !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPagesAreNewestFirstAndHoldEachHitOnce(t *testing.T) {
	ix := newIndex(t)
	// 47 messages in 3 conversations; several share a time, within a conversation too, and across
	// conversations a seq too, so the order needs every tie-breaker.
	var msgs []Message
	for i := range 47 {
		msgs = append(msgs, Message{
			ConversationID: fmt.Sprintf("c%d", i%3),
			Seq:            int64(i/3 + 1),
			SenderID:       "u",
			CreatedAt:      t0.Add(time.Duration(i/5) * time.Millisecond),
			Body:           fmt.Sprintf("report number %d", i),
		})
	}
	// Noise that must not appear, also out of the memberships.
	msgs = append(msgs,
		Message{ConversationID: "c0", Seq: 100, SenderID: "u", CreatedAt: t0, Body: "unrelated"},
		Message{ConversationID: "other", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "report"},
	)
	put(t, ix, msgs...)

	var got []Hit
	q := Query{Text: "REPORT", Conversations: []string{"c0", "c1", "c2"}, Limit: 10}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p := find(t, ix, q)
		got = append(got, p.Hits...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if len(got) != 47 {
		t.Fatalf("pages held %d hits, want 47", len(got))
	}
	seen := map[string]bool{}
	for i, h := range got {
		k := fmt.Sprintf("%s/%d", h.ConversationID, h.Seq)
		if seen[k] {
			t.Errorf("%s returned twice", k)
		}
		seen[k] = true
		if i > 0 {
			prev := got[i-1]
			// Seqs order messages within a conversation only.
			sameTime := h.CreatedAt.Equal(prev.CreatedAt) && h.ConversationID == prev.ConversationID
			if h.CreatedAt.After(prev.CreatedAt) || sameTime && h.Seq > prev.Seq {
				t.Errorf("hit %d (%s at %v) is newer than hit %d (%s/%d at %v)", i, k, h.CreatedAt, i-1, prev.ConversationID, prev.Seq, prev.CreatedAt)
			}
		}
	}
}

func TestIndexSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "search")
	ix, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	put(t, ix, Message{ConversationID: "c", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "remember this"})
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	ix = openIndex(t, dir)
	if p := find(t, ix, Query{Text: "remember", Conversations: []string{"c"}}); len(p.Hits) != 1 {
		t.Errorf("after reopening found %v, want c/1", keys(p.Hits))
	}
}

func TestRefusesAnIndexOfAnotherMapping(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "search")
	ix, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.index.SetInternal([]byte(mappingVersionKey), []byte("0")); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrIncompatible) {
		t.Errorf("Open of an index of mapping 0 = %v, want ErrIncompatible", err)
	}
}

func TestRefusals(t *testing.T) {
	if err := (Config{}).Validate(); err == nil {
		t.Error("a config without a directory is valid")
	}
	if got := DefaultConfig("/var/lib/chatd").Dir; got != "/var/lib/chatd/search" {
		t.Errorf("default dir %q", got)
	}
	ix := newIndex(t)
	for _, tc := range []struct {
		q    Query
		want error
	}{
		{Query{Text: "", Conversations: []string{"c"}}, ErrNoWords},
		{Query{Text: " ?! ", Conversations: []string{"c"}}, ErrNoWords},
		{Query{Text: "word", Conversations: []string{"c"}, Cursor: "not base64!"}, ErrBadCursor},
		{Query{Text: "word", Conversations: []string{"c"}, Cursor: "="}, ErrBadCursor},
	} {
		if _, err := ix.Search(context.Background(), tc.q); !errors.Is(err, tc.want) {
			t.Errorf("Search(%+v) = %v, want %v", tc.q, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ix.Apply(ctx, ix.NewBatch()); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context = %v", err)
	}
}

func TestAfterLeavesOutWhatTheAskerDeletedForThemselves(t *testing.T) {
	ix := newIndex(t)
	var msgs []Message
	for seq := int64(1); seq <= 4; seq++ {
		msgs = append(msgs, Message{ConversationID: "hidden", Seq: seq, SenderID: "u", CreatedAt: t0.Add(time.Duration(seq) * time.Second), Body: "budget"})
	}
	msgs = append(msgs, Message{ConversationID: "kept", Seq: 1, SenderID: "u", CreatedAt: t0, Body: "budget"})
	put(t, ix, msgs...)
	p := find(t, ix, Query{Text: "budget", Conversations: []string{"hidden", "kept"}, After: map[string]int64{"hidden": 2}})
	if got, want := keys(p.Hits), []string{"hidden/4", "hidden/3", "kept/1"}; !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
}

func TestProgressIsKeptWithItsBatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "search")
	ix, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b := ix.NewBatch()
	b.SetProgress("c", Progress{Seq: 7, Version: 3})
	if err := ix.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	ix = openIndex(t, dir)
	if p, err := ix.Progress("c"); err != nil || p != (Progress{Seq: 7, Version: 3}) {
		t.Errorf("progress of c = %+v, %v; want 7/3", p, err)
	}
	if p, err := ix.Progress("never"); err != nil || p != (Progress{}) {
		t.Errorf("progress of a conversation never taken = %+v, %v; want zero", p, err)
	}
}

func TestPagingPastManyLeftOutFindsEveryVisibleHit(t *testing.T) {
	ix := newIndex(t)
	var msgs []Message
	for seq := int64(1); seq <= 3; seq++ { // the oldest: in a conversation kept
		msgs = append(msgs, Message{ConversationID: "kept", Seq: seq, SenderID: "u", CreatedAt: t0.Add(time.Duration(seq) * time.Second), Body: "cedar"})
	}
	for seq := int64(1); seq <= 60; seq++ { // newer: all deleted for oneself
		msgs = append(msgs, Message{ConversationID: "hidden", Seq: seq, SenderID: "u", CreatedAt: t0.Add(time.Hour + time.Duration(seq)*time.Second), Body: "cedar"})
	}
	put(t, ix, msgs...)
	q := Query{Text: "cedar", Conversations: []string{"hidden", "kept"}, After: map[string]int64{"hidden": 60}, Limit: 5}
	var got []string
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("still paging after %d pages; found %v", pages, got)
		}
		p := find(t, ix, q)
		got = append(got, keys(p.Hits)...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if want := []string{"kept/3", "kept/2", "kept/1"}; !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
}
