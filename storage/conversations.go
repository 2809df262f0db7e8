package storage

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Conversation kinds as stored.
const (
	KindDM    = "dm"
	KindGroup = "group"
)

// Conversation is a DM or a group: its own document, which says who is in it, with the counters
// its owner advances (counterDoc) merged in. LastSeq trails the messages collection, which is the
// truth: a new owner recovers max(LastSeq, highest stored seq).
type Conversation struct {
	ID      string   `bson:"_id"`
	Kind    string   `bson:"kind"`
	Name    string   `bson:"name,omitempty"`
	Members []string `bson:"members"`
	LastSeq int64    `bson:"lastSeq"`
	// LastVersion is the highest change number (edits, reactions, deletions) the owner has
	// handed out. The owner raises it before it writes the changed messages, so it is never
	// below a stored message's version and a new owner continues after it.
	LastVersion int64 `bson:"lastVersion,omitempty"`
	// LastMessage is the start of the newest message, as its owner last wrote it, so a list of
	// conversations shows it without a query per conversation.
	LastMessage *MessagePreview `bson:"lastMessage,omitempty"`
	// DeletedCount counts the tombstones in the conversation.
	DeletedCount int64 `bson:"deletedCount"`
	// DeletedSeqs are the seqs of those tombstones, each once, in the order they were made, so
	// unread counts leave them out without a query over messages. A conversation stored before
	// the field existed has none: its older tombstones (DeletedCount minus len(DeletedSeqs)) are
	// not known by seq and count as unread.
	DeletedSeqs []int64 `bson:"deletedSeqs,omitempty"`
	// Senders maps each member who has sent a message to the seq of their newest one: a member
	// has read everything up to it. The owner raises it in the same statement as lastSeq, so a
	// send costs no read-cursor write (see ReadSeq).
	Senders   map[string]int64 `bson:"senders,omitempty"`
	CreatedBy string           `bson:"createdBy"`
	CreatedAt time.Time        `bson:"createdAt"`
	// Admin is how a group is run (roles, settings, moderation; see groups.go); nil on a DM.
	Admin *GroupAdmin `bson:"admin,omitempty"`

	// Mentioned maps a member to the seqs of the newest messages that mention them (at most
	// MaxMentionSeqs, oldest first), as the owner keeps them in the counter document.
	Mentioned map[string][]int64 `bson:"-"`
	// CountersOpen says the counters were open when read: their owner may have stored messages
	// after the lastSeq it last raised them to, and the read folded those in (ahead.go).
	CountersOpen bool `bson:"-"`
	// RaisedSeq is the lastSeq the counters were raised to: LastSeq less what the read folded in.
	RaisedSeq int64 `bson:"-"`
}

// counterDoc holds what a conversation's owner advances with every batch, in a document of its
// own with the conversation's _id, so that a batch rewrites a few hundred bytes instead of the
// member list: a 5,001-member group's own document is about 200 KB. Conversations stored
// before it existed keep these fields in their own document, where the last values written stay;
// reads take the newer of the two (merge), so nothing needs migrating.
type counterDoc struct {
	ID          string           `bson:"_id"`
	LastSeq     int64            `bson:"lastSeq"`
	LastVersion int64            `bson:"lastVersion,omitempty"`
	LastMessage *MessagePreview  `bson:"lastMessage,omitempty"`
	Senders     map[string]int64 `bson:"senders,omitempty"`

	Mentioned map[string][]int64 `bson:"mentioned,omitempty"` // see Conversation.Mentioned

	// OpenedAt and ClosedAt say whether the owner may have stored messages after LastSeq
	// (ahead.go).
	OpenedAt int64 `bson:"openedAt,omitempty"`
	ClosedAt int64 `bson:"closedAt,omitempty"`
}

// merge raises c's counters to k's, and takes k's preview unless c's is of a newer message.
func (c *Conversation) merge(k counterDoc) {
	c.LastSeq = max(c.LastSeq, k.LastSeq)
	c.LastVersion = max(c.LastVersion, k.LastVersion)
	if p := k.LastMessage; p != nil && (c.LastMessage == nil || p.Seq >= c.LastMessage.Seq) {
		c.LastMessage = p
	}
	for u, seq := range k.Senders {
		if c.Senders == nil {
			c.Senders = make(map[string]int64, len(k.Senders))
		}
		c.Senders[u] = max(c.Senders[u], seq)
	}
	if k.Mentioned != nil {
		c.Mentioned = k.Mentioned
	}
}

