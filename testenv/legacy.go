package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/chatd/chatd/storage"
)

// LegacyMessages writes a pre-seq data set the way an older system would have: conversations,
// and messages with neither seq nor clientMsgId, in _id order: sizes maps conversation id to its
// message count; every conversation has the members ann and ben.
func LegacyMessages(t *testing.T, cfg storage.Config, sizes map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := Database(t, cfg)
	for conv, n := range sizes {
		if _, err := db.Collection("conversations").InsertOne(ctx, bson.D{{Key: "_id", Value: conv},
			{Key: "kind", Value: "group"}, {Key: "members", Value: bson.A{"ann", "ben"}}}); err != nil {
			t.Fatal(err)
		}
		var docs []any
		for i := 1; i <= n; i++ {
			docs = append(docs, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "conversationId", Value: conv},
				{Key: "senderId", Value: "ann"}, {Key: "kind", Value: "text"}, {Key: "body", Value: fmt.Sprintf("%s #%d", conv, i)},
				{Key: "createdAt", Value: time.Now()}})
		}
		if len(docs) == 0 {
			continue
		}
		if _, err := db.Collection("messages").InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
}

// Database connects to cfg's database directly, for a test to write data as an older version
// stored it or to look at documents as stored. The connection closes when the test ends.
func Database(t testing.TB, cfg storage.Config) *mongo.Database {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := client.Disconnect(ctx); err != nil {
			t.Errorf("disconnect the test's own client: %v", err)
		}
	})
	return client.Database(cfg.Database)
}

// BackdateMessages sets createdAt of the messages from..to of a conversation to at, where they
// are stored (storage/buckets.go): in its sealed bucket (BucketSize seqs to a document, _id the
// conversation and the bucket's number), else in the message's seq claim. For a test of how a
// page shows days.
func BackdateMessages(t testing.TB, cfg storage.Config, conversationID string, from, to int64, at time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := Database(t, cfg)
	buckets, claims := db.Collection("messageBuckets"), db.Collection("messageClaims")
	for n := (from - 1) / storage.BucketSize; n <= (to-1)/storage.BucketSize; n++ {
		id := bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%012d", conversationID, n)}}
		var b struct {
			Messages []bson.M `bson:"messages"`
		}
		err := buckets.FindOne(ctx, id).Decode(&b)
		if errors.Is(err, mongo.ErrNoDocuments) { // not sealed: each message is in its claim
			for seq := max(from, n*storage.BucketSize+1); seq <= min(to, (n+1)*storage.BucketSize); seq++ {
				claim := bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%012d", conversationID, seq)}}
				if _, err := claims.UpdateOne(ctx, claim, bson.D{{Key: "$set", Value: bson.D{{Key: "message.createdAt", Value: at}}}}); err != nil {
					t.Fatalf("back-date message %d of %s: %v", seq, conversationID, err)
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("read bucket %d of %s: %v", n, conversationID, err)
		}
		for _, m := range b.Messages {
			if seq, _ := m["seq"].(int64); seq >= from && seq <= to {
				m["createdAt"] = at
			}
		}
		if _, err := buckets.UpdateOne(ctx, id, bson.D{{Key: "$set", Value: bson.D{{Key: "messages", Value: b.Messages}}}}); err != nil {
			t.Fatalf("back-date messages of %s: %v", conversationID, err)
		}
	}
}
