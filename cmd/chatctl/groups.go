package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chatd/chatd/protocol"
)

// Running a group from the command line (issue 37): members, roles, settings, moderation, pins,
// invite links and reports, each one frame (docs/PROTOCOL.md "Running a group").

func runAdd(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("add"), args, 2, -1)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: pos[0], Members: pos[1:]})
}

func runRemove(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("remove"), args, 2, 2)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: pos[0], UserID: pos[1]})
}

func runLeave(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("leave"), args, 1, 1)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: pos[0]})
}

// moderateUsage lists the actions of the moderate command and the argument each takes.
const moderateUsage = "promote|demote|transfer|mute|unmute|ban|unban USER; mute USER SECONDS; rename NAME...; topic [TEXT...]; " +
	"announcement on|off; slowmode SECONDS; pin|unpin SEQ; revoke-invite TOKEN; dismiss-report ID"

// runModerate makes one moderate change: chatctl moderate <conversationId> <action> [args].
func runModerate(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("moderate"), args, 2, -1)
	if err != nil {
		return err
	}
	f, err := moderateFrame(pos[0], pos[1], pos[2:])
	if err != nil {
		return err
	}
	return c.change(ctx, f)
}

// moderateFrame is the moderate frame of one command line's action and its arguments.
func moderateFrame(conv, action string, rest []string) (protocol.ClientFrame, error) {
	f := protocol.ClientFrame{Type: protocol.TypeModerate, ConversationID: conv, Action: action}
	need := func(n int) error {
		if len(rest) != n {
			return usagef("%s takes %d argument(s): %s", action, n, moderateUsage)
		}
		return nil
	}
	var err error
	switch action {
	case protocol.ActionPromote, protocol.ActionDemote, protocol.ActionTransfer, protocol.ActionUnmute,
		protocol.ActionBan, protocol.ActionUnban:
		if err = need(1); err == nil {
			f.UserID = rest[0]
		}
	case protocol.ActionMute:
		if err = need(2); err == nil {
			f.UserID = rest[0]
			f.Seconds, err = parseSeconds(rest[1])
		}
	case protocol.ActionRename:
		if len(rest) == 0 {
			return f, usagef("rename takes the new name")
		}
		f.Name = strings.Join(rest, " ")
	case "topic":
		f.Action, f.Topic = protocol.ActionSetTopic, strings.Join(rest, " ")
	case protocol.ActionAnnouncement:
		if err = need(1); err == nil {
			on := rest[0] == "on"
			if !on && rest[0] != "off" {
				return f, usagef("announcement takes on or off")
			}
			f.Enabled = &on
		}
	case "slowmode":
		f.Action = protocol.ActionSlowMode
		if err = need(1); err == nil {
			f.Seconds, err = parseSeconds(rest[0])
		}
	case protocol.ActionPin, protocol.ActionUnpin:
		if err = need(1); err == nil {
			f.Seq, err = parseSeq(rest[0])
		}
	case "revoke-invite":
		f.Action = protocol.ActionRevokeInvite
		if err = need(1); err == nil {
			f.Token = rest[0]
		}
	case "dismiss-report":
		f.Action = protocol.ActionDismissReport
		if err = need(1); err == nil {
			f.ReportID = rest[0]
		}
	default:
		return f, usagef("unknown action %q: %s", action, moderateUsage)
	}
	return f, err
}

// parseSeconds reads a number of seconds from the command line.
func parseSeconds(arg string) (int64, error) {
	n, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || n < 0 {
		return 0, usagef("%q is not a number of seconds", arg)
	}
	return n, nil
}