// withCounters merges each conversation's counter document into it, each read by _id, and
// folds in the messages its owner stored ahead of them (ahead.go).
func (s *Store) withCounters(ctx context.Context, convs []Conversation) error {
	ids := make([]string, len(convs))
	for i, c := range convs {
		ids[i] = c.ID
	}
	byID, err := findByIDs[counterDoc](ctx, s.counters, ids)
	if err != nil {
		return fmt.Errorf("read counters of %d conversations: %w", len(convs), err)
	}
	var ahead []*Conversation
	for i := range convs {
		k, ok := byID[convs[i].ID]
		if ok {
			convs[i].merge(k)
		}
		convs[i].RaisedSeq = convs[i].LastSeq
		if ok && k.ahead() {
			convs[i].CountersOpen = true
			ahead = append(ahead, &convs[i])
		}
	}
	return s.foldAhead(ctx, ahead)
}

// ReadSeq is userID's read position in c, given their read cursor (the zero Cursor for none): the
// cursor's, or their own newest message if that is further.
func (c Conversation) ReadSeq(userID string, cur Cursor) int64 {
	return max(cur.ReadSeq, c.Senders[userID])
}

// Unread is how many messages of a conversation a member has not read: the seqs after readSeq
// up to lastSeq, less those among them deleted for everyone. deleted lists seqs deleted for
// everyone, in any order and without repeats (the store's set, or a sorted copy);
// seqs outside (readSeq, lastSeq] do not count, so a deletion of a message already read, or of one
// not delivered here yet, changes nothing. A member's own messages are never unread because
// sending one moves the sender's readSeq past it, not because of anything here.
func Unread(lastSeq, readSeq int64, deleted []int64) int64 {
	n := lastSeq - readSeq
	if n <= 0 {
		return 0
	}
	for _, d := range deleted {
		if d > readSeq && d <= lastSeq {
			n--
		}
	}
	return max(n, 0)
}

// IsMember reports whether userID is in the conversation.
func (c Conversation) IsMember(userID string) bool {
	for _, m := range c.Members {
		if m == userID {
			return true
		}
	}
	return false
}

// EnsureConversation stores c unless a conversation with its id exists, and returns the stored
// one. Opening the same DM twice therefore yields the one conversation of that pair. Every member
// gets a read cursor, and the conversation in their memberships.
func (s *Store) EnsureConversation(ctx context.Context, c Conversation) (_ Conversation, err error) {
	defer s.metrics.observe(opEnsureConversation, time.Now(), &err)
	if err := s.addMemberships(ctx, c.ID, c.Members); err != nil {
		return Conversation{}, err
	}
	var stored Conversation
	err = decode(s.conversations.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: c.ID}},
		bson.D{{Key: "$setOnInsert", Value: c}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
	), &stored)
	if err != nil {
		return Conversation{}, fmt.Errorf("ensure conversation %s: %w", c.ID, err)
	}
	if err := s.createCursors(ctx, stored.ID, stored.Members); err != nil {
		return Conversation{}, err
	}
	return s.conversationWithCounters(ctx, stored)
}

// Conversation returns one conversation, or ErrNotFound.
func (s *Store) Conversation(ctx context.Context, id string) (_ Conversation, err error) {
	defer s.metrics.observe(opConversation, time.Now(), &err)
	c, err := findByID[Conversation](ctx, s.conversations, id)
	if err != nil {
		return Conversation{}, err
	}
	return s.conversationWithCounters(ctx, c)
}

// conversationWithCounters returns c with its counter document merged in.
func (s *Store) conversationWithCounters(ctx context.Context, c Conversation) (Conversation, error) {
	one := []Conversation{c}
	if err := s.withCounters(ctx, one); err != nil {
		return Conversation{}, err
	}
	return one[0], nil
}

