package protocol_test

import (
	"strings"
	"testing"

	"github.com/chatd/chatd/protocol"
)

const testToken = "c1_0123456789abcdef0123456789abcdef"

// TestGroupFrames: the moderate, invite and report frames as PROTOCOL.md documents them, accepted
// or refused as invalid_field.
func TestGroupFrames(t *testing.T) {
	long := strings.Repeat("x", protocol.MaxTopicBytes+1)
	for _, tc := range []struct {
		frame string
		ok    bool
	}{
		{`{"type":"moderate","conversationId":"c1","action":"promote","userId":"bob"}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"promote"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"mute","userId":"bob","seconds":600}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"mute","userId":"bob"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"rename","name":"Trip"}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"rename"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"set_topic","topic":""}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"set_topic","topic":"` + long + `"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"announcement","enabled":false}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"announcement"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"slow_mode","seconds":0}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"slow_mode","seconds":86401}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"pin","seq":3}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"pin"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"create_invite","seconds":3600,"maxUses":10}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"create_invite","maxUses":-1}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"revoke_invite","token":"` + testToken + `"}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"revoke_invite","token":"c1_xyz"}`, false},
		{`{"type":"moderate","conversationId":"c1","action":"dismiss_report","reportId":"r1"}`, true},
		{`{"type":"moderate","conversationId":"c1","action":"launch"}`, false},
		{`{"type":"moderate","conversationId":"c1"}`, false},
		{`{"type":"invite_preview","token":"` + testToken + `"}`, true},
		{`{"type":"join_invite","token":"` + testToken + `"}`, true},
		{`{"type":"join_invite","token":"c1"}`, false},
		{`{"type":"report","conversationId":"c1","seq":4,"reason":"spam"}`, true},
		{`{"type":"report","conversationId":"c1","seq":4}`, false},
		{`{"type":"list_invites","conversationId":"c1"}`, true},
		{`{"type":"list_reports"}`, false},
	} {
		_, err := protocol.DecodeClientFrame([]byte(tc.frame))
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.frame, err)
		}
		if pe, isErr := err.(*protocol.Error); !tc.ok && (!isErr || pe.Code != protocol.CodeInvalidField) {
			t.Errorf("%s: %v; want invalid_field", tc.frame, err)
		}
	}
	if got := protocol.InviteConversation(testToken); got != "c1" {
		t.Errorf("InviteConversation(%s) = %s", testToken, got)
	}
}
