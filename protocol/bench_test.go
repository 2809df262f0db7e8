package protocol_test

import (
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
)

// Frames as a busy session sees them: a send from the client, and the message and ack it causes.
var (
	benchSendFrame = []byte(`{"type":"send","id":"r42","conversationId":"6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11",` +
		`"clientMsgId":"0b8e2a2c-4b53-4c1e-9a57-0d3f1b6f2a10","body":"see you at the station at seven, bring the tickets"}`)
	benchHistoryFrame = []byte(`{"type":"history","id":"r43","conversationId":"6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11","before":1200,"limit":50}`)
	benchMessage      = protocol.Message{ConversationID: "6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11", Seq: 1201, SenderID: "alice",
		Kind: protocol.KindText, Body: "see you at the station at seven, bring the tickets",
		CreatedAt: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC), ClientMsgID: "0b8e2a2c-4b53-4c1e-9a57-0d3f1b6f2a10"}
)

func BenchmarkDecodeClientFrame(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame []byte
	}{{"send", benchSendFrame}, {"history", benchHistoryFrame}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.frame)))
			for b.Loop() {
				if _, err := protocol.DecodeClientFrame(bc.frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeMessagePush is the once-per-message encoding a fan-out writes to every socket.
func BenchmarkEncodeMessagePush(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := protocol.EncodeMessagePush(benchMessage); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPushFromEncodedMessage turns the message as published by the sequencer into the frame
// sockets get, without decoding it again.
func BenchmarkPushFromEncodedMessage(b *testing.B) {
	encoded, err := protocol.EncodeMessagePush(benchMessage)
	if err != nil {
		b.Fatal(err)
	}
	published := append([]byte("{"), encoded[len(`{"type":"message",`):]...)
	b.ReportAllocs()
	b.SetBytes(int64(len(published)))
	for b.Loop() {
		protocol.PushFromEncodedMessage(published)
	}
}

func BenchmarkEncodeAck(b *testing.B) {
	at := benchMessage.CreatedAt
	ack := protocol.ServerFrame{Type: protocol.TypeAck, ID: "r42", ConversationID: benchMessage.ConversationID,
		Seq: benchMessage.Seq, ClientMsgID: benchMessage.ClientMsgID, CreatedAt: &at}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := protocol.Encode(ack); err != nil {
			b.Fatal(err)
		}
	}
}
