package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

func runLogin(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("login")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	a, err := client.SignIn(ctx, nil, httpURL(c.server), pos[0])
	if err != nil {
		return err
	}
	path, err := c.saveToken(a.Token)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(struct {
			UserID    string `json:"userId"`
			Name      string `json:"name"`
			Token     string `json:"token"`
			TokenFile string `json:"tokenFile"`
		}{a.UserID, a.Name, a.Token, path})
	}
	fmt.Fprintln(c.stdout, a.Token)
	c.names.remember(protocol.Profile{UserID: a.UserID, Name: a.Name})
	fmt.Fprintf(c.stderr, "signed in as %s; token saved to %s\n", c.names.show(a.UserID), path)
	return nil
}

func runName(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("name")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		if _, err := s.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSetName, Name: strings.Join(pos, " ")}); err != nil {
			return err
		}
		// The server keeps the name cleaned (white space made single): print what it kept.
		users, err := fetchProfiles(ctx, s.conn, []string{s.userID})
		if err != nil {
			return fmt.Errorf("the name is set; %w", err)
		}
		if len(users) != 1 {
			return fmt.Errorf("the name is set, but the server does not answer for %s", s.userID)
		}
		if c.json {
			return c.printJSON(users[0])
		}
		fmt.Fprintln(c.stdout, users[0].Name)
		return nil
	})
}

func runFind(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("find")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeFindUsers, Query: strings.Join(pos, " ")},
		func(r protocol.ServerFrame) any { return orEmpty(usersOf(r)) },
		func(ctx context.Context, s *session, r protocol.ServerFrame) {
			for _, p := range usersOf(r) {
				fmt.Fprintf(c.stdout, "%s\t%s\n", p.UserID, p.Name)
			}
		})
}

// usersOf is the list a profiles reply carries.
func usersOf(r protocol.ServerFrame) []protocol.Profile {
	if r.Users == nil {
		return nil
	}
	return *r.Users
}

func runDM(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("dm")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		conv, err := s.conn.OpenDM(ctx, pos[0])
		if err != nil {
			return err
		}
		return c.printConversation(conv)
	})
}

func runGroup(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("group")
	pos, err := c.parse(fs, args, 2, -1)
	if err != nil {
		return err
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		conv, err := s.conn.CreateGroup(ctx, pos[0], pos[1:])
		if err != nil {
			return err
		}
		return c.printConversation(conv)
	})
}

func (c *cli) printConversation(conv protocol.Conversation) error {
	if c.json {
		return c.printJSON(conv)
	}
	fmt.Fprintln(c.stdout, conv.ID)
	return nil
}

func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("list")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		r, err := s.conn.Request(ctx, protocol.ClientFrame{Type: protocol.TypeListConversations})
		if err != nil {
			return err
		}
		convs := r.Conversations
		if convs == nil {
			convs = []protocol.Conversation{} // "[]" rather than "null" for scripts
		}
		if c.json {
			return c.printJSON(convs)
		}
		var untitled []string // the members that name conversations without a name
		for _, conv := range convs {
			if conv.Name == "" {
				untitled = append(untitled, conv.Members...)
			}
		}
		c.learnNames(ctx, s.conn, untitled...)
		w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tKIND\tLAST SEQ\tUNREAD\tNAME")
		for _, conv := range convs {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", conv.ID, conv.Kind, conv.LastSeq, conv.Unread, c.title(conv, s.userID))
		}
		return w.Flush()
	})
}

// title names a conversation for a person: a group's name, or the other members of a DM.
func (c *cli) title(conv protocol.Conversation, me string) string {
	if conv.Name != "" {
		return conv.Name
	}
	var others []string
	for _, m := range conv.Members {
		if m != me {
			others = append(others, c.names.show(m))
		}
	}
	return strings.Join(others, ", ")
}

