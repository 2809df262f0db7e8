// Command chatctl is a command-line client of the chat server, for people and for scripts. It signs
// in on a dev-mode server, sets and finds display names, opens DMs and groups, runs groups (roles,
// settings, moderation, pins, invite links, reports), lists conversations, sends, tails a
// conversation and pages its history, all through the client package
// over one WebSocket per command. People are printed by display name (ids stay in JSON).
//
// backfill, migrate and audit talk to MongoDB directly instead, for operators.
//
// Output is plain text by default and JSON with -json (one document per result; tail prints one
// message per line). Errors go to stderr and the exit status is 1, or 2 for a usage mistake, or 3
// for an audit that found differences.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Defaults, each with its reason.
const (
	// defaultServer is where chatd listens when run with no configuration.
	defaultServer = "http://localhost:8080"
	// defaultTimeout bounds one request and its reply; a healthy server answers in milliseconds,
	// and a send is retried by the server for up to ten seconds before it gives up.
	defaultTimeout = 30 * time.Second
	// defaultRetries is how often send repeats a retryable failure with the same clientMsgId:
	// enough to ride out an owner handover, few enough that a dead server fails in seconds.
	defaultRetries = 3
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitDifferences ends an audit that found differences, so a script tells a store that
	// differs from an audit that could not run (exitFailure).
	exitDifferences = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// cli is what a command may touch of the world; tests substitute every part of it.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// Set from the common flags.
	server  string
	token   string
	json    bool
	timeout time.Duration

	// names are the display names of the users printed so far.
	names nameCache
}

// command is one subcommand.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

var commands = []command{
	{"login", "<name>", "sign in on a dev-mode server; prints the token and saves it", runLogin},
	{"name", "<display name>", "change your display name (any script); prints it as kept", runName},
	{"find", "<query>", "find people whose name, or a word of it, starts with query; prints their ids and names", runFind},
	{"dm", "<user>", "open the DM with a user; prints its conversation id", runDM},
	{"group", "<name> <member>...", "create a group; prints its conversation id", runGroup},
	{"list", "", "list your conversations with their last seq and unread count", runList},
	{"send", "<conversationId> [text...]", "send a message (text from stdin when none is given and no -file; -reply SEQ answers a message; -file PATH, repeatable, attaches files); prints the acked seq", runSend},
	{"download", "<fileId> [path]", "download a file of a message (its id as history shows it) to path, or to stdout", runDownload},
	{"edit", "<conversationId> <seq> <text...>", "replace the text of one of your messages", runEdit},
	{"delete", "<conversationId> <seq>", "delete one of your messages for everyone", runDelete},
	{"react", "<conversationId> <seq> <emoji>", "add a reaction to a message (-remove takes it away)", runReact},
	{"reactions", "<conversationId> <seq>", "list who reacted to a message with what", runReactions},
	{"add", "<conversationId> <user>...", "add members to a group (its admins)", runAdd},
	{"remove", "<conversationId> <user>", "remove a member from a group (its admins)", runRemove},
	{"leave", "<conversationId>", "leave a group (its owner hands it over first)", runLeave},
	{"moderate", "<conversationId> <action> [args]", "change a group: " + moderateUsage, runModerate},
	{"info", "<conversationId>", "print a group's members with their roles, and its settings, mutes, bans and pins", runInfo},
	{"invite", "<conversationId>", "make an invite link (-expires, -uses); prints its token", runInvite},
	{"invites", "<conversationId>", "list a group's live invite links (its admins)", runInvites},
	{"join", "<token>", "join a group by invite link (-preview shows its name and size only); prints its id", runJoin},
	{"report", "<conversationId> <seq> <reason...>", "report a message to the group's admins", runReport},
	{"reports", "<conversationId>", "list a group's open reports (its admins)", runReports},
	{"presence", "<user>...", "say who of these users is online, and when the others were last seen", runPresence},
	{"tail", "<conversationId>", "print messages as they arrive; reconnects and fills gaps", runTail},
	{"history", "<conversationId>", "print one page of history", runHistory},
	{"search", "<words...>", "find the messages you may see that hold every word, newest first (-in CONVERSATION, -limit N, -cursor C for the next page)", runSearch},
	{"backfill", "", "give seqs to a legacy messages collection in MongoDB (resumable)", runBackfill},
	{"migrate", "", "move messages stored one document each into buckets (resumable)", runMigrate},
	{"audit", "", "check every conversation in MongoDB against its messages: seqs, counters, tombstones, unread; exit 3 when any differs", runAudit},
}

