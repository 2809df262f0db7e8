package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Profiles: how users show to each other. A user id is the identity; the display name is what
// people read, and a user may change it. A change reaches the user's own devices and their peers
// (the members of their DMs and small groups, as presence does) as one profile event each; the
// members of large groups, and clients that were away, ask with Profiles.

// SetName changes userID's display name (checked by protocol.DisplayName) and tells their devices
// and peers.
func (s *presence) SetName(ctx context.Context, userID, name string) error {
	clean, err := protocol.DisplayName(name)
	if err != nil {
		return protocol.Refuse(protocol.ErrInvalid, "%s", err.Error())
	}
	if err := s.store.SetName(ctx, userID, clean); err != nil {
		if errors.Is(err, storage.ErrNotFound) { // deleted meanwhile: its sockets are closing
			return protocol.Refuse(protocol.ErrNotFound, "no such account")
		}
		return fmt.Errorf("store name of %s: %w", userID, err)
	}
	ev := userEvent{Type: userProfile, Peer: userID, Name: clean}
	s.publishUser(userID, ev)
	if u := s.online(userID); u != nil {
		s.publishToPeers(u, ev)
	}
	return nil
}

// applyProfile gives a user's devices a changed display name (theirs or a peer's). Coalesced per
// user named: only the newest name matters.
func (s *presence) applyProfile(userID string, ev userEvent) {
	s.ephemeralToUser(userID, "profile:"+ev.Peer, protocol.ServerFrame{Type: protocol.TypeProfile, UserID: ev.Peer, Name: ev.Name})
}

// Profiles returns the display names of userIDs, in the order asked; a deleted account shows as
// deleted, an unknown id is left out. Names are public to every signed-in user, as in a company
// directory: that is what finding a person by name needs.
func (s *presence) Profiles(ctx context.Context, userIDs []string) ([]protocol.Profile, error) {
	users, err := s.store.Profiles(ctx, userIDs)
	if err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	byID := make(map[string]storage.User, len(users))
	for _, u := range users {
		byID[u.ID] = u
	}
	out := []protocol.Profile{}
	for _, id := range userIDs {
		if u, ok := byID[id]; ok {
			out = append(out, profileOf(u))
			delete(byID, id) // an id asked twice is answered once
		}
	}
	return out, nil
}

// FindUsers returns up to protocol.MaxFoundUsers users other than userID whose display name, or a
// word of it, starts with query (any case), sorted by name.
func (s *presence) FindUsers(ctx context.Context, userID, query string) ([]protocol.Profile, error) {
	users, err := s.store.FindUsers(ctx, query, userID, protocol.MaxFoundUsers)
	if err != nil {
		return nil, fmt.Errorf("find users: %w", err)
	}
	out := make([]protocol.Profile, 0, len(users))
	for _, u := range users {
		out = append(out, profileOf(u))
	}
	return out, nil
}

func profileOf(u storage.User) protocol.Profile {
	if u.DeletedAt != nil {
		return protocol.Profile{UserID: u.ID, Deleted: true}
	}
	return protocol.Profile{UserID: u.ID, Name: u.Name}
}
