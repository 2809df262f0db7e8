package storage

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// GroupAdmin is how a group is run: its roles, and the settings and moderation its admins keep
// (the rules are the group package's). It lives in the group's conversation document, read with
// it by _id, and only the conversation's owner in the sequencer writes it (UpdateGroup), so two
// admins on two nodes never write it at once. Nil on a DM, and on a group nobody has run yet:
// then its creator is its owner and nothing else is set.
type GroupAdmin struct {
	// Owner is the one member who appoints admins and hands the group over.
	Owner  string   `bson:"owner"`
	Admins []string `bson:"admins,omitempty"`
	Topic  string   `bson:"topic,omitempty"`
	// Announcement lets only admins post; members read and react.
	Announcement bool `bson:"announcement,omitempty"`
	// SlowModeSeconds is how long a member waits between two messages; 0 is off.
	SlowModeSeconds int64 `bson:"slowModeSeconds,omitempty"`
	// Muted maps a member to the time until which they cannot send.
	Muted map[string]time.Time `bson:"muted,omitempty"`
	// Banned users are not members and cannot be added back or join by link until unbanned.
	Banned []string `bson:"banned,omitempty"`
	// Pins are the pinned messages' seqs, newest last.
	Pins []int64 `bson:"pins,omitempty"`
	// Invites are the group's invite links and Reports its members' reports of messages, for
	// its admins: neither is in the members' view.
	Invites []Invite `bson:"invites,omitempty"`
	Reports []Report `bson:"reports,omitempty"`
}

// Invite is an invite link of a group: whoever has its token may join, until it expires (a nil
// ExpiresAt never does) or has been used MaxUses times (0: no limit).
type Invite struct {
	Token     string     `bson:"token"`
	CreatedBy string     `bson:"createdBy"`
	CreatedAt time.Time  `bson:"createdAt"`
	ExpiresAt *time.Time `bson:"expiresAt,omitempty"`
	MaxUses   int64      `bson:"maxUses,omitempty"`
	Uses      int64      `bson:"uses,omitempty"`
}

// Report is a member's report of a message to the group's admins, open until one dismisses it.
type Report struct {
	ID        string    `bson:"id"`
	Seq       int64     `bson:"seq"`
	Reporter  string    `bson:"reporter"`
	Reason    string    `bson:"reason"`
	CreatedAt time.Time `bson:"createdAt"`
}

// GroupUpdate is one administrative change of a group as the owner writes it: the group's whole
// new GroupAdmin and name, and at most one member added or removed by it.
type GroupUpdate struct {
	Name  string
	Admin GroupAdmin
	// Add are users who become members; Remove one who stops being one.
	Add    []string
	Remove string
}

// UpdateGroup writes an administrative change of group id: its name and GroupAdmin set by _id,
// then the member added or removed with their memberships and read cursors (AddMembers,
// RemoveMember). Only the conversation's owner writes it, one change after another; a failure
// between the two writes leaves roles that name a member no longer there, which the rules ignore
// (a role is a member's), and the owner's retry finishes the change.
func (s *Store) UpdateGroup(ctx context.Context, id string, u GroupUpdate) (err error) {
	defer s.metrics.observe(opUpdateGroup, time.Now(), &err)
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: u.Name}, {Key: "admin", Value: u.Admin}}}}
	if _, err := s.conversations.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, set); err != nil {
		return fmt.Errorf("update group %s: %w", id, err)
	}
	switch {
	case len(u.Add) > 0:
		return s.AddMembers(ctx, id, u.Add)
	case u.Remove != "":
		return s.RemoveMember(ctx, id, u.Remove)
	}
	return nil
}
