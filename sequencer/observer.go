package sequencer

import "github.com/chatd/chatd/protocol"

// Observer hears, on the owner of a conversation, each message and each change it stored, right
// after it published them: per conversation in seq order (changes in version order), and again
// when a retry or a new owner publishes a message again, so an observer drops what it has seen.
// Only the partition's owner calls it, so each event is heard by one node of the cluster at a
// time. Its methods run in the owner's batch and must not block: hand the work to a queue of
// your own.
type Observer interface {
	// Stored hears a message; members are the conversation's members as the owner has them
	// (nil when it does not know them, and the observer's own copy).
	Stored(m protocol.Message, members []string)
	Changed(c Change)
}
