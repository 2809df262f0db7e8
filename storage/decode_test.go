package storage

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func testConversations() []any {
	return []any{
		Conversation{ID: "c1", Kind: "dm", Members: []string{"ann", "bob"}, LastSeq: 7, Senders: map[string]int64{"ann": 7}},
		Conversation{ID: "c2", Kind: "group", Name: "team", Members: []string{"ann", "bob", "cat"}, DeletedSeqs: []int64{2}},
	}
}

func cursorOf(t *testing.T, docs []any) *mongo.Cursor {
	t.Helper()
	cur, err := mongo.NewCursorFromDocuments(docs, nil, bson.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// readAll and decode read what the driver's All and Decode read, empty results included.
func TestDecodingMatchesTheDriver(t *testing.T) {
	ctx := context.Background()
	for _, docs := range [][]any{testConversations(), nil} {
		var want, got []Conversation
		if err := cursorOf(t, docs).All(ctx, &want); err != nil {
			t.Fatal(err)
		}
		if err := readAll(ctx, cursorOf(t, docs), &got); err != nil {
			t.Fatalf("readAll: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("readAll read %+v; the driver reads %+v", got, want)
		}
	}

	var want, got Conversation
	if err := mongo.NewSingleResultFromDocument(testConversations()[1], nil, nil).Decode(&want); err != nil {
		t.Fatal(err)
	}
	if err := decode(mongo.NewSingleResultFromDocument(testConversations()[1], nil, nil), &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode read %+v; the driver reads %+v", got, want)
	}
	failed := errors.New("store down")
	if err := decode(mongo.NewSingleResultFromDocument(bson.D{}, failed, nil), &got); !errors.Is(err, failed) {
		t.Fatalf("decode of a failed operation returned %v, want its error", err)
	}
}

// BenchmarkDecodeConversations reports what decoding a user's conversations allocates: the
// driver's All wraps each document in a 4 KiB bufio.Reader, readAll does not.
func BenchmarkDecodeConversations(b *testing.B) {
	ctx := context.Background()
	docs := testConversations()
	reg := bson.NewRegistry()
	b.Run("driver", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cur, _ := mongo.NewCursorFromDocuments(docs, nil, reg)
			var out []Conversation
			if err := cur.All(ctx, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("readAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cur, _ := mongo.NewCursorFromDocuments(docs, nil, reg)
			var out []Conversation
			if err := readAll(ctx, cur, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