// runInfo prints how a group is run: roles, settings, mutes, bans and pins.
func runInfo(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("info"), args, 1, 1)
	if err != nil {
		return err
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		r, err := s.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
		if err != nil {
			return err
		}
		for _, conv := range r.Conversations {
			if conv.ID != pos[0] {
				continue
			}
			if c.json {
				return c.printJSON(conv)
			}
			g := conv.Group
			if g == nil {
				return fmt.Errorf("%s is a DM: it has no roles or settings", conv.ID)
			}
			c.learnNames(ctx, s.conn, conv.Members...)
			for _, m := range conv.Members {
				role := protocol.RoleMember
				switch {
				case m == g.Owner:
					role = protocol.RoleOwner
				case slices.Contains(g.Admins, m):
					role = protocol.RoleAdmin
				}
				fmt.Fprintf(c.stdout, "%s\t%s\n", c.names.show(m), role)
			}
			fmt.Fprintf(c.stdout, "name: %s\ntopic: %s\nannouncement: %v\nslow mode: %d s\npins: %v\nbanned: %s\n",
				conv.Name, g.Topic, g.Announcement, g.SlowModeSeconds, g.Pins, strings.Join(g.Banned, ", "))
			for _, mu := range g.Muted {
				fmt.Fprintf(c.stdout, "muted: %s until %s\n", c.names.show(mu.UserID), mu.Until.Format(time.RFC3339))
			}
			return nil
		}
		return fmt.Errorf("you are not in %s", pos[0])
	})
}

// runInvite makes an invite link and prints its token.
func runInvite(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("invite")
	expires := fs.Duration("expires", 0, "the link stops joining after this long (0: never)")
	uses := fs.Int64("uses", 0, "the link joins at most this many times (0: no limit)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeModerate, ConversationID: pos[0], Action: protocol.ActionCreateInvite,
		Seconds: int64(expires.Seconds()), MaxUses: *uses},
		func(r protocol.ServerFrame) any { return r.Invite },
		func(_ context.Context, _ *session, r protocol.ServerFrame) { fmt.Fprintln(c.stdout, r.Invite.Token) })
}

// runInvites lists a group's live invite links.
func runInvites(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("invites"), args, 1, 1)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeListInvites, ConversationID: pos[0]},
		func(r protocol.ServerFrame) any { return orEmpty(deref(r.Invites)) },
		func(_ context.Context, _ *session, r protocol.ServerFrame) {
			for _, i := range deref(r.Invites) {
				expires := "never"
				if i.ExpiresAt != nil {
					expires = i.ExpiresAt.Format(time.RFC3339)
				}
				fmt.Fprintf(c.stdout, "%s\tuses %d/%d\texpires %s\n", i.Token, i.Uses, i.MaxUses, expires)
			}
		})
}

// runJoin previews an invite link (-preview) or joins by it, printing the group's id.
func runJoin(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("join")
	preview := fs.Bool("preview", false, "only show the group's name and member count")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *preview {
		return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeInvitePreview, Token: pos[0]},
			func(r protocol.ServerFrame) any { return r.Invite },
			func(_ context.Context, _ *session, r protocol.ServerFrame) {
				fmt.Fprintf(c.stdout, "%s\t%d members\n", r.Invite.Name, r.Invite.Members)
			})
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: pos[0]},
		func(r protocol.ServerFrame) any { return r.Conversation },
		func(_ context.Context, _ *session, r protocol.ServerFrame) { fmt.Fprintln(c.stdout, r.Conversation.ID) })
}

// runReport reports a message to its group's admins.
func runReport(ctx context.Context, c *cli, args []string) error {
	pos, seq, err := c.parseMessage(c.flagSet("report"), args, 3, -1)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeReport, ConversationID: pos[0], Seq: seq, Reason: strings.Join(pos[2:], " ")})
}

// runReports lists a group's open reports.
func runReports(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flagSet("reports"), args, 1, 1)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeListReports, ConversationID: pos[0]},
		func(r protocol.ServerFrame) any { return orEmpty(deref(r.Reports)) },
		func(ctx context.Context, s *session, r protocol.ServerFrame) {
			for _, rep := range deref(r.Reports) {
				c.learnNames(ctx, s.conn, rep.Reporter)
				fmt.Fprintf(c.stdout, "%s\tmessage %d\tby %s\t%s\n", rep.ID, rep.Seq, c.names.show(rep.Reporter), rep.Reason)
			}
		})
}

// deref is the list a reply carries, nil when it carries none.
func deref[T any](list *[]T) []T {
	if list == nil {
		return nil
	}
	return *list
}
