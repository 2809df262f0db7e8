package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatd/chatd/protocol"
)

const (
	testConv = "6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11"
	testUUID = "0b8e2a2c-4b53-4c1e-9a57-0d3f1b6f2a10"
)

// TestDecodeAcceptsEveryFrameType decodes one well-formed frame of each client type.
func TestDecodeAcceptsEveryFrameType(t *testing.T) {
	for _, frame := range []string{
		`{"type":"send","id":"r1","conversationId":"` + testConv + `","clientMsgId":"` + testUUID + `","body":"hi","replyTo":3}`,
		`{"type":"open_dm","id":"r2","userId":"bob"}`,
		`{"type":"create_group","id":"r3","name":"team","members":["bob","carol"]}`,
		`{"type":"create_group","id":"r3"}`,
		`{"type":"list_conversations","id":"r4"}`,
		`{"type":"sync","id":"r5","since":{"` + testConv + `":12}}`,
		`{"type":"sync","id":"r5"}`,
		`{"type":"history","id":"r6","conversationId":"c1"}`,
		`{"type":"history","id":"r6","conversationId":"c1","before":10,"limit":20}`,
		`{"type":"history","id":"r6","conversationId":"c1","after":0}`,
		`{"type":"history","id":"r6","conversationId":"c1","around":5}`,
		`{"type":"history","id":"r6","conversationId":"c1","fraction":1}`,
		`{"type":"read","conversationId":"c1","seq":4}`,
		`{"type":"receipts","id":"r7","conversationId":"c1","seq":4}`,
		`{"type":"typing","conversationId":"c1"}`,
		`{"type":"delete_message","id":"r8","conversationId":"c1","seq":4}`,
		`{"type":"hide_conversation","id":"r9","conversationId":"c1"}`,
		`{"type":"add_members","id":"r10","conversationId":"c1","members":["dave"]}`,
		`{"type":"remove_member","id":"r11","conversationId":"c1","userId":"dave"}`,
		`{"type":"leave","id":"r12","conversationId":"c1"}`,
		`{"type":"set_privacy","id":"r13","hideReceipts":false}`,
		`{"type":"ping","id":"r14"}`,
		`{"type":"block_user","id":"r15","userId":"bob"}`,
		`{"type":"unblock_user","id":"r16","userId":"bob"}`,
		`{"type":"list_blocks","id":"r17"}`,
		`{"type":"edit_message","id":"r18","conversationId":"c1","seq":4,"body":"new text"}`,
		`{"type":"react","id":"r19","conversationId":"c1","seq":4,"emoji":"👍"}`,
		`{"type":"react","id":"r19","conversationId":"c1","seq":4,"emoji":"👨‍👩‍👧‍👦","remove":true}`,
		`{"type":"react","id":"r19","conversationId":"c1","seq":4,"emoji":":thumbsup:"}`,
		`{"type":"reactions","id":"r20","conversationId":"c1","seq":4}`,
		`{"type":"focus","id":"r21","conversationId":"c1"}`,
		`{"type":"focus","id":"r21"}`,
		`{"type":"sync","id":"r5","since":{"c1":12},"versions":{"c1":3}}`,
		`{"type":"delivered","conversationId":"c1","seq":4}`,
		`{"type":"presence","id":"r22","userIds":["bob","carol"]}`,
		`{"type":"set_privacy","id":"r13","hidePresence":true}`,
		`{"type":"set_privacy","id":"r13","hideReceipts":true,"hidePresence":false}`,
		" \n\t{\"type\":\"list_conversations\"}\n", // surrounding whitespace is not an error
		`{"type":"send","conversationId":"c1","clientMsgId":"` + testUUID + `","body":"` + strings.Repeat("x", protocol.MaxBodyBytes) + `"}`,
	} {
		f, err := protocol.DecodeClientFrame([]byte(frame))
		if err != nil {
			t.Errorf("%s: %v", head(frame), err)
			continue
		}
		if f.Type == "" {
			t.Errorf("%s: decoded without a type", head(frame))
		}
	}
}

