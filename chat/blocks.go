package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Blocking. A block of b by a stands between the two in either direction: neither may open their
// DM, send in it, or add the other to a group (create_group, add_members). Groups both are in
// already are not affected, and a third member may still put them in one group. Unblocking
// restores all of it, unless the other side blocks too. The blocked user is not told: a refused
// open or add answers them exactly as for an account that is gone.
//
// The DM send check costs no store round trip per message: the node holding the sender's sockets
// caches, per DM position, whether a block stands between its members, read from the store on the
// first send (and once more after a change). A block or unblock forgets that state on the node
// where it was made at once, and on every other node through a blocks event on both users'
// subjects; a NATS reconnect forgets all of it, since events may have been missed. So a send on
// another node can pass for as long as the event takes to arrive (bus latency), never longer.

// blockStore is what blocking reads and writes.
type blockStore interface {
	User(ctx context.Context, id string) (storage.User, error)
	Block(ctx context.Context, blocker, blocked string, at time.Time) error
	Unblock(ctx context.Context, blocker, blocked string) error
	BlocksOf(ctx context.Context, blocker string) ([]string, error)
	Blocked(ctx context.Context, a, b string) (bool, error)
	BlockedWith(ctx context.Context, userID string, others []string) ([]string, error)
}

// blocking is the part of the service that keeps blocks and checks them: on a DM's sends, on
// opening a DM, and on putting users in a group. It shares the hub (where the DM positions cache
// a block's state) and the bus with the other parts (live) and has a store of its own.
type blocking struct {
	*live
	store blockStore
}

// blockState is what this node knows of the block between a DM's two members.
type blockState uint8

const (
	blockUnknown blockState = iota // not read yet, or forgotten: the next send reads the store
	blockClear
	blockBlocked
)

// dmPeer returns the other member of a DM, or "" for a group.
func dmPeer(kind string, members []string, self string) string {
	if kind != storage.KindDM {
		return ""
	}
	for _, m := range members {
		if m != self {
			return m
		}
	}
	return ""
}

// Block makes userID block target. Blocking twice is no error; blocking yourself is invalid, and
// an unknown target is not found.
func (s *blocking) Block(ctx context.Context, userID, target string) error {
	if target == userID {
		return protocol.Refuse(protocol.ErrInvalid, "you cannot block yourself")
	}
	_, err := s.store.User(ctx, target)
	if errors.Is(err, storage.ErrNotFound) {
		return protocol.Refuse(protocol.ErrNotFound, noSuchUser, target)
	}
	if err != nil {
		return fmt.Errorf("look up user %s: %w", target, err)
	}
	if err := s.store.Block(ctx, userID, target, now()); err != nil {
		return fmt.Errorf("block %s for %s: %w", target, userID, err)
	}
	s.blocksChanged(userID, target)
	return nil
}

// Unblock undoes userID's block of target; undoing a block that does not exist (or of a user who
// is gone) is no error.
func (s *blocking) Unblock(ctx context.Context, userID, target string) error {
	if target == userID {
		return protocol.Refuse(protocol.ErrInvalid, "you cannot unblock yourself")
	}
	if err := s.store.Unblock(ctx, userID, target); err != nil {
		return fmt.Errorf("unblock %s for %s: %w", target, userID, err)
	}
	s.blocksChanged(userID, target)
	return nil
}

// Blocks lists the users userID blocks, sorted (not those who block userID).
func (s *blocking) Blocks(ctx context.Context, userID string) ([]string, error) {
	ids, err := s.store.BlocksOf(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("list blocks of %s: %w", userID, err)
	}
	return ids, nil
}

// blocksChanged makes every node forget what it cached of the block between a and b: here at once,
// so the next send on this node sees the change, and elsewhere through both users' subjects.
func (s *blocking) blocksChanged(a, b string) {
	s.forgetBlock(a, b)
	s.forgetBlock(b, a)
	s.publishUser(a, userEvent{Type: userBlocks, Peer: b})
	s.publishUser(b, userEvent{Type: userBlocks, Peer: a})
}