func runSend(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("send")
	retries := fs.Int("retries", defaultRetries, "repeat a retryable failure this many times, with the same clientMsgId")
	replyTo := fs.Int64("reply", 0, "the seq of the message this one answers")
	var files fileFlags
	fs.Var(&files, "file", "attach a file (repeat for more); with files the text may be empty")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	convID := pos[0]
	body := strings.Join(pos[1:], " ")
	if len(pos) == 1 && len(files) == 0 {
		data, err := io.ReadAll(io.LimitReader(c.stdin, protocol.MaxBodyBytes+1))
		if err != nil {
			return fmt.Errorf("read the message from stdin: %w", err)
		}
		body = strings.TrimRight(string(data), "\n")
	}
	if body == "" && len(files) == 0 {
		return usagef("the message is empty")
	}
	uploads, err := c.uploadFiles(ctx, convID, files)
	if err != nil {
		return err
	}
	ack, err := c.sendWithRetries(ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: convID,
		ClientMsgID: uuid.NewString(), Body: body, ReplyTo: *replyTo, Attachments: uploads}, *retries)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(struct {
			ConversationID string     `json:"conversationId"`
			Seq            int64      `json:"seq"`
			ClientMsgID    string     `json:"clientMsgId"`
			CreatedAt      *time.Time `json:"createdAt,omitempty"`
		}{ack.ConversationID, ack.Seq, ack.ClientMsgID, ack.CreatedAt})
	}
	fmt.Fprintln(c.stdout, ack.Seq)
	return nil
}

// sendWithRetries sends once and repeats retryable failures with the same clientMsgId, so the
// message is stored at most once whatever happened to the earlier attempts. A lost connection is
// dialed again.
func (c *cli) sendWithRetries(ctx context.Context, send protocol.ClientFrame, retries int) (protocol.ServerFrame, error) {
	backoff := 250 * time.Millisecond
	var s *session
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	for attempt := 0; ; attempt++ {
		var err error
		if s == nil {
			s, err = c.connect(ctx)
		}
		if err == nil {
			rctx, cancel := c.requestContext(ctx)
			var ack protocol.ServerFrame
			ack, err = s.conn.Request(rctx, send)
			cancel()
			if err == nil {
				return ack, nil
			}
			select {
			case <-s.conn.Done():
				s.close()
				s = nil
			default:
			}
		}
		if attempt >= retries || !retryable(err) || ctx.Err() != nil {
			return protocol.ServerFrame{}, err
		}
		fmt.Fprintf(c.stderr, "chatctl send: %v; retrying in %s\n", err, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return protocol.ServerFrame{}, ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func runEdit(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("edit")
	pos, seq, err := c.parseMessage(fs, args, 3, -1)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeEditMessage, ConversationID: pos[0], Seq: seq,
		Body: strings.Join(pos[2:], " ")})
}

func runDelete(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("delete")
	pos, seq, err := c.parseMessage(fs, args, 2, 2)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: pos[0], Seq: seq})
}

func runReact(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("react")
	remove := fs.Bool("remove", false, "take the reaction away")
	pos, seq, err := c.parseMessage(fs, args, 3, 3)
	if err != nil {
		return err
	}
	return c.change(ctx, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: pos[0], Seq: seq,
		Emoji: pos[2], Remove: *remove})
}

// change sends one change of a message and waits for its ok; it prints nothing on success.
func (c *cli) change(ctx context.Context, f protocol.ClientFrame) error {
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		_, err := s.conn.Request(ctx, f)
		return err
	})
}

func runReactions(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("reactions")
	pos, seq, err := c.parseMessage(fs, args, 2, 2)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypeReactions, ConversationID: pos[0], Seq: seq},
		func(r protocol.ServerFrame) any { return orEmpty(r.Reactions) },
		func(ctx context.Context, s *session, r protocol.ServerFrame) {
			var ids []string
			for _, re := range r.Reactions {
				ids = append(ids, re.UserIDs...)
			}
			c.learnNames(ctx, s.conn, ids...)
			for _, re := range r.Reactions {
				who := make([]string, len(re.UserIDs))
				for i, id := range re.UserIDs {
					who[i] = c.names.show(id)
				}
				fmt.Fprintf(c.stdout, "%s %d %s\n", re.Emoji, re.Count, strings.Join(who, ", "))
			}
		})
}