func TestDecodeKeepsFields(t *testing.T) {
	f, err := protocol.DecodeClientFrame([]byte(`{"type":"history","id":"r6","conversationId":"c1","before":10,"limit":500}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != "r6" || f.ConversationID != "c1" || f.Before == nil || *f.Before != 10 || f.PageLimit() != protocol.MaxPageSize {
		t.Fatalf("decoded %+v; limit %d", f, f.PageLimit())
	}
	f, err = protocol.DecodeClientFrame([]byte(`{"type":"history","conversationId":"c1"}`))
	if err != nil || f.PageLimit() != protocol.DefaultPageSize {
		t.Fatalf("default page limit: %d, %v", f.PageLimit(), err)
	}
}

// TestDecodeRefuses is every kind of malformed frame, with the stable code a client branches on
// and the request id the error frame answers (empty when the id itself is unreadable).
func TestDecodeRefuses(t *testing.T) {
	const (
		bad     = protocol.CodeBadFrame
		unknown = protocol.CodeUnknownType
		invalid = protocol.CodeInvalidField
		tooBig  = protocol.CodeTooLarge
	)
	send := func(fields string) string {
		return `{"type":"send","id":"s1",` + fields + `}`
	}
	okSend := `"conversationId":"c1","clientMsgId":"` + testUUID + `"`
	for _, tc := range []struct {
		name, frame, code, id string
	}{
		// Not a JSON object at all.
		{"empty", "", bad, ""},
		{"blank", " \n ", bad, ""},
		{"array", `[{"type":"send"}]`, bad, ""},
		{"string", `"send"`, bad, ""},
		{"number", `42`, bad, ""},
		{"null", `null`, bad, ""},
		{"truncated", `{"type":"send","id":"s1"`, bad, ""},
		{"trailing garbage", `{"type":"list_conversations"} x`, bad, ""},
		{"two objects", `{"type":"typing"}{"type":"typing"}`, bad, ""},
		{"single quotes", `{'type':'send'}`, bad, ""},
		{"invalid UTF-8 in a string", "{\"type\":\"send\",\"id\":\"s1\",\"body\":\"\xff\xfe\"}", bad, ""},
		{"invalid UTF-8 outside strings", "{\"type\":\"send\"}\xc0", bad, ""},
		{"NUL before the object", "\x00{\"type\":\"send\"}", bad, ""},
		// Types.
		{"no type", `{"id":"x1"}`, invalid, "x1"},
		{"empty type", `{"type":"","id":"x1"}`, invalid, "x1"},
		{"unknown type", `{"type":"launch","id":"x2"}`, unknown, "x2"},
		{"server frame type", `{"type":"ack","id":"x2"}`, unknown, "x2"},
		{"type of the wrong case", `{"type":"SEND","id":"x2"}`, unknown, "x2"},
		{"long unknown type", `{"type":"` + strings.Repeat("t", 10000) + `","id":"x2"}`, unknown, "x2"},
		{"type is a number", `{"type":7,"id":"x3"}`, invalid, "x3"},
		// Wrong field types and out-of-range numbers.
		{"id is a number", `{"type":"typing","id":7,"conversationId":"c1"}`, invalid, ""},
		{"conversationId is a number", send(`"conversationId":12,"clientMsgId":"` + testUUID + `","body":"b"`), invalid, "s1"},
		{"body is an object", send(okSend + `,"body":{"text":"b"}`), invalid, "s1"},
		{"members is a string", `{"type":"create_group","id":"g1","members":"bob"}`, invalid, "g1"},
		{"member is a number", `{"type":"create_group","id":"g1","members":["bob",5]}`, invalid, "g1"},
		{"since is a list", `{"type":"sync","id":"y1","since":["c1"]}`, invalid, "y1"},
		{"since value is a string", `{"type":"sync","id":"y1","since":{"c1":"3"}}`, invalid, "y1"},
		{"hideReceipts is a string", `{"type":"set_privacy","id":"p1","hideReceipts":"yes"}`, invalid, "p1"},
		{"seq overflows float64", `{"type":"read","id":"r1","conversationId":"c1","seq":1e400}`, invalid, "r1"},
		{"seq overflows int64", `{"type":"read","id":"r1","conversationId":"c1","seq":99999999999999999999}`, invalid, "r1"},
		{"seq is fractional", `{"type":"read","id":"r1","conversationId":"c1","seq":1.5}`, invalid, "r1"},
		{"seq is a string", `{"type":"read","id":"r1","conversationId":"c1","seq":"1"}`, invalid, "r1"},
		{"limit overflows", `{"type":"history","id":"h1","conversationId":"c1","limit":99999999999999999999}`, invalid, "h1"},
		{"fraction overflows", `{"type":"history","id":"h1","conversationId":"c1","fraction":1e400}`, invalid, "h1"},
		{"replyTo overflows", send(okSend + `,"body":"b","replyTo":1e19`), invalid, "s1"},
		// Values out of range.
		{"negative seq", `{"type":"read","id":"r1","conversationId":"c1","seq":-1}`, invalid, "r1"},
		{"zero seq", `{"type":"receipts","id":"r1","conversationId":"c1","seq":0}`, invalid, "r1"},
		{"negative replyTo", send(okSend + `,"body":"b","replyTo":-1`), invalid, "s1"},
		{"negative before", `{"type":"history","id":"h1","conversationId":"c1","before":-1}`, invalid, "h1"},
		{"negative limit", `{"type":"history","id":"h1","conversationId":"c1","limit":-1}`, invalid, "h1"},
		{"fraction above 1", `{"type":"history","id":"h1","conversationId":"c1","fraction":1.5}`, invalid, "h1"},
		{"two anchors", `{"type":"history","id":"h1","conversationId":"c1","before":5,"after":1}`, invalid, "h1"},
		{"negative since", `{"type":"sync","id":"y1","since":{"c1":-1}}`, invalid, "y1"},
		{"empty body", send(okSend + `,"body":""`), invalid, "s1"},
		{"body too large", send(okSend + `,"body":"` + strings.Repeat("x", protocol.MaxBodyBytes+1) + `"`), tooBig, "s1"},
		{"name too long", `{"type":"create_group","id":"g1","name":"` + strings.Repeat("n", protocol.MaxNameBytes+1) + `"}`, invalid, "g1"},
		{"too many members", `{"type":"create_group","id":"g1","members":[` + strings.Repeat(`"m",`, protocol.MaxGroupMembers) + `"m"]}`, invalid, "g1"},
		{"no members to add", `{"type":"add_members","id":"a1","conversationId":"c1","members":[]}`, invalid, "a1"},
		{"no privacy setting", `{"type":"set_privacy","id":"p1"}`, invalid, "p1"},
		{"delivered without seq", `{"type":"delivered","id":"d1","conversationId":"c1"}`, invalid, "d1"},
		{"presence of nobody", `{"type":"presence","id":"p2","userIds":[]}`, invalid, "p2"},
		{"presence of a malformed id", `{"type":"presence","id":"p2","userIds":["a b"]}`, invalid, "p2"},
		{"presence of too many", `{"type":"presence","id":"p2","userIds":[` + strings.Repeat(`"u",`, protocol.MaxPresenceUsers) + `"u"]}`, invalid, "p2"},
		{"negative version", `{"type":"sync","id":"y1","versions":{"c1":-1}}`, invalid, "y1"},
		{"version key no id", `{"type":"sync","id":"y1","versions":{"c.1":1}}`, invalid, "y1"},
		{"edit without seq", `{"type":"edit_message","id":"e1","conversationId":"c1","body":"b"}`, invalid, "e1"},
		{"edit with an empty body", `{"type":"edit_message","id":"e1","conversationId":"c1","seq":1,"body":""}`, invalid, "e1"},
		{"edit too large", `{"type":"edit_message","id":"e1","conversationId":"c1","seq":1,"body":"` + strings.Repeat("x", protocol.MaxBodyBytes+1) + `"}`, tooBig, "e1"},
		{"react without emoji", `{"type":"react","id":"e2","conversationId":"c1","seq":1}`, invalid, "e2"},
		{"react with a space", `{"type":"react","id":"e2","conversationId":"c1","seq":1,"emoji":"a b"}`, invalid, "e2"},
		{"react with a control character", `{"type":"react","id":"e2","conversationId":"c1","seq":1,"emoji":"a\u0007"}`, invalid, "e2"},
		{"react with a long emoji", `{"type":"react","id":"e2","conversationId":"c1","seq":1,"emoji":"` + strings.Repeat("x", protocol.MaxEmojiBytes+1) + `"}`, invalid, "e2"},
		{"remove is a string", `{"type":"react","id":"e2","conversationId":"c1","seq":1,"emoji":"x","remove":"yes"}`, invalid, "e2"},
		{"reactions without conversation", `{"type":"reactions","id":"e3","seq":1}`, invalid, "e3"},
		{"focus on a malformed id", `{"type":"focus","id":"f1","conversationId":"c 1"}`, invalid, "f1"},
		{"set_name without a name", `{"type":"set_name","id":"n1"}`, invalid, "n1"},
		{"set_name with a blank name", `{"type":"set_name","id":"n1","name":"   "}`, invalid, "n1"},
		{"set_name starting with a dot", `{"type":"set_name","id":"n1","name":".mary"}`, invalid, "n1"},
		{"set_name with a control character", `{"type":"set_name","id":"n1","name":"ma\u0007ry"}`, invalid, "n1"},
		{"set_name with a direction mark", `{"type":"set_name","id":"n1","name":"ma\u202ery"}`, invalid, "n1"},
		{"set_name too long", `{"type":"set_name","id":"n1","name":"` + strings.Repeat("é", protocol.MaxDisplayNameRunes+1) + `"}`, invalid, "n1"},
		{"find_users without a query", `{"type":"find_users","id":"n2","query":" "}`, invalid, "n2"},
		{"find_users with a long query", `{"type":"find_users","id":"n2","query":"` + strings.Repeat("q", protocol.MaxDisplayNameRunes+1) + `"}`, invalid, "n2"},
		{"profiles of nobody", `{"type":"profiles","id":"n3","userIds":[]}`, invalid, "n3"},
		{"profiles of too many", `{"type":"profiles","id":"n3","userIds":[` + strings.Repeat(`"u",`, protocol.MaxPresenceUsers) + `"u"]}`, invalid, "n3"},
		// Missing ids.
		{"send without conversation", send(`"clientMsgId":"` + testUUID + `","body":"b"`), invalid, "s1"},
		{"send without clientMsgId", send(`"conversationId":"c1","body":"b"`), invalid, "s1"},
		{"send with a clientMsgId that is no uuid", send(`"conversationId":"c1","clientMsgId":"1","body":"b"`), invalid, "s1"},
		{"read without conversation", `{"type":"read","id":"r1","seq":3}`, invalid, "r1"},
		{"open_dm without user", `{"type":"open_dm","id":"d1"}`, invalid, "d1"},
		{"remove_member without user", `{"type":"remove_member","id":"m1","conversationId":"c1"}`, invalid, "m1"},
		{"typing without conversation", `{"type":"typing","id":"t1"}`, invalid, "t1"},
		{"block_user without user", `{"type":"block_user","id":"b1"}`, invalid, "b1"},
		{"block_user with an empty user", `{"type":"block_user","id":"b1","userId":""}`, invalid, "b1"},
		{"unblock_user without user", `{"type":"unblock_user","id":"b2"}`, invalid, "b2"},
		{"block_user user is a number", `{"type":"block_user","id":"b1","userId":7}`, invalid, "b1"},
		{"block_user user is a list", `{"type":"block_user","id":"b1","userId":["bob"]}`, invalid, "b1"},
		// Ids become NATS subject tokens: separators and wildcards are refused.
		{"conversation with a dot", send(`"conversationId":"c1.msg","clientMsgId":"` + testUUID + `","body":"b"`), invalid, "s1"},
		{"conversation wildcard", `{"type":"typing","id":"t1","conversationId":">"}`, invalid, "t1"},
		{"conversation star", `{"type":"history","id":"h1","conversationId":"*"}`, invalid, "h1"},
		{"conversation with a space", `{"type":"typing","id":"t1","conversationId":"c 1"}`, invalid, "t1"},
		{"conversation too long", `{"type":"typing","id":"t1","conversationId":"` + strings.Repeat("c", protocol.MaxIDBytes+1) + `"}`, invalid, "t1"},
		{"member wildcard", `{"type":"create_group","id":"g1","members":["bob","*"]}`, invalid, "g1"},
		{"dm user wildcard", `{"type":"open_dm","id":"d1","userId":"chat.user.>"}`, invalid, "d1"},
		{"blocked user wildcard", `{"type":"block_user","id":"b1","userId":"*"}`, invalid, "b1"},
		{"unblocked user with a dot", `{"type":"unblock_user","id":"b2","userId":"bob.evt"}`, invalid, "b2"},
		{"blocked user too long", `{"type":"block_user","id":"b1","userId":"` + strings.Repeat("u", protocol.MaxIDBytes+1) + `"}`, invalid, "b1"},
		{"since key wildcard", `{"type":"sync","id":"y1","since":{">":0}}`, invalid, "y1"},
		{"request id too long", `{"type":"list_conversations","id":"` + strings.Repeat("i", protocol.MaxIDBytes+1) + `"}`, invalid, ""},
		{"request id too long and bad field", `{"type":"read","id":"` + strings.Repeat("i", protocol.MaxIDBytes+1) + `","seq":"x"}`, invalid, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := protocol.DecodeClientFrame([]byte(tc.frame))
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T); want a *protocol.Error", err, err)
			}
			if pe.Code != tc.code || f.ID != tc.id {
				t.Fatalf("code %q id %q (%v); want code %q id %q", pe.Code, f.ID, err, tc.code, tc.id)
			}
			if pe.Retryable {
				t.Fatal("a malformed frame is marked retryable")
			}
			if len(pe.Message) > 200 {
				t.Fatalf("error message of %d bytes echoes the frame", len(pe.Message))
			}
		})
	}
}

func TestAsErrorHidesInternalErrors(t *testing.T) {
	pe := protocol.AsError(errors.New("mongo: connection string mongodb://user:password@db"))
	if pe.Code != protocol.CodeInternal || strings.Contains(pe.Message, "password") {
		t.Fatalf("internal error leaks: %+v", pe)
	}
	wrapped := protocol.AsError(errors.Join(errors.New("context"), protocol.Errorf(protocol.CodeNotMember, "no")))
	if wrapped.Code != protocol.CodeNotMember {
		t.Fatalf("a wrapped protocol error became %q", wrapped.Code)
	}
	f := protocol.ErrorFrame("r9", &protocol.Error{Code: protocol.CodeUnavailable, Message: "retry", Retryable: true})
	data, err := protocol.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back["type"] != "error" || back["id"] != "r9" || back["code"] != "unavailable" || back["retryable"] != true {
		t.Fatalf("error frame on the wire: %s", data)
	}
}

func TestPushFromEncodedMessage(t *testing.T) {
	m := protocol.Message{ConversationID: "c1", Seq: 7, SenderID: "alice", Kind: protocol.KindText, Body: `"quoted" <b>`}
	push, err := protocol.EncodeMessagePush(m)
	if err != nil {
		t.Fatal(err)
	}
	var f protocol.ServerFrame
	if err := json.Unmarshal(push, &f); err != nil {
		t.Fatalf("push is not JSON: %s: %v", push, err)
	}
	if f.Type != protocol.TypeMessage || f.ConversationID != "c1" || f.Seq != 7 || f.SenderID != "alice" || f.Body != m.Body {
		t.Fatalf("push decodes to %+v", f)
	}
}

func head(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// TestQuoteText: a quote is the body when short, else its start cut at a character boundary and
// marked with an ellipsis, never longer than QuoteBytes.
func TestQuoteText(t *testing.T) {
	if got := protocol.QuoteText("short"); got != "short" {
		t.Errorf("QuoteText(short) = %q", got)
	}
	for _, body := range []string{strings.Repeat("x", 1000), strings.Repeat("é", 300), strings.Repeat("😀", 100)} {
		got := protocol.QuoteText(body)
		if len(got) > protocol.QuoteBytes || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) ||
			!strings.HasPrefix(body, strings.TrimSuffix(got, "…")) {
			t.Errorf("QuoteText(%d bytes of %q) = %d bytes %q...; want a valid prefix of at most %d bytes ending in …",
				len(body), body[:4], len(got), got[:8], protocol.QuoteBytes)
		}
	}
}

// TestDisplayName: names in any script are kept (white space made single), and what could hide
// or fake text is refused.
func TestDisplayName(t *testing.T) {
	for raw, want := range map[string]string{
		"José":            "José",
		"  Mary   Jane  ": "Mary Jane",
		"Zoë":             "Zoë",
		"李雷":              "李雷",
		"שרה כהן":         "שרה כהן",
		"O'Brien Jr.":     "O'Brien Jr.",
		"3rd_eye-x":       "3rd_eye-x",
		"Zoe\u0308":       "Zoe\u0308", // a combining mark
	} {
		if got, err := protocol.DisplayName(raw); err != nil || got != want {
			t.Errorf("DisplayName(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, bad := range []string{"", "  ", "_x", "-x", "'x", "a!", "a\u200bb", "a\u202eb", "a\x00b", "😀", strings.Repeat("李", 65)} {
		if got, err := protocol.DisplayName(bad); !errors.Is(err, protocol.ErrBadName) {
			t.Errorf("DisplayName(%q) = %q, %v; want ErrBadName", bad, got, err)
		}
	}
}
