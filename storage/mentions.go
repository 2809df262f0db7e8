package storage

import (
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MaxMentionSeqs bounds the seqs a conversation's counter document keeps of the messages that
// mention one member (the newest): the document is rewritten with every batch, so it must stay
// small. A member's count of unread mentions is exact up to it.
const MaxMentionSeqs = 100

// mentionedFields sets each member's mention seqs (a member with none loses the field).
func mentionedFields(mentioned map[string][]int64) bson.D {
	set := make(bson.D, 0, len(mentioned))
	for user, seqs := range mentioned { // user ids have no '.' or '$': safe as field names
		if seqs == nil {
			seqs = []int64{}
		}
		set = append(set, bson.E{Key: "mentioned." + user, Value: seqs})
	}
	return set
}

// AddMention returns a member's mention seqs with seq among them, in order, keeping the newest
// MaxMentionSeqs; seqs itself is left as it is.
func AddMention(seqs []int64, seq int64) []int64 {
	i, found := slices.BinarySearch(seqs, seq)
	if found {
		return seqs
	}
	seqs = slices.Insert(slices.Clone(seqs), i, seq)
	if len(seqs) > MaxMentionSeqs {
		seqs = seqs[len(seqs)-MaxMentionSeqs:]
	}
	return seqs
}
