package hub_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/testenv/poll"
)

// TestMain fails the package if a test leaves a goroutine behind, a grace timer's included.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Frames in these tests describe themselves: "conv/seq" for a message push, anything else for
// other frames, so order, loss and repeats are read off what a connection got.
func msg(conv string, seq int64) []byte { return []byte(conv + "/" + strconv.FormatInt(seq, 10)) }

// How a frame reached a connection.
const (
	viaPush      = "push"
	viaWait      = "wait"
	viaEphemeral = "ephemeral"
)

type got struct {
	via, key, frame string
}

// conn is a fake connection that records what it is given.
type conn struct {
	user string
	mu   sync.Mutex
	got  []got
}

func newConn(user string) *conn { return &conn{user: user} }

func (c *conn) UserID() string { return c.user }
func (c *conn) Push(frame []byte) bool {
	c.record(viaPush, "", frame)
	return true
}
func (c *conn) PushWait(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.record(viaWait, "", frame)
	return nil
}
func (c *conn) PushEphemeral(key string, frame []byte) { c.record(viaEphemeral, key, frame) }

func (c *conn) record(via, key string, frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, got{via, key, string(frame)})
}

func (c *conn) all() []got {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// seqs returns the seqs of one conversation's message frames, in the order given.
func (c *conn) seqs(conv string) []int64 {
	var out []int64
	for _, g := range c.all() {
		if rest, ok := strings.CutPrefix(g.frame, conv+"/"); ok {
			seq, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				panic(err)
			}
			out = append(out, seq)
		}
	}
	return out
}

func newHub(t *testing.T, cfg hub.Config) *hub.Hub[*conn, string] {
	t.Helper()
	if cfg.SyncGrace == 0 {
		cfg.SyncGrace = time.Minute // released by Sync only, unless a test says otherwise
	}
	return hub.New[*conn, string](cfg)
}

// add registers a connection and routes convs (id to last seq) to its user, as the chat service
// does for a user's first connection.
func add(e *hub.Hub[*conn, string], c *conn, convs map[string]int64) bool {
	_, first, _ := e.Add(c, 0, c.UserID())
	for id, seq := range convs {
		e.Join(c.UserID(), id, seq)
	}
	return first
}

// live adds a connection and syncs it at once, so its pushes are not held.
func live(t *testing.T, e *hub.Hub[*conn, string], c *conn, convs map[string]int64) bool {
	t.Helper()
	first := add(e, c, convs)
	if err := e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return first
}

// TestInterest: Add and Remove say whether a connection was its user's first or last here, Join
// and Leave whether a route changed; Watching says whether a conversation has a member here, and
// User whether a user has a connection here: what the driver subscribes to.
func TestInterest(t *testing.T) {
	e := newHub(t, hub.Config{})
	a1, a2, b1 := newConn("a"), newConn("a"), newConn("b")
	steps := []struct {
		name string
		do   func() bool
		want bool
		// what is watched after the step: conversations, then users
		convs, users string
	}{
		{"a's first connection", func() bool { return live(t, e, a1, map[string]int64{"x": 0, "y": 3}) }, true, "x y", "a"},
		{"a's second connection gets a's routes", func() bool { return live(t, e, a2, nil) }, false, "x y", "a"},
		{"b joins x through his first connection", func() bool { return live(t, e, b1, map[string]int64{"x": 0}) }, true, "x y", "a b"},
		{"b joins z", func() bool { return e.Join("b", "z", 0) }, true, "x y z", "a b"},
		{"b joins z again", func() bool { return e.Join("b", "z", 0) }, false, "x y z", "a b"},
		{"nobody here joins", func() bool { return e.Join("nobody", "w", 0) }, false, "x y z", "a b"},
		{"a joins z", func() bool { return e.Join("a", "z", 0) }, true, "x y z", "a b"},
		{"b leaves z", func() bool { return e.Leave("b", "z") }, true, "x y z", "a b"},
		{"b leaves z again", func() bool { return e.Leave("b", "z") }, false, "x y z", "a b"},
		{"a leaves z, its last member", func() bool { return e.Leave("a", "z") }, true, "x y", "a b"},
		{"a leaves what a is not in", func() bool { return e.Leave("a", "w") }, false, "x y", "a b"},
		{"a's first connection closes", func() bool { _, last := e.Remove(a1); return last }, false, "x y", "a b"},
		{"a's second connection closes", func() bool { _, last := e.Remove(a2); return last }, true, "x", "b"},
		{"a's connection closes twice", func() bool { _, last := e.Remove(a2); return last }, false, "x", "b"},
		{"b's last connection closes", func() bool { _, last := e.Remove(b1); return last }, true, "", ""},
	}
	watched := func(ids []string, watching func(string) bool) string {
		var out []string
		for _, id := range ids {
			if watching(id) {
				out = append(out, id)
			}
		}
		return strings.Join(out, " ")
	}
	for _, st := range steps {
		if got := st.do(); got != st.want {
			t.Errorf("%s: returned %v, want %v", st.name, got, st.want)
		}
		if got := watched([]string{"w", "x", "y", "z"}, e.Watching); got != st.convs {
			t.Errorf("%s: conversations watched %q, want %q", st.name, got, st.convs)
		}
		if got := watched([]string{"a", "b", "nobody"}, func(id string) bool { _, ok := e.User(id); return ok }); got != st.users {
			t.Errorf("%s: users watched %q, want %q", st.name, got, st.users)
		}
	}
	if n := e.Connections(); n != 0 {
		t.Errorf("%d connections left", n)
	}
	if convs := e.Conversations(); len(convs) != 0 {
		t.Errorf("conversations left: %v", convs)
	}
}