// usageError is a mistake on the command line; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, c cli) int {
	c.server = envOr(c.getenv, "CHAT_SERVER", defaultServer)
	c.token = c.getenv("CHAT_TOKEN")
	c.timeout = defaultTimeout

	top := c.flagSet("chatctl")
	top.Usage = func() { c.usage() }
	rest, err := parseTop(top, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage // the flag package has printed the problem
	}
	if len(rest) == 0 {
		c.usage()
		return exitUsage
	}
	name := rest[0]
	if name == "help" {
		c.usage()
		return exitOK
	}
	for _, cmd := range commands {
		if cmd.name != name {
			continue
		}
		err := cmd.run(ctx, &c, rest[1:])
		var ue *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errDifferences):
			fmt.Fprintf(c.stderr, "chatctl %s: %v\n", name, err)
			return exitDifferences
		case errors.As(err, &ue):
			fmt.Fprintf(c.stderr, "chatctl %s: %s\nusage: chatctl %s [flags] %s\n", name, ue.msg, name, cmd.args)
			return exitUsage
		default:
			fmt.Fprintf(c.stderr, "chatctl %s: %v\n", name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(c.stderr, "chatctl: unknown command %q\n", name)
	c.usage()
	return exitUsage
}

// parseTop parses the common flags given before the command name.
func parseTop(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

func (c *cli) usage() {
	w := tabwriter.NewWriter(c.stderr, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "usage: chatctl [flags] <command> [flags] [args]")
	fmt.Fprintln(w)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %s %s\t%s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags, before or after the command:")
	_ = w.Flush() // stderr; nothing useful to do if it fails
	fs := flag.NewFlagSet("chatctl", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.registerCommon(fs)
	fs.PrintDefaults()
	fmt.Fprintln(c.stderr, "\nRun chatctl <command> -h for a command's own flags.")
}

// flagSet returns a flag set that also takes the common flags, defaulting to their current values,
// so "chatctl -json list" and "chatctl list -json" mean the same.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.registerCommon(fs)
	return fs
}

func (c *cli) registerCommon(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", c.server, "server base URL (CHAT_SERVER)")
	fs.StringVar(&c.token, "token", c.token, "bearer token; default CHAT_TOKEN, then the file saved by login")
	fs.BoolVar(&c.json, "json", c.json, "print JSON for scripts")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "how long to wait for one reply")
}

// parse parses a command's flags, which may come before, between or after its arguments ("--"
// ends them), and checks the argument count; max < 0 means no upper bound.
func (c *cli) parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch {
	case len(positional) < min:
		return nil, usagef("expected at least %d argument(s), got %d", min, len(positional))
	case max >= 0 && len(positional) > max:
		return nil, usagef("expected at most %d argument(s), got %d", max, len(positional))
	}
	return positional, nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// requestContext bounds one request by -timeout.
func (c *cli) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// wsURL is the WebSocket endpoint of the server base URL.
func wsURL(server string) (string, error) {
	s := strings.TrimRight(server, "/")
	switch {
	case strings.HasPrefix(s, "http://"):
		return "ws://" + strings.TrimPrefix(s, "http://") + "/ws", nil
	case strings.HasPrefix(s, "https://"):
		return "wss://" + strings.TrimPrefix(s, "https://") + "/ws", nil
	case strings.HasPrefix(s, "ws://"), strings.HasPrefix(s, "wss://"):
		return s + "/ws", nil
	}
	return "", fmt.Errorf("server %q must start with http://, https://, ws:// or wss://", server)
}

// httpURL is the HTTP base of the server URL, for sign-in.
func httpURL(server string) string {
	s := strings.TrimRight(server, "/")
	switch {
	case strings.HasPrefix(s, "ws://"):
		return "http://" + strings.TrimPrefix(s, "ws://")
	case strings.HasPrefix(s, "wss://"):
		return "https://" + strings.TrimPrefix(s, "wss://")
	}
	return s
}