func runPresence(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("presence")
	pos, err := c.parse(fs, args, 1, protocol.MaxPresenceUsers)
	if err != nil {
		return err
	}
	return c.answer(ctx, protocol.ClientFrame{Type: protocol.TypePresence, UserIDs: pos},
		func(r protocol.ServerFrame) any { return orEmpty(r.Presence) },
		func(ctx context.Context, s *session, r protocol.ServerFrame) {
			c.learnNames(ctx, s.conn, pos...)
			for _, p := range r.Presence {
				who := c.names.show(p.UserID)
				switch {
				case p.Online:
					fmt.Fprintf(c.stdout, "%s online\n", who)
				case p.LastSeen != nil:
					fmt.Fprintf(c.stdout, "%s last seen %s\n", who, p.LastSeen.Local().Format(time.DateTime))
				default:
					fmt.Fprintf(c.stdout, "%s offline\n", who)
				}
			}
		})
}

// answer sends one request and prints its reply: as JSON, what jsonOf picks from it, or as text
// (which may ask the session for names).
func (c *cli) answer(ctx context.Context, f protocol.ClientFrame, jsonOf func(protocol.ServerFrame) any,
	text func(ctx context.Context, s *session, r protocol.ServerFrame)) error {
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		r, err := s.conn.Request(ctx, f)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(jsonOf(r))
		}
		text(ctx, s, r)
		return nil
	})
}

// orEmpty is list, or an empty list for nil: "[]" rather than "null" for scripts.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// parseMessage parses a command whose first two arguments name a message (conversation, seq),
// with min to max arguments in all (max -1: no bound), and returns them all and the seq.
func (c *cli) parseMessage(fs *flag.FlagSet, args []string, min, max int) ([]string, int64, error) {
	pos, err := c.parse(fs, args, min, max)
	if err != nil {
		return nil, 0, err
	}
	seq, err := parseSeq(pos[1])
	return pos, seq, err
}

// parseSeq reads a message's seq from the command line.
func parseSeq(arg string) (int64, error) {
	seq, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || seq < 1 {
		return 0, usagef("%q is not a seq (a whole number from 1)", arg)
	}
	return seq, nil
}

func runHistory(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("history")
	before := fs.Int64("before", 0, "the page that ends just before this seq")
	after := fs.Int64("after", 0, "the page that starts just after this seq")
	around := fs.Int64("around", 0, "the page centred on this seq")
	fraction := fs.Float64("fraction", 0, "the page at this fraction (0..1) of the conversation, as a scroll bar does")
	limit := fs.Int("limit", 0, fmt.Sprintf("messages per page (default %d, at most %d)", protocol.DefaultPageSize, protocol.MaxPageSize))
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	req := protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: pos[0], Limit: *limit}
	anchors := 0
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "before":
			req.Before, anchors = before, anchors+1
		case "after":
			req.After, anchors = after, anchors+1
		case "around":
			req.Around, anchors = around, anchors+1
		case "fraction":
			req.Fraction, anchors = fraction, anchors+1
		}
	})
	if anchors > 1 {
		return usagef("give at most one of -before, -after, -around, -fraction")
	}
	return c.withSession(ctx, func(ctx context.Context, s *session) error {
		page, err := s.conn.Request(ctx, req)
		if err != nil {
			return err
		}
		if c.json {
			msgs := page.Messages
			if msgs == nil {
				msgs = []protocol.Message{}
			}
			return c.printJSON(struct {
				ConversationID string             `json:"conversationId"`
				FirstSeq       int64              `json:"firstSeq"`
				LastSeq        int64              `json:"lastSeq"`
				HasBefore      bool               `json:"hasBefore"`
				HasAfter       bool               `json:"hasAfter"`
				Messages       []protocol.Message `json:"messages"`
			}{pos[0], page.FirstSeq, page.LastSeq, page.HasBefore, page.HasAfter, msgs})
		}
		c.learnNames(ctx, s.conn, people(page.Messages...)...)
		for _, m := range page.Messages {
			c.printMessage(m)
		}
		if n := len(page.Messages); n > 0 {
			fmt.Fprintf(c.stderr, "seqs %d..%d of %d..%d\n", page.Messages[0].Seq, page.Messages[n-1].Seq, page.FirstSeq, page.LastSeq)
		} else {
			fmt.Fprintf(c.stderr, "no messages here; the conversation has seqs %d..%d\n", page.FirstSeq, page.LastSeq)
		}
		return nil
	})
}

// withSession connects, runs fn with a request deadline, and closes.
func (c *cli) withSession(ctx context.Context, fn func(ctx context.Context, s *session) error) error {
	s, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	return fn(ctx, s)
}

// printMessage prints one message: a JSON line, or "#seq time sender: body" with "(edited)" and
// the reactions after it, and, for a reply, the quote of what it answers on the next line
// ("  > #seq sender: quote"). The quote comes after its own message's line, never before it: above,
// it would sit under the previous message and read as that one's. Senders show by the names learned
// (see learnNames). History and tail both print through here.
func (c *cli) printMessage(m protocol.Message) {
	if c.json {
		_ = c.printJSON(m) // stdout gone: the next write fails the same way, nothing to add
		return
	}
	at := m.CreatedAt.Local().Format(time.DateTime)
	switch m.Kind {
	case protocol.KindDeleted:
		fmt.Fprintf(c.stdout, "#%d %s %s: (deleted)\n", m.Seq, at, c.names.show(m.SenderID))
	case protocol.KindSystem:
		fmt.Fprintf(c.stdout, "#%d %s * %s\n", m.Seq, at, m.Body)
	default:
		var extra strings.Builder
		if m.EditedAt != nil {
			extra.WriteString(" (edited)")
		}
		for _, r := range m.Reactions {
			fmt.Fprintf(&extra, " [%s %d]", r.Emoji, r.Count)
		}
		fmt.Fprintf(c.stdout, "#%d %s %s: %s%s\n", m.Seq, at, c.names.show(m.SenderID), m.Body, extra.String())
	}
	if q := m.Quote; q != nil {
		text := q.Body
		if q.Deleted {
			text = "(deleted)"
		}
		fmt.Fprintf(c.stdout, "  > #%d %s: %s\n", m.ReplyTo, c.names.show(q.SenderID), text)
	}
	c.printAttachments(m.Attachments)
}

// printChange prints a change pushed while tailing: a JSON line of the frame, or one line saying
// what changed and who (by the name learned).
func (c *cli) printChange(f protocol.ServerFrame) {
	if c.json {
		_ = c.printJSON(f) // stdout gone: the next write fails the same way, nothing to add
		return
	}
	switch f.Type {
	case protocol.TypeEdited:
		fmt.Fprintf(c.stdout, "#%d edited by %s: %s\n", f.Seq, c.names.show(f.UserID), f.Body)
	case protocol.TypeDeleted:
		fmt.Fprintf(c.stdout, "#%d deleted by %s\n", f.Seq, c.names.show(f.UserID))
	case protocol.TypeReaction:
		verb, count := "reacted", int64(0)
		if f.Remove {
			verb = "took back"
		}
		if f.Count != nil {
			count = *f.Count
		}
		fmt.Fprintf(c.stdout, "#%d %s %s %s (%d now)\n", f.Seq, c.names.show(f.UserID), verb, f.Emoji, count)
	}
}

func (c *cli) printJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	data = append(data, '\n')
	if _, err := c.stdout.Write(data); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// messageOf is a pushed message frame as a Message.
func messageOf(f protocol.ServerFrame) protocol.Message {
	m := protocol.Message{ConversationID: f.ConversationID, Seq: f.Seq, SenderID: f.SenderID, Kind: f.Kind,
		Body: f.Body, ClientMsgID: f.ClientMsgID, ReplyTo: f.ReplyTo, Quote: f.Quote, Attachments: f.Attachments}
	if f.CreatedAt != nil {
		m.CreatedAt = *f.CreatedAt
	}
	return m
}
