package storage

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The layout of messages. The embedded store (FerretDB v1 on SQLite) answers exactly one filter
// from an index, {_id: value}, and reads the whole collection for any other; on MongoDB an _id
// lookup is as cheap as any index lookup. So every read of messages is a handful of _id
// lookups, at any depth and on both stores, and a message is written once, by an insert:
//   - messageClaims: one document per seq (seqClaimID), holding the message, and one per client
//     message id (clientClaimID), inserted together: a message's store write. An insert is the
//     one write both stores make atomic (FerretDB v1's updates are read-modify-write), so the seq
//     claim is the fence a stale owner cannot pass, and the client claim makes a retried send
//     find its message by _id. A conversation's newest messages, those of its bucket not yet
//     full, are read (and changed) in their seq claims.
//   - messageBuckets: the messages of a conversation, BucketSize to a document, whose _id is the
//     conversation and the bucket's number (bucketID), written once, whole, when its last seq is
//     stored (sealed). A page is one or two buckets, and the newest messages' claims.
//   - messageChanges: the conversation's change numbers (versions) in order, BucketSize to a
//     document, each with the seq it changed, so a reconnecting client's catch-up on edits reads
//     the changes after its version by _id.

// BucketSize is how many consecutive seqs one bucket holds: a default page (50) spans at most
// two buckets, and a full bucket of chat messages stays well under MongoDB's 16 MiB document
// limit (64 messages of protocol.MaxBodyBytes each).
const BucketSize = 64

// bucketNumber is the bucket of a seq (seqs start at 1), or of a version in the change log.
func bucketNumber(n int64) int64 { return (max(n, 1) - 1) / BucketSize }

// bucketID is the _id of a conversation's bucket number n. The number is zero-padded so that
// a conversation's buckets sort in order on MongoDB's _id index too.
func bucketID(conversationID string, n int64) string {
	return fmt.Sprintf("%s/%012d", conversationID, n)
}

// bucketIDs are the _ids of the buckets holding the numbers from..to.
func bucketIDs(conversationID string, from, to int64) []string {
	var ids []string
	for n := bucketNumber(from); n <= bucketNumber(to); n++ {
		ids = append(ids, bucketID(conversationID, n))
	}
	return ids
}

// bucketDoc is one sealed bucket of a conversation's messages, in seq order.
type bucketDoc struct {
	ID             string    `bson:"_id"`
	ConversationID string    `bson:"conversationId"`
	Messages       []Message `bson:"messages"`
}

// claimDoc takes a seq, or a client message id, of a conversation: Seq is the seq taken. A seq's
// claim holds its message: stored there, and read and changed there until its bucket is sealed.
type claimDoc struct {
	ID             string   `bson:"_id"`
	ConversationID string   `bson:"conversationId"`
	Seq            int64    `bson:"seq"`
	Message        *Message `bson:"message,omitempty"`
}

// seqClaimID is the _id of the claim of seq; clientClaimID that of a client message id. A seq
// is twelve digits and a client message id is a uuid, so the two never meet.
func seqClaimID(conversationID string, seq int64) string {
	return fmt.Sprintf("%s/%012d", conversationID, seq)
}

func clientClaimID(conversationID, clientMsgID string) string {
	return conversationID + "/" + clientMsgID
}

// changeEntry is one change of the change log: version numbers the change, Seq is the message.
type changeEntry struct {
	Version int64 `bson:"version"`
	Seq     int64 `bson:"seq"`
}

// changeDoc is one bucket of a conversation's change log.
type changeDoc struct {
	ID      string        `bson:"_id"`
	Changes []changeEntry `bson:"changes"`
}

// byID is the filter of one document: the one the embedded store answers from its index.
func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }
