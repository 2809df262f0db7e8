package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/chatd/chatd/push"
)

func TestPrintedVAPIDKeysAreAPair(t *testing.T) {
	var out bytes.Buffer
	if err := printNewKeys(&out); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	cfg := push.Config{VAPIDPublicKey: env["CHAT_VAPID_PUBLIC_KEY"], VAPIDPrivateKey: env["CHAT_VAPID_PRIVATE_KEY"]}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("printed %q: %v", out.String(), err)
	}
}

func TestGeneratedVAPIDKeysSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	p := pushOptions{enabled: true}
	first, err := p.config(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.config(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.VAPIDPublicKey == "" || again.VAPIDPublicKey != first.VAPIDPublicKey || again.VAPIDPrivateKey != first.VAPIDPrivateKey {
		t.Fatalf("keys %q then %q; want one pair kept in the data directory", first.VAPIDPublicKey, again.VAPIDPublicKey)
	}
	if off, err := (pushOptions{}).config(dir); err != nil || off.VAPIDPublicKey != "" {
		t.Fatalf("push off: %+v, %v; want no keys", off, err)
	}
}