// TestUserState: the state given with a user's first connection is the one every later connection
// and User see, until the last connection closes and it is dropped with the user; a user at the
// connection limit is refused and nothing changes.
func TestUserState(t *testing.T) {
	e := newHub(t, hub.Config{})
	a1, a2, a3 := newConn("a"), newConn("a"), newConn("a")
	if st, first, ok := e.Add(a1, 2, "first state"); !ok || !first || st != "first state" {
		t.Fatalf("first connection: state %q, first %v, ok %v", st, first, ok)
	}
	if st, first, ok := e.Add(a2, 2, "ignored"); !ok || first || st != "first state" {
		t.Fatalf("second connection: state %q, first %v, ok %v; want the first state", st, first, ok)
	}
	if _, _, ok := e.Add(a3, 2, "ignored"); ok {
		t.Fatal("a third connection was let past a limit of 2")
	}
	if n := len(e.Conns("a")); n != 2 {
		t.Fatalf("a has %d connections after the refusal; want 2", n)
	}
	if st, ok := e.User("a"); !ok || st != "first state" {
		t.Fatalf("User(a) = %q, %v", st, ok)
	}
	if st, last := e.Remove(a1); last || st != "first state" {
		t.Fatalf("first close: state %q, last %v", st, last)
	}
	if st, last := e.Remove(a2); !last || st != "first state" {
		t.Fatalf("last close: state %q, last %v; want the state, last", st, last)
	}
	if _, ok := e.User("a"); ok {
		t.Fatal("a's state outlived a's last connection")
	}
	if st, first, _ := e.Add(a3, 2, "new state"); !first || st != "new state" {
		t.Fatalf("a comes back: state %q, first %v; want a new state", st, first)
	}
	e.Remove(a3)
}