// forgetBlock drops the block state cached for the DM of an online user with peer.
func (s *blocking) forgetBlock(userID, peer string) {
	u := s.online(userID)
	if u == nil || peer == "" {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.blockGen++
	if p, ok := u.positions[DMID(userID, peer)]; ok {
		p.block = blockUnknown
	}
}

// forgetAllBlocks drops every block state cached here.
func (s *blocking) forgetAllBlocks() {
	for _, u := range s.hub.States() {
		u.mu.Lock()
		u.blockGen++
		for _, p := range u.positions {
			p.block = blockUnknown
		}
		u.mu.Unlock()
	}
}

// checkDMSend refuses a send of userID in a DM with a block between its members.
func (s *blocking) checkDMSend(ctx context.Context, userID, convID string) error {
	blocked, err := s.dmBlocked(ctx, userID, convID)
	if errors.Is(err, protocol.ErrNotMember) {
		return err
	}
	if err != nil {
		s.log.Warn().Err(err).Str("conversation", convID).Msg("check blocks before a send")
		return protocol.Refuse(protocol.ErrUnavailable, "message not stored; retry with the same clientMsgId")
	}
	if blocked {
		return protocol.Refuse(protocol.ErrForbidden, "you cannot send to this user: a block stands between you")
	}
	return nil
}

// dmBlocked reports whether a block stands between the members of a DM of online user userID:
// what this node cached, or the store's answer, cached unless a block or unblock came meanwhile.
func (s *blocking) dmBlocked(ctx context.Context, userID, convID string) (bool, error) {
	u := s.online(userID)
	if u == nil {
		return false, protocol.ErrNotMember
	}
	u.mu.Lock()
	p, ok := u.positions[convID]
	if !ok {
		u.mu.Unlock()
		return false, protocol.ErrNotMember
	}
	state, peer, gen := p.block, p.peer, u.blockGen
	u.mu.Unlock()
	if state != blockUnknown {
		return state == blockBlocked, nil
	}
	blocked, err := s.store.Blocked(ctx, userID, peer)
	if err != nil {
		return false, fmt.Errorf("look up blocks between %s and %s: %w", userID, peer, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	// A change forgotten while the store answered may not be in the answer: leave it unknown.
	if p, ok := u.positions[convID]; ok && u.blockGen == gen {
		p.block = blockClear
		if blocked {
			p.block = blockBlocked
		}
	}
	return blocked, nil
}

// checkDMOpen refuses opening the DM of userID and peer with a block between them.
func (s *blocking) checkDMOpen(ctx context.Context, userID, peer string) error {
	blocked, err := s.store.Blocked(ctx, userID, peer)
	if err != nil {
		return fmt.Errorf("look up blocks between %s and %s: %w", userID, peer, err)
	}
	if blocked {
		return s.refuseBlocked(ctx, userID, []string{peer}, "message them")
	}
	return nil
}

// checkAdd refuses userID putting any of others in a group when a block stands between them.
func (s *blocking) checkAdd(ctx context.Context, userID string, others []string) error {
	with, err := s.store.BlockedWith(ctx, userID, others)
	if err != nil {
		return fmt.Errorf("look up blocks of %s: %w", userID, err)
	}
	if len(with) > 0 {
		return s.refuseBlocked(ctx, userID, with, "add them to a group")
	}
	return nil
}

// refuseBlocked answers an open or an add that a block between userID and each of with refuses,
// so that the user who is blocked learns nothing: when userID blocks one of them, they hear why
// (they know); otherwise the answer is the very one an account that is gone gets.
func (s *blocking) refuseBlocked(ctx context.Context, userID string, with []string, what string) error {
	mine, err := s.store.BlocksOf(ctx, userID)
	if err != nil {
		return fmt.Errorf("list blocks of %s: %w", userID, err)
	}
	for _, w := range with {
		if slices.Contains(mine, w) {
			return protocol.Refuse(protocol.ErrForbidden, "you blocked %s: unblock them to %s", w, what)
		}
	}
	return protocol.Refuse(protocol.ErrNotFound, noSuchUser, with[0])
}
