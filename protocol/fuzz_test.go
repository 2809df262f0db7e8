package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
)

// clientTypes are the frame types a decoded frame may have.
var clientTypes = map[string]bool{
	protocol.TypeSend: true, protocol.TypeOpenDM: true, protocol.TypeCreateGroup: true,
	protocol.TypeListConversations: true, protocol.TypeSync: true, protocol.TypeHistory: true,
	protocol.TypeRead: true, protocol.TypeReceipts: true, protocol.TypeTyping: true,
	protocol.TypeDeleteMessage: true, protocol.TypeHideConversation: true, protocol.TypeAddMembers: true,
	protocol.TypeRemoveMember: true, protocol.TypeLeave: true, protocol.TypeSetPrivacy: true,
	protocol.TypePing: true, protocol.TypeBlockUser: true, protocol.TypeUnblockUser: true,
	protocol.TypeListBlocks: true,
}

// refusalCodes are the codes decoding may refuse a frame with; anything else (internal above
// all) would mean the decoder let an unexpected failure through.
var refusalCodes = map[string]bool{
	protocol.CodeBadFrame: true, protocol.CodeUnknownType: true,
	protocol.CodeInvalidField: true, protocol.CodeTooLarge: true,
}

// maxErrorMessage bounds an error frame's message: refusals must not echo the frame back.
const maxErrorMessage = 200

// FuzzDecodeClientFrame feeds arbitrary bytes to the decoder every client frame goes through. The
// seed corpus is in testdata/fuzz/FuzzDecodeClientFrame; run with
//
//	go test -run '^$' -fuzz FuzzDecodeClientFrame -fuzztime 2m ./protocol/
func FuzzDecodeClientFrame(f *testing.F) {
	for _, seed := range []string{
		`{"type":"send","id":"r1","conversationId":"c1","clientMsgId":"` + testUUID + `","body":"hi"}`,
		`{"type":"history","id":"r2","conversationId":"c1","fraction":0.5,"limit":20}`,
		`{"type":"sync","since":{"c1":4}}`,
		`{"type":"create_group","members":["bob","carol"],"name":"x"}`,
		`{"type":"set_privacy","hideReceipts":true}`,
		`{"type":"block_user","id":"b1","userId":"bob"}`,
		`{"type":"list_blocks"}`,
		`{"type":"read","conversationId":"c1","seq":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := protocol.DecodeClientFrame(data)
		if len(frame.ID) > protocol.MaxIDBytes {
			t.Fatalf("frame carries an id of %d bytes", len(frame.ID))
		}
		if err != nil {
			checkRefusal(t, err)
			return
		}
		checkAccepted(t, data, frame)
	})
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is a %T, not a *protocol.Error", err, err)
	}
	if !refusalCodes[pe.Code] {
		t.Fatalf("refusal with code %q: %v", pe.Code, err)
	}
	if pe.Retryable {
		t.Fatalf("a refused frame is retryable: %v", err)
	}
	if len(pe.Message) > maxErrorMessage || !utf8.ValidString(pe.Message) {
		t.Fatalf("error message of %d bytes (valid UTF-8: %v)", len(pe.Message), utf8.ValidString(pe.Message))
	}
}

// checkAccepted checks a decoded frame against the rules independently of Validate, then that it
// survives a round trip through its own encoding.
func checkAccepted(t *testing.T, data []byte, f protocol.ClientFrame) {
	t.Helper()
	if !utf8.Valid(data) {
		t.Fatal("accepted a frame that is not valid UTF-8")
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("accepted frame fails Validate: %v", err)
	}
	if !clientTypes[f.Type] {
		t.Fatalf("accepted frame of type %q", f.Type)
	}
	switch f.Type {
	case protocol.TypeSend:
		if _, err := uuid.Parse(f.ClientMsgID); err != nil || f.Body == "" || len(f.Body) > protocol.MaxBodyBytes || f.ReplyTo < 0 {
			t.Fatalf("accepted send: clientMsgId %q, body of %d bytes, replyTo %d", f.ClientMsgID, len(f.Body), f.ReplyTo)
		}
	case protocol.TypeOpenDM, protocol.TypeBlockUser, protocol.TypeUnblockUser:
		requireValidID(t, "userId", f.UserID)
	case protocol.TypeRemoveMember:
		requireValidID(t, "userId", f.UserID)
	case protocol.TypeRead, protocol.TypeReceipts, protocol.TypeDeleteMessage:
		if f.Seq < 1 {
			t.Fatalf("accepted %s of seq %d", f.Type, f.Seq)
		}
	case protocol.TypeHistory:
		if n := f.PageLimit(); n < 1 || n > protocol.MaxPageSize {
			t.Fatalf("accepted history with page limit %d", n)
		}
	case protocol.TypeSetPrivacy:
		if f.HideReceipts == nil {
			t.Fatal("accepted set_privacy without a setting")
		}
	case protocol.TypeSync:
		if len(f.Since) > protocol.MaxSince {
			t.Fatalf("accepted sync naming %d conversations", len(f.Since))
		}
		for id, seq := range f.Since {
			requireValidID(t, "since key", id)
			if seq < 0 {
				t.Fatalf("accepted sync from seq %d", seq)
			}
		}
	}
	switch f.Type {
	case protocol.TypeOpenDM, protocol.TypeCreateGroup, protocol.TypeListConversations, protocol.TypeSync, protocol.TypeSetPrivacy,
		protocol.TypePing, protocol.TypeBlockUser, protocol.TypeUnblockUser, protocol.TypeListBlocks:
	default:
		requireValidID(t, "conversationId", f.ConversationID)
	}
	if len(f.Members) > protocol.MaxGroupMembers {
		t.Fatalf("accepted %d members", len(f.Members))
	}
	if f.Type == protocol.TypeCreateGroup || f.Type == protocol.TypeAddMembers {
		for _, m := range f.Members {
			requireValidID(t, "member", m)
		}
	}

	encoded, err := json.Marshal(f)
	if err != nil {
		t.Fatalf("encode accepted frame: %v", err)
	}
	again, err := protocol.DecodeClientFrame(encoded)
	if err != nil {
		t.Fatalf("re-encoded frame %s is refused: %v", encoded, err)
	}
	reencoded, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encoded, reencoded) {
		t.Fatalf("round trip changed the frame:\n%s\n%s", encoded, reencoded)
	}
}

func requireValidID(t *testing.T, field, id string) {
	t.Helper()
	if !protocol.ValidID(id) {
		t.Fatalf("accepted frame with %s %q", field, id)
	}
}
