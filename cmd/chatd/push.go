package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/chatd/chatd/push"
)

// pushOptions are the Web Push settings.
type pushOptions struct {
	printKeys             bool
	enabled               bool
	publicKey, privateKey string
	subject               string
	window                time.Duration
}

// register adds the Web Push flags to fs.
func (p *pushOptions) register(fs *flag.FlagSet) error {
	enabled, err := envBool("CHAT_PUSH", true)
	if err != nil {
		return err
	}
	window, err := envDuration("CHAT_PUSH_WINDOW", push.DefaultWindow)
	if err != nil {
		return err
	}
	fs.BoolVar(&p.enabled, "push", enabled, "send Web Push notifications to devices of people with no live connection (CHAT_PUSH)")
	fs.StringVar(&p.publicKey, "vapid-public-key", env("CHAT_VAPID_PUBLIC_KEY", ""), "VAPID public key, base64url; the same on every node; empty: a pair generated and kept in the data directory (CHAT_VAPID_PUBLIC_KEY)")
	fs.StringVar(&p.privateKey, "vapid-private-key", env("CHAT_VAPID_PRIVATE_KEY", ""), "VAPID private key, base64url, with -vapid-public-key (CHAT_VAPID_PRIVATE_KEY)")
	fs.StringVar(&p.subject, "vapid-subject", env("CHAT_VAPID_SUBJECT", push.DefaultSubject), "contact push services see in each push, a mailto: or https: URL (CHAT_VAPID_SUBJECT)")
	fs.BoolVar(&p.printKeys, "print-vapid-keys", false, "print a new VAPID key pair as CHAT_VAPID_PUBLIC_KEY and CHAT_VAPID_PRIVATE_KEY lines, and exit")
	fs.DurationVar(&p.window, "push-window", window, "messages of a conversation within this time become one notification (CHAT_PUSH_WINDOW)")
	return nil
}

// printNewKeys writes a new VAPID key pair to w as environment lines, for a cluster's nodes.
func printNewKeys(w io.Writer) error {
	pub, priv, err := push.GenerateVAPIDKeys()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "CHAT_VAPID_PUBLIC_KEY=%s\nCHAT_VAPID_PRIVATE_KEY=%s\n", pub, priv)
	return err
}

// config is the notifier's configuration: off, the configured key pair, or the pair kept in the
// data directory.
func (p pushOptions) config(dataDir string) (push.Config, error) {
	if !p.enabled {
		return push.Config{}, nil
	}
	cfg := push.Config{VAPIDPublicKey: p.publicKey, VAPIDPrivateKey: p.privateKey, Subject: p.subject, Window: p.window}
	if p.publicKey == "" && p.privateKey == "" {
		keys, err := devVAPIDKeys(dataDir)
		if err != nil {
			return cfg, err
		}
		cfg.VAPIDPublicKey, cfg.VAPIDPrivateKey = keys.PublicKey, keys.PrivateKey
	}
	return cfg, cfg.Validate()
}

// vapidKeys is the file a generated VAPID key pair is kept in.
type vapidKeys struct {
	PublicKey  string `json:"publicKey"`
	PrivateKey string `json:"privateKey"`
}

// devVAPIDKeys returns the VAPID key pair kept in the data directory, generating it the first
// time, so that the browsers' subscriptions (bound to the public key) survive a restart.
func devVAPIDKeys(dataDir string) (vapidKeys, error) {
	path := filepath.Join(dataDir, "vapid-keys.json")
	var keys vapidKeys
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &keys); err != nil {
			return keys, fmt.Errorf("read %s: %w", path, err)
		}
		return keys, nil
	case !errors.Is(err, os.ErrNotExist):
		return keys, fmt.Errorf("read VAPID keys: %w", err)
	}
	if keys.PublicKey, keys.PrivateKey, err = push.GenerateVAPIDKeys(); err != nil {
		return keys, err
	}
	if data, err = json.Marshal(keys); err != nil {
		return keys, fmt.Errorf("encode VAPID keys: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return keys, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return keys, fmt.Errorf("write VAPID keys: %w", err)
	}
	return keys, nil
}