// ConversationsOf returns every conversation userID is a member of: the user's memberships
// document, then each conversation it names and its counters, all read by _id (on the embedded
// store a filter on members read every conversation). A conversation is the truth of who is in
// it: one the memberships name but whose members leave the user out (a removal whose memberships
// write failed, or lost to a race) is not returned. A user with no memberships document is in
// no conversation.
func (s *Store) ConversationsOf(ctx context.Context, userID string) (_ []Conversation, err error) {
	defer s.metrics.observe(opConversationsOf, time.Now(), &err)
	ids, err := s.memberships.of(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("read memberships of %s: %w", userID, err)
	}
	byID, err := findByIDs[Conversation](ctx, s.conversations, ids)
	if err != nil {
		return nil, fmt.Errorf("read conversations of %s: %w", userID, err)
	}
	out := make([]Conversation, 0, len(byID))
	for _, id := range ids {
		if c, ok := byID[id]; ok && c.IsMember(userID) {
			out = append(out, c)
		}
	}
	if err := s.withCounters(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// conversationsWithMember returns every conversation whose members include userID, found by the
// members themselves: one filter over all conversations, a scan on the embedded store, for an
// account deletion, which must find them all even where a memberships document fell short.
func (s *Store) conversationsWithMember(ctx context.Context, userID string) ([]Conversation, error) {
	cur, err := s.conversations.Find(ctx, bson.D{{Key: "members", Value: userID}})
	if err != nil {
		return nil, fmt.Errorf("find conversations of %s: %w", userID, err)
	}
	var out []Conversation
	if err := readAll(ctx, cur, &out); err != nil {
		return nil, fmt.Errorf("read conversations of %s: %w", userID, err)
	}
	if err := s.withCounters(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// MessagePreview is the start of a message as a conversation list shows it.
type MessagePreview struct {
	Seq       int64     `bson:"seq"`
	SenderID  string    `bson:"senderId"`
	Kind      string    `bson:"kind"`
	Body      string    `bson:"body,omitempty"`
	CreatedAt time.Time `bson:"createdAt"`
	// Attachment names the message's first file.
	Attachment *AttachmentRef `bson:"attachment,omitempty"`
}

// Counters are what a conversation's owner advances on it with each batch: lastSeq and
// lastVersion; Newest, the preview of the batch's newest message; Changed, the new previews of
// messages the batch edited or deleted (each replaces the conversation's preview only if it is
// of that message).
type Counters struct {
	LastSeq, LastVersion int64
	Newest               *MessagePreview
	Changed              []MessagePreview
	// Senders are the members who sent in the batch, each with the seq of their newest message.
	Senders map[string]int64
	// Mentioned are the members whose mention seqs the batch changed, each with all of them now.
	Mentioned map[string][]int64
	// Ahead says the batch stores new messages, and its writer may store more before it raises
	// the counters again (ahead.go): the raise opens the counters instead of closing them.
	Ahead bool
}

// AdvanceCounters raises each conversation's lastSeq and lastVersion, and each sender's newest
// seq (Conversation.Senders), to at least the given values and moves its preview forward, in one
// bulk write to the counter documents. A zero counter is left as it is, and a preview never
// replaces that of a newer message. A change replaces the preview of its message wherever that
// preview is, so a batch with changes writes to the conversations too, for the previews that
// predate the counter documents. Each raise opens the counters or closes them (Counters.Ahead).
func (s *Store) AdvanceCounters(ctx context.Context, counters map[string]Counters) (err error) {
	defer s.metrics.observe(opAdvanceCounters, time.Now(), &err)
	if len(counters) == 0 {
		return nil
	}
	raises := make([]mongo.WriteModel, 0, len(counters))
	var changes []mongo.WriteModel
	for id, c := range counters {
		raise := bson.D{{Key: "lastSeq", Value: c.LastSeq}, {Key: aheadField(c.Ahead), Value: c.LastSeq}}
		if c.LastVersion > 0 {
			raise = append(raise, bson.E{Key: "lastVersion", Value: c.LastVersion})
		}
		if p := c.Newest; p != nil {
			// Documents compare field by field in order, seq first: $max keeps the newer message's
			// preview, in the same statement (a filter beyond _id would cost FerretDB a scan).
			raise = append(raise, bson.E{Key: "lastMessage", Value: *p})
		}
		for sender, seq := range c.Senders { // user ids have no '.' or '$': safe as field names
			raise = append(raise, bson.E{Key: "senders." + sender, Value: seq})
		}
		update := bson.D{{Key: "$max", Value: raise}}
		if len(c.Mentioned) > 0 {
			update = append(update, bson.E{Key: "$set", Value: mentionedFields(c.Mentioned)})
		}
		raises = append(raises, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: id}}).
			SetUpdate(update).
			SetUpsert(true))
		for _, p := range c.Changed {
			changes = append(changes, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: id}, {Key: "lastMessage.seq", Value: p.Seq}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "lastMessage", Value: p}}}}))
		}
	}
	// The raises first: a change's preview must find the newest one in place.
	if err := bulkWrite(ctx, s.counters, append(raises, changes...), true); err != nil {
		return fmt.Errorf("advance counters of %d conversations: %w", len(counters), err)
	}
	if len(changes) == 0 {
		return nil
	}
	if err := bulkWrite(ctx, s.conversations, changes, false); err != nil {
		return fmt.Errorf("change previews of %d conversations: %w", len(counters), err)
	}
	return nil
}

