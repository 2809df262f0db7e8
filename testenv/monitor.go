package testenv

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Command is one command the driver sent.
type Command struct {
	Name       string
	Collection string
	Body       bson.Raw
}

// CommandRecorder records the commands a store sends, for tests that count writes or check the
// shape of queries.
type CommandRecorder struct {
	mu       sync.Mutex
	commands []Command
}

// Monitor returns the driver hook that feeds the recorder.
func (r *CommandRecorder) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK() // the collection, for collection commands
		r.mu.Lock()
		r.commands = append(r.commands, Command{Name: e.CommandName, Collection: coll, Body: append(bson.Raw(nil), e.Command...)})
		r.mu.Unlock()
	}}
}

// Commands returns the recorded commands named name on collection (either may be "" for any).
func (r *CommandRecorder) Commands(name, collection string) []Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Command
	for _, c := range r.commands {
		if (name == "" || c.Name == name) && (collection == "" || c.Collection == collection) {
			out = append(out, c)
		}
	}
	return out
}

// Writes returns the recorded commands that write (insert, update, delete, findAndModify) to
// collection ("" for any).
func (r *CommandRecorder) Writes(collection string) []Command {
	var out []Command
	for _, c := range r.Commands("", collection) {
		switch c.Name {
		case "insert", "update", "delete", "findAndModify":
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets what was recorded.
func (r *CommandRecorder) Reset() {
	r.mu.Lock()
	r.commands = nil
	r.mu.Unlock()
}