// TestDeliverMessage: each connection gets each seq once and in order; a seq not above the one
// delivered is dropped; a conversation with no member here gets nothing.
func TestDeliverMessage(t *testing.T) {
	e := newHub(t, hub.Config{})
	a1, a2, b := newConn("a"), newConn("a"), newConn("b")
	live(t, e, a1, map[string]int64{"x": 0, "y": 5})
	live(t, e, a2, nil)
	live(t, e, b, map[string]int64{"x": 0})

	for _, d := range []struct {
		conv string
		seq  int64
		want bool
	}{
		{"x", 1, true}, {"x", 2, true}, {"x", 2, false}, {"x", 1, false}, {"x", 4, true}, {"x", 3, false},
		{"y", 5, false}, {"y", 6, true},
		{"nobody", 1, false},
	} {
		if ok := e.DeliverMessage(d.conv, d.seq, msg(d.conv, d.seq), time.Time{}); ok != d.want {
			t.Errorf("deliver %s/%d: %v, want %v", d.conv, d.seq, ok, d.want)
		}
	}
	for _, c := range []*conn{a1, a2, b} {
		if got := c.seqs("x"); !slices.Equal(got, []int64{1, 2, 4}) {
			t.Errorf("%s got x seqs %v, want [1 2 4]", c.user, got)
		}
		for _, g := range c.all() {
			if g.via != viaPush {
				t.Errorf("%s got %q by %s, want push", c.user, g.frame, g.via)
			}
		}
	}
	for _, c := range []*conn{a1, a2} {
		if got := c.seqs("y"); !slices.Equal(got, []int64{6}) {
			t.Errorf("%s got y seqs %v, want [6]", c.user, got)
		}
	}
	if got := b.seqs("y"); len(got) > 0 {
		t.Errorf("b, not in y, got %v", got)
	}
	if seq, ok := e.Delivered("x"); !ok || seq != 4 {
		t.Errorf("Delivered(x) = %d, %v; want 4, true", seq, ok)
	}
	if _, ok := e.Delivered("nobody"); ok {
		t.Errorf("Delivered of a conversation nobody here is in says true")
	}

	// After leaving, nothing more; after rejoining, what follows.
	e.Leave("b", "x")
	e.DeliverMessage("x", 5, msg("x", 5), time.Time{})
	e.Join("b", "x", 0)
	e.DeliverMessage("x", 6, msg("x", 6), time.Time{})
	if got := b.seqs("x"); !slices.Equal(got, []int64{1, 2, 4, 6}) {
		t.Errorf("b got x seqs %v across leave and rejoin, want [1 2 4 6]", got)
	}
}

// TestHeldUntilGrace: a connection that never syncs gets its held pushes, in order, once the
// grace ends, and nothing before.
func TestHeldUntilGrace(t *testing.T) {
	const grace = 100 * time.Millisecond
	e := newHub(t, hub.Config{SyncGrace: grace})
	c := newConn("a")
	added := time.Now()
	add(e, c, map[string]int64{"x": 0})
	for seq := int64(1); seq <= 3; seq++ {
		e.DeliverMessage("x", seq, msg("x", seq), time.Time{})
	}
	if got := c.all(); len(got) > 0 && time.Since(added) < grace {
		t.Fatalf("got %v before syncing, within the grace", got)
	}
	poll.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if got := c.seqs("x"); len(got) < 3 {
			return fmt.Errorf("held pushes never released; got %v", got)
		}
		return nil
	})
	if since := time.Since(added); since < grace {
		t.Errorf("held pushes released after %v, within the grace of %v", since, grace)
	}
	e.DeliverMessage("x", 4, msg("x", 4), time.Time{})
	if got := c.seqs("x"); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Errorf("got %v, want 1..4 in order", got)
	}
	e.Remove(c)
}