// aheadField is the seq a raise moves to its lastSeq: openedAt when it lets its writer run ahead,
// else closedAt (ahead.go).
func aheadField(ahead bool) string {
	if ahead {
		return "openedAt"
	}
	return "closedAt"
}

// AddMembers adds users to a group, each with a read cursor and the group in their memberships.
func (s *Store) AddMembers(ctx context.Context, id string, userIDs []string) (err error) {
	defer s.metrics.observe(opAddMembers, time.Now(), &err)
	if err := s.addMemberships(ctx, id, userIDs); err != nil {
		return err
	}
	_, err = s.conversations.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$addToSet", Value: bson.D{{Key: "members", Value: bson.D{{Key: "$each", Value: userIDs}}}}}})
	if err != nil {
		return fmt.Errorf("add %d members to %s: %w", len(userIDs), id, err)
	}
	return s.createCursors(ctx, id, userIDs)
}

// RemoveMember removes a user from a group, with their read cursor, and the group from their
// memberships.
func (s *Store) RemoveMember(ctx context.Context, id, userID string) (err error) {
	defer s.metrics.observe(opRemoveMember, time.Now(), &err)
	_, err = s.conversations.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "members", Value: userID}}}})
	if err != nil {
		return fmt.Errorf("remove %s from %s: %w", userID, id, err)
	}
	if _, err := s.cursors.DeleteOne(ctx, bson.D{{Key: "_id", Value: cursorID(userID, id)}}); err != nil {
		return fmt.Errorf("delete cursor of %s in %s: %w", userID, id, err)
	}
	return s.removeMemberships(ctx, id, userID)
}

// addMemberships puts conversation id in the memberships of each of users. It runs before the
// users join the conversation itself (and removeMemberships after they leave it), so a failure
// in between leaves a membership the conversation does not back, which readers skip, never a
// member whose connect does not find the conversation.
func (s *Store) addMemberships(ctx context.Context, id string, users []string) error {
	each := make(map[string][]string, len(users))
	for _, u := range users {
		each[u] = []string{id}
	}
	if _, err := s.memberships.add(ctx, each); err != nil {
		return fmt.Errorf("add %s to the memberships of %d users: %w", id, len(users), err)
	}
	return nil
}

// removeMemberships takes conversation id out of the memberships of each of users.
func (s *Store) removeMemberships(ctx context.Context, id string, users ...string) error {
	each := make(map[string][]string, len(users))
	for _, u := range users {
		each[u] = []string{id}
	}
	if _, err := s.memberships.remove(ctx, each); err != nil {
		return fmt.Errorf("remove %s from the memberships of %d users: %w", id, len(users), err)
	}
	return nil
}

// RebuildMemberships adds every conversation to the memberships of each of its members, in one
// pass over the conversations: the migration of a store written before memberships existed, and
// the repair of one a rare lost update left short. It only adds, so it is safe to rerun and to
// run beside live traffic; a membership the conversations no longer back is skipped by readers.
func (s *Store) RebuildMemberships(ctx context.Context) (err error) {
	defer s.metrics.observe(opRebuildMemberships, time.Now(), &err)
	return rebuildIndex(ctx, s.memberships, s.conversations, bson.D{},
		bson.D{{Key: "_id", Value: 1}, {Key: "members", Value: 1}},
		func(c Conversation) ([]string, string) { return c.Members, c.ID })
}
