package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
)

func TestParseSeedFlags(t *testing.T) {
	env := func(k string) string {
		if k == "CHAT_MONGO_URI" {
			return "mongodb://127.0.0.1:1/"
		}
		return ""
	}
	cfg, err := parseSeedFlags(nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The defaults are issue 33's data set.
	if cfg.Users != 5000 || cfg.PerUser != 20 || cfg.Big != 1000000 || cfg.MongoURI != "mongodb://127.0.0.1:1/" || cfg.Database != "chat" {
		t.Errorf("defaults = %+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dms", "3"}, "even"},
		{[]string{"-users", "8", "-dms", "8", "-conversations", "8"}, "below -users"},
		{[]string{"-group-size", "7"}, "divide -users"},
		{[]string{"-dms", "22"}, "between 0 and -conversations"},
		{[]string{"-concurrency", "0"}, "-concurrency"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseSeedFlags(tc.args, env, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one about %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseSeedFlags(nil, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("no URI: want an error")
	}
}

func TestSeedPlanGivesEveryUserTheirConversations(t *testing.T) {
	cfg := seedConfig{Prefix: "Seed", Users: 40, PerUser: 6, DMs: 4, GroupSize: 5, Messages: 1001, Big: 3000}
	p, err := planSeed(cfg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The ids dev-mode sign-in gives chatbench's names: lower case.
	if p.users[0].ID != "seed0" || p.users[0].Name != "Seed0" || len(p.users) != 40 {
		t.Fatalf("users start %+v, %d of them", p.users[0], len(p.users))
	}
	per := map[string]int{}
	ids := map[string]bool{}
	var messages int64
	for _, c := range p.convs {
		if ids[c.conv.ID] {
			t.Fatalf("conversation %s planned twice", c.conv.ID)
		}
		ids[c.conv.ID] = true
		seen := map[string]bool{}
		for _, m := range c.conv.Members {
			if seen[m] {
				t.Fatalf("%s has member %s twice", c.conv.ID, m)
			}
			seen[m] = true
			per[m]++
		}
		messages += c.messages
	}
	for _, u := range p.users {
		want := 6
		if u.ID == "seed0" || u.ID == "seed1" {
			want = 7 // and the big conversation
		}
		if per[u.ID] != want {
			t.Errorf("%s is in %d conversations, want %d", u.ID, per[u.ID], want)
		}
	}
	// 40*4/2 DMs and 40*2/5 groups, then the big one.
	if len(p.convs) != 80+16+1 || messages != 1001+3000 {
		t.Errorf("%d conversations with %d messages", len(p.convs), messages)
	}
	big := p.convs[len(p.convs)-1]
	if big.conv.ID != bigConversationID("Seed") || big.messages != 3000 {
		t.Errorf("last conversation %s with %d messages; want the big one", big.conv.ID, big.messages)
	}
	again, _ := planSeed(cfg, time.Now())
	if again.convs[90].conv.ID != p.convs[90].conv.ID || again.convs[90].conv.Members[2] != p.convs[90].conv.Members[2] {
		t.Error("the plan differs between runs with the same flags")
	}
}

func TestSeedBatchesKeepEachConversationInOrder(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	convs := []*seedConv{
		{conv: storage.Conversation{ID: "a", Members: []string{"x", "y"}, CreatedAt: created}, messages: 5},
		{conv: storage.Conversation{ID: "b", Members: []string{"x", "y", "z"}, CreatedAt: created}, messages: 0},
		{conv: storage.Conversation{ID: "c", Members: []string{"z"}, CreatedAt: created}, messages: 4},
	}
	next := map[string]int64{"a": 1, "c": 1}
	lastSeq := map[string]int64{}
	batches := 0
	err := seedBatches(convs, 3, func(msgs []storage.Message, counters map[string]storage.Counters) error {
		batches++
		if len(msgs) >= 3+storage.BucketSize || msgs[0].Seq%storage.BucketSize != 1 {
			t.Fatalf("batch of %d from %s seq %d: want about 3, each beginning a bucket", len(msgs), msgs[0].ConversationID, msgs[0].Seq)
		}
		for _, m := range msgs {
			if m.Seq != next[m.ConversationID] {
				t.Fatalf("%s seq %d, want %d", m.ConversationID, m.Seq, next[m.ConversationID])
			}
			next[m.ConversationID]++
		}
		last := msgs[len(msgs)-1]
		k := counters[last.ConversationID]
		if k.LastSeq != last.Seq || k.Newest.Seq != last.Seq || k.Senders[last.SenderID] != last.Seq {
			t.Fatalf("counters %+v for batch ending at %s %d", k, last.ConversationID, last.Seq)
		}
		for id, k := range counters {
			lastSeq[id] = k.LastSeq
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if batches != 2 || lastSeq["a"] != 5 || lastSeq["c"] != 4 || lastSeq["b"] != 0 {
		t.Errorf("%d batches, last seqs %v", batches, lastSeq)
	}
	// Members take turns sending.
	if m := convs[0].message(2); m.SenderID != "y" || m.ClientMsgID != "seed-2" {
		t.Errorf("message 2 = %+v", m)
	}
}

func TestAssignWritersGivesTheBigConversationAWriterOfItsOwn(t *testing.T) {
	convs := []*seedConv{{messages: 3}, {messages: 3}, {messages: 1000}, {messages: 3}, {messages: 3}}
	w := assignWriters(convs, 3)
	if len(w[0]) != 1 || w[0][0].messages != 1000 || len(w[1])+len(w[2]) != 4 {
		t.Errorf("writers got %d, %d and %d conversations, the first %d messages", len(w[0]), len(w[1]), len(w[2]), w[0][0].messages)
	}
}