// TestSyncReplaysThenReleases: a sync's replay goes first, then the pushes held meanwhile, with
// no seq twice; a second sync repeats nothing.
func TestSyncReplaysThenReleases(t *testing.T) {
	e := newHub(t, hub.Config{})
	c := newConn("a")
	add(e, c, map[string]int64{"x": 2, "y": 0})
	for seq := int64(3); seq <= 6; seq++ { // live while not synced: held
		e.DeliverMessage("x", seq, msg("x", seq), time.Time{})
	}
	e.DeliverMessage("y", 1, msg("y", 1), time.Time{})
	if got := c.all(); len(got) > 0 {
		t.Fatalf("got %v before syncing", got)
	}
	stored := func(push hub.ReplayFunc, conv string, from, to int64) error {
		for seq := from; seq <= to; seq++ {
			if err := push(conv, seq, msg(conv, seq)); err != nil {
				return err
			}
		}
		return nil
	}
	err := e.Sync(context.Background(), c, func(push hub.ReplayFunc) error {
		// The client holds x up to 1; the store has up to 4 when the replay reads it; 7 arrives
		// live during the replay.
		if err := stored(push, "x", 2, 4); err != nil {
			return err
		}
		e.DeliverMessage("x", 7, msg("x", 7), time.Time{})
		if got := c.seqs("x"); !slices.Equal(got, []int64{2, 3, 4}) {
			t.Errorf("during the replay got %v: a live push went ahead of it", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.seqs("x"); !slices.Equal(got, []int64{2, 3, 4, 5, 6, 7}) {
		t.Errorf("got x seqs %v, want 2..7 once each in order", got)
	}
	if got := c.seqs("y"); !slices.Equal(got, []int64{1}) {
		t.Errorf("got y seqs %v, want [1]", got)
	}
	for _, g := range c.all() {
		seq, _ := strconv.Atoi(g.frame[2:])
		if replayed := g.frame[0] == 'x' && seq <= 4; replayed != (g.via == viaWait) {
			t.Errorf("%s came by %s: a replay waits for room, live pushes do not", g.frame, g.via)
		}
	}

	if err := e.Sync(context.Background(), c, func(push hub.ReplayFunc) error { return stored(push, "x", 1, 7) }); err != nil {
		t.Fatal(err)
	}
	if got := c.seqs("x"); !slices.Equal(got, []int64{2, 3, 4, 5, 6, 7}) {
		t.Errorf("a second sync repeated seqs: %v", got)
	}

	// A replay that fails still releases what was held.
	e.Sync(context.Background(), c, func(push hub.ReplayFunc) error {
		e.DeliverMessage("x", 8, msg("x", 8), time.Time{})
		return fmt.Errorf("store down")
	})
	if got := c.seqs("x"); got[len(got)-1] != 8 {
		t.Errorf("after a failed replay got %v, want 8 released", got)
	}
	// A connection the hub does not know replays nothing.
	stranger := newConn("s")
	if err := e.Sync(context.Background(), stranger, func(push hub.ReplayFunc) error { return stored(push, "x", 1, 3) }); err != nil {
		t.Fatal(err)
	}
	if got := stranger.all(); len(got) > 0 {
		t.Errorf("an unknown connection was given %v", got)
	}
	e.Remove(c)
}

// TestMaxHeld: what is held for a connection that has not synced is bounded; past the bound
// pushes are dropped (the client fills the gap from history), later ones flow after the sync.
func TestMaxHeld(t *testing.T) {
	e := newHub(t, hub.Config{MaxHeld: 3})
	c := newConn("a")
	add(e, c, map[string]int64{"x": 0})
	for seq := int64(1); seq <= 10; seq++ {
		e.DeliverMessage("x", seq, msg("x", seq), time.Time{})
	}
	if err := e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := c.seqs("x"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("released %v, want the first 3 held", got)
	}
	e.DeliverMessage("x", 11, msg("x", 11), time.Time{})
	if got := c.seqs("x"); !slices.Equal(got, []int64{1, 2, 3, 11}) {
		t.Errorf("got %v, want 11 live after the release", got)
	}
	e.Remove(c)
}

// TestEphemeralToConversation: with a position, a key's frames only move forward; skipUser's
// connections get none; without a position every frame goes.
func TestEphemeralToConversation(t *testing.T) {
	e := newHub(t, hub.Config{})
	a, b1, b2 := newConn("a"), newConn("b"), newConn("b")
	for _, c := range []*conn{a, b1, b2} {
		live(t, e, c, map[string]int64{"x": 0})
	}
	for _, pos := range []int64{5, 3, 5, 7, 6} {
		e.EphemeralToConversation("x", "a", "receipt:x:a", pos, []byte("a read "+strconv.FormatInt(pos, 10)))
	}
	e.EphemeralToConversation("x", "a", "receipt:x:c", 2, []byte("c read 2")) // another key has its own position
	for range 2 {
		e.EphemeralToConversation("x", "b", "typing:x:b", 0, []byte("b typing"))
	}
	e.EphemeralToConversation("nobody", "", "k", 1, []byte("lost"))

	want := []got{{viaEphemeral, "receipt:x:a", "a read 5"}, {viaEphemeral, "receipt:x:a", "a read 7"},
		{viaEphemeral, "receipt:x:c", "c read 2"}}
	for _, c := range []*conn{b1, b2} {
		if g := c.all(); !slices.Equal(g, want) {
			t.Errorf("%s got %v, want %v", c.user, g, want)
		}
	}
	if g := a.all(); !slices.Equal(g, []got{{viaEphemeral, "typing:x:b", "b typing"}, {viaEphemeral, "typing:x:b", "b typing"}}) {
		t.Errorf("a got %v, want b's two typing frames and none of its own receipts", g)
	}

	// PushToConversation reaches everyone but skipUser; the user pushes reach only that user.
	e.PushToConversation("x", "", []byte("deleted"))
	e.PushToConversation("x", "b", []byte("not for b"))
	e.PushToUser("b", []byte("for b"))
	e.EphemeralToUser("a", "badge:", []byte("badge of a"))
	for _, c := range []*conn{b1, b2} {
		if g := c.all()[len(want):]; !slices.Equal(g, []got{{viaPush, "", "deleted"}, {viaPush, "", "for b"}}) {
			t.Errorf("%s got %v", c.user, g)
		}
	}
	if g := a.all()[2:]; !slices.Equal(g, []got{{viaPush, "", "deleted"}, {viaPush, "", "not for b"}, {viaEphemeral, "badge:", "badge of a"}}) {
		t.Errorf("a got %v", g)
	}
	for _, c := range []*conn{a, b1, b2} {
		e.Remove(c)
	}
}

// TestGraceTimersDoNotLeak: connections that come and go, synced or not, leave no goroutine; a
// grace that fires for a connection that is gone pushes nothing.
func TestGraceTimersDoNotLeak(t *testing.T) {
	e := newHub(t, hub.Config{SyncGrace: time.Millisecond})
	var conns []*conn
	for i := range 1000 {
		c := newConn("u" + strconv.Itoa(i%10))
		add(e, c, map[string]int64{"x": 0})
		if i%2 == 0 {
			e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil })
		}
		if i%3 != 0 {
			e.Remove(c)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		e.Remove(c)
	}
	time.Sleep(20 * time.Millisecond) // any timer still set fires now
	goleak.VerifyNone(t)
	if n := e.Connections(); n != 0 {
		t.Errorf("%d connections left", n)
	}
}

// TestConcurrentChurn: goroutines add, remove, join and leave while others deliver to many
// conversations. There is no race (run with -race) and no deadlock, and connections that stayed
// throughout saw every seq of their conversations once, in order; the others saw increasing seqs.
func TestConcurrentChurn(t *testing.T) {
	const (
		convs     = 16
		seqs      = 300
		stayers   = 8
		churners  = 8
		churnOps  = 400
		perStayer = 4 // conversations each stayer is in
	)
	e := newHub(t, hub.Config{SyncGrace: time.Millisecond, MaxHeld: 1 << 20})
	conv := func(i int) string { return "c" + strconv.Itoa(i) }

	type stayer struct {
		c     *conn
		convs []string
	}
	var stay []stayer
	for i := range stayers {
		s := stayer{c: newConn("stayer" + strconv.Itoa(i))}
		m := make(map[string]int64)
		for j := range perStayer {
			id := conv((i + j) % convs)
			s.convs = append(s.convs, id)
			m[id] = 0
		}
		live(t, e, s.c, m)
		stay = append(stay, s)
	}

	done := make(chan struct{})
	var wg sync.WaitGroup
	var churned []*conn
	var churnedMu sync.Mutex
	for w := range churners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			user := "churner" + strconv.Itoa(w%4) // two goroutines share each user
			var mine []*conn
			for range churnOps {
				switch op := rng.IntN(6); {
				case op == 0 || len(mine) == 0:
					c := newConn(user)
					add(e, c, map[string]int64{conv(rng.IntN(convs)): 0})
					mine = append(mine, c)
					churnedMu.Lock()
					churned = append(churned, c)
					churnedMu.Unlock()
				case op == 1:
					i := rng.IntN(len(mine))
					e.Remove(mine[i])
					mine = slices.Delete(mine, i, i+1)
				case op == 2:
					e.Join(user, conv(rng.IntN(convs)), 0)
				case op == 3:
					e.Leave(user, conv(rng.IntN(convs)))
				case op == 4:
					e.Sync(context.Background(), mine[rng.IntN(len(mine))], func(hub.ReplayFunc) error { return nil })
				default:
					e.PushToUser(user, []byte("hello"))
					e.Conversations()
					e.Users()
				}
			}
			for _, c := range mine {
				e.Remove(c)
			}
		}()
	}
	for i := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= seqs; seq++ {
				e.DeliverMessage(conv(i), seq, msg(conv(i), seq), time.Time{})
				if seq%50 == 0 {
					e.EphemeralToConversation(conv(i), "", "receipt", seq, []byte("receipt"))
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: churn and delivery did not finish in 60s")
	}

	want := make([]int64, seqs)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for _, s := range stay {
		for _, id := range s.convs {
			if got := s.c.seqs(id); !slices.Equal(got, want) {
				t.Errorf("%s, there throughout, got %d seqs of %s (first %v), want 1..%d once each in order",
					s.c.user, len(got), id, got[:min(len(got), 10)], seqs)
			}
		}
	}
	for _, c := range churned {
		for i := range convs {
			got := c.seqs(conv(i))
			for j := 1; j < len(got); j++ {
				if got[j] <= got[j-1] {
					t.Fatalf("%s's connection got %s seqs out of order or twice: ... %d, %d ...", c.user, conv(i), got[j-1], got[j])
				}
			}
		}
	}
	for _, s := range stay {
		e.Remove(s.c)
	}
	if n := e.Connections(); n != 0 {
		t.Errorf("%d connections left after everyone left", n)
	}
	if left := e.Conversations(); len(left) != 0 {
		t.Errorf("conversations left after everyone left: %v", left)
	}
}

// TestLeaveWhileHeld: pushes held for a connection of a conversation its user then leaves are
// not given to it when the hold ends, since the user no longer gets that conversation's messages.
func TestLeaveWhileHeld(t *testing.T) {
	e := newHub(t, hub.Config{})
	c := newConn("a")
	add(e, c, map[string]int64{"x": 0, "y": 0})
	e.DeliverMessage("x", 1, msg("x", 1), time.Time{})
	e.DeliverMessage("y", 1, msg("y", 1), time.Time{})
	e.Leave("a", "x")
	if err := e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := c.seqs("x"); len(got) > 0 {
		t.Errorf("after leaving x, the release gave x seqs %v", got)
	}
	if got := c.seqs("y"); !slices.Equal(got, []int64{1}) {
		t.Errorf("got y seqs %v, want [1]", got)
	}
	e.Remove(c)
}

// orderConn records, in a log shared by all of them, that it was pushed to.
type orderConn struct {
	user string
	log  *[]string // appended to under the conversation's lock, so one delivery at a time
}

func (c *orderConn) UserID() string                         { return c.user }
func (c *orderConn) Push([]byte) bool                       { *c.log = append(*c.log, c.user); return true }
func (c *orderConn) PushWait(context.Context, []byte) error { return nil }
func (c *orderConn) PushEphemeral(string, []byte)           {}

// TestDeliveryWalksConnectionsInJoinOrder: a message reaches a conversation's connections in the
// order they joined it, also after others left in between and more joined, because that walk is
// cheaper for the CPU than a random one (see connSet).
func TestDeliveryWalksConnectionsInJoinOrder(t *testing.T) {
	e := hub.New[*orderConn, struct{}](hub.Config{SyncGrace: time.Minute})
	var log []string
	conns := map[string]*orderConn{}
	var joined []string // the users in the conversation, in join order
	join := func(user string) {
		c := &orderConn{user: user, log: &log}
		conns[user] = c
		e.Add(c, 0, struct{}{})
		e.Join(user, "g", 0)
		if err := e.Sync(context.Background(), c, func(hub.ReplayFunc) error { return nil }); err != nil {
			t.Fatal(err)
		}
		joined = append(joined, user)
	}
	for i := range 200 {
		join("u" + strconv.Itoa(i))
	}
	var seq int64
	check := func(when string) {
		t.Helper()
		log = nil
		seq++
		e.DeliverMessage("g", seq, msg("g", seq), time.Time{})
		if !slices.Equal(log, joined) {
			t.Fatalf("%s: delivered in the order\n%v\nwant the join order\n%v", when, log, joined)
		}
	}
	check("after 200 joined")

	// Leaving by disconnecting and by leaving the conversation, past half of the set, so the
	// holes are squeezed out on the way.
	for i, user := range slices.Clone(joined) {
		switch i % 4 {
		case 0, 1:
			e.Remove(conns[user])
		case 2:
			e.Leave(user, "g")
		default:
			continue
		}
		joined = slices.DeleteFunc(joined, func(u string) bool { return u == user })
	}
	check("after three in four left")
	for i := range 30 {
		join("v" + strconv.Itoa(i))
	}
	check("after 30 more joined")
	for _, user := range joined[:10] {
		e.Remove(conns[user])
	}
	joined = joined[10:]
	check("after the first 10 left")
}
