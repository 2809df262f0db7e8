package push

import (
	"crypto/ecdh"
	"encoding/base64"
	"fmt"

	webpush "github.com/SherClockHolmes/webpush-go"
)

// GenerateVAPIDKeys makes a new VAPID key pair: a P-256 private key (32 bytes) and its
// uncompressed public key (65 bytes), base64url without padding as pages and push services use
// them.
func GenerateVAPIDKeys() (publicKey, privateKey string, err error) {
	privateKey, publicKey, err = webpush.GenerateVAPIDKeys()
	if err != nil {
		return "", "", fmt.Errorf("generate VAPID keys: %w", err)
	}
	return publicKey, privateKey, nil
}

// checkVAPIDKeys reports a key pair that is not a P-256 pair of the right encoding.
func checkVAPIDKeys(publicKey, privateKey string) error {
	priv, err := base64.RawURLEncoding.DecodeString(privateKey)
	if err != nil {
		return fmt.Errorf("push: the VAPID private key is not base64url: %w", err)
	}
	key, err := ecdh.P256().NewPrivateKey(priv)
	if err != nil {
		return fmt.Errorf("push: the VAPID private key: %w", err)
	}
	if base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()) != publicKey {
		return fmt.Errorf("push: the VAPID public key does not belong to the private key")
	}
	return nil
}
