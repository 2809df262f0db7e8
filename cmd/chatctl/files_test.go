package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestSendFilesAndDownload: send -file (twice) uploads both files and sends them in one message;
// history shows them; download writes a file's bytes, and the photo comes back without its
// EXIF; a file of a conversation bob is not in is refused with status 1.
func TestSendFilesAndDownload(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob, carol := newUser(t, n.URL()), newUser(t, n.URL()), newUser(t, n.URL())
	alice.must("login", "alice")
	bob.must("login", "bob")
	carol.must("login", "carol")
	dm := alice.must("dm", "bob")

	dir := t.TempDir()
	notes, photo := filepath.Join(dir, "notes.txt"), filepath.Join(dir, "photo.jpg")
	if err := os.WriteFile(notes, []byte("the plan, in writing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(photo, testenv.PhotoWithGPS(t, 30, 10), 0o600); err != nil {
		t.Fatal(err)
	}
	if seq := alice.must("send", "-file", notes, "-file", photo, dm, "both"); seq != "1" {
		t.Fatalf("send with files acked seq %q, want 1", seq)
	}
	plain := bob.must("history", dm)
	if !strings.Contains(plain, "alice: both") || !strings.Contains(plain, " notes.txt (text/plain; charset=utf-8, 21 bytes)") ||
		!strings.Contains(plain, " photo.jpg (image/jpeg, ") || !strings.Contains(plain, ", 10×30)") {
		t.Fatalf("history does not show the files:\n%s", plain)
	}
	var page struct {
		Messages []protocol.Message `json:"messages"`
	}
	decode(t, bob.must("history", "-json", dm), &page)
	files := page.Messages[0].Attachments
	if len(files) != 2 {
		t.Fatalf("the message carries %+v", files)
	}
	out := filepath.Join(t.TempDir(), "got.txt")
	bob.must("download", files[0].ID, out)
	if got, err := os.ReadFile(out); err != nil || string(got) != "the plan, in writing\n" {
		t.Fatalf("downloaded %q, %v", got, err)
	}
	if jpg := bob.must("download", files[1].ID); strings.Contains(jpg, "Exif") || !bytes.HasPrefix([]byte(jpg), []byte{0xFF, 0xD8}) {
		t.Fatal("the photo downloaded to stdout is no JPEG, or kept its EXIF")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, errOut, code := carol.run(ctx, "", "download", files[0].ID); code != exitFailure || !strings.Contains(errOut, "403") {
		t.Fatalf("carol's download: exit %d, %s; want 1 with 403", code, errOut)
	}
}
