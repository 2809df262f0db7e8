package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

// nameCache keeps, for the life of the process, how the users a command prints show to people:
// ids are the identity and stay in JSON, but a person reads display names. Each id costs at most
// one profiles request, asked in a batch with the others a page or message brings.
type nameCache struct {
	byID map[string]protocol.Profile // every id asked for and answered, unknown ones included
}

// resolve asks the server for the ids not seen yet, at most protocol.MaxPresenceUsers per
// request. An id the server does not know is kept as itself, so it is not asked for again.
func (nc *nameCache) resolve(ctx context.Context, conn *client.Conn, ids []string) error {
	var unseen []string
	for _, id := range ids {
		if _, ok := nc.byID[id]; !ok && id != "" && !slices.Contains(unseen, id) {
			unseen = append(unseen, id)
		}
	}
	for len(unseen) > 0 {
		batch := unseen[:min(len(unseen), protocol.MaxPresenceUsers)]
		unseen = unseen[len(batch):]
		users, err := fetchProfiles(ctx, conn, batch)
		if err != nil {
			return err
		}
		for _, id := range batch {
			nc.remember(protocol.Profile{UserID: id, Name: id}) // left out of the answer: unknown
		}
		for _, p := range users {
			nc.remember(p)
		}
	}
	return nil
}

func (nc *nameCache) remember(p protocol.Profile) {
	if nc.byID == nil {
		nc.byID = make(map[string]protocol.Profile)
	}
	nc.byID[p.UserID] = p
}

// show is how id is printed for a person: the display name, followed by the id in parentheses
// when the two differ ("Mary Jane (mary-jane)", but "bob"), "(deleted account)" for an account
// that is gone, and the id itself while its name is not known. An empty id is a deleted account
// too: its messages lose their sender.
func (nc *nameCache) show(id string) string {
	p, ok := nc.byID[id]
	switch {
	case id == "" || p.Deleted:
		return "(deleted account)"
	case !ok || p.Name == id:
		return id
	}
	return p.Name + " (" + id + ")"
}

// fetchProfiles asks for the profiles of 1 to protocol.MaxPresenceUsers ids.
func fetchProfiles(ctx context.Context, conn *client.Conn, ids []string) ([]protocol.Profile, error) {
	r, err := conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeProfiles, UserIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("look up names: %w", err)
	}
	if r.Users == nil {
		return nil, nil
	}
	return *r.Users, nil
}

// learnNames resolves the names of ids for printing. Names are for people: with -json nothing is
// asked. A failure does not fail the command: it is reported, and those users print as ids.
func (c *cli) learnNames(ctx context.Context, conn *client.Conn, ids ...string) {
	if c.json {
		return
	}
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	if err := c.names.resolve(ctx, conn, ids); err != nil {
		fmt.Fprintf(c.stderr, "chatctl: %v; showing user ids\n", err)
	}
}

// people returns the users a person reads in msgs: the senders and the senders quoted.
func people(msgs ...protocol.Message) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.SenderID)
		if m.Quote != nil {
			ids = append(ids, m.Quote.SenderID)
		}
	}
	return ids
}
