package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/promtest"
)

// The tests in this file prove attachments end to end: uploads over HTTP on one node, sends
// that attach them through the conversations' owners, downloads on another node, all on a real
// store, real NATS and a real blob store (an S3 server, versitygw, or a directory).

// fileSetup is two nodes sharing a store, NATS and a blob store; alice and carol on node a,
// bob on node b; alice and bob in a group carol is not in.
type fileSetup struct {
	a, b              *testenv.Node
	blobs             blob.Store
	alice, bob, carol *client.Conn
	tokens            map[string]string
	group             protocol.Conversation
	ctx               context.Context
	aliceURL, bobURL  string
	carolURL          string
}

// startFileNodes starts the setup, on an S3 bucket of a real S3 server when s3 is set, else on
// the env's directory; tune changes the attachments' configuration.
func startFileNodes(t *testing.T, s3 bool, tune func(*attach.Config)) *fileSetup {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	env := testenv.NewEnv(t)
	blobs := env.Blobs
	if s3 {
		srv := testenv.StartS3(t)
		store, err := blob.OpenS3(ctx, blob.S3Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Region: srv.Region,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
		if err != nil {
			t.Fatalf("open s3: %v", err)
		}
		t.Cleanup(store.Close)
		blobs = store
	}
	s := &fileSetup{blobs: blobs, tokens: make(map[string]string), ctx: ctx}
	nodes := make([]*testenv.Node, 2)
	for i := range nodes {
		cfg := env.NodeConfig()
		cfg.NodeID = fmt.Sprintf("files-%c", 'a'+i)
		cfg.Sequencer.Partitions = blockPartitions
		cfg.Blobs = blobs
		if tune != nil {
			tune(&cfg.Files)
		}
		nodes[i] = testenv.StartNode(t, cfg)
	}
	s.a, s.b = nodes[0], nodes[1]
	s.aliceURL, s.bobURL, s.carolURL = s.a.URL(), s.b.URL(), s.a.URL()
	s.alice, s.tokens["alice"] = testenv.ConnectWithToken(t, s.aliceURL, "alice")
	s.bob, s.tokens["bob"] = testenv.ConnectWithToken(t, s.bobURL, "bob")
	s.carol, s.tokens["carol"] = testenv.ConnectWithToken(t, s.carolURL, "carol")
	var err error
	if s.group, err = s.alice.CreateGroup(ctx, "trip", []string{"bob"}); err != nil {
		t.Fatalf("create group: %v", err)
	}
	return s
}

// upload uploads data as name into conv with who's token on base, with its size known.
func (s *fileSetup) upload(t *testing.T, base, who, conv, name string, data []byte) (client.Upload, error) {
	t.Helper()
	return client.UploadFile(s.ctx, nil, base, s.tokens[who], conv, name, bytes.NewReader(data), int64(len(data)))
}

// mustUpload is upload that fails the test on a refusal.
func (s *fileSetup) mustUpload(t *testing.T, who, conv, name string, data []byte) client.Upload {
	t.Helper()
	up, err := s.upload(t, s.aliceURL, who, conv, name, data)
	if err != nil {
		t.Fatalf("upload %s: %v", name, err)
	}
	return up
}

// objects lists the keys of every object in the blob store.
func (s *fileSetup) objects(t *testing.T) []string {
	t.Helper()
	var keys []string
	for info, err := range s.blobs.ListOlder(s.ctx, "files/", time.Now().Add(time.Hour)) {
		if err != nil {
			t.Fatalf("list objects: %v", err)
		}
		keys = append(keys, info.Key)
	}
	return keys
}

// objectsOf lists the keys of an upload's objects (the file, and a thumbnail).
func (s *fileSetup) objectsOf(t *testing.T, uploadID string) []string {
	t.Helper()
	var keys []string
	for _, k := range s.objects(t) {
		if strings.Contains(k, uploadID) {
			keys = append(keys, k)
		}
	}
	return keys
}

// get fetches a URL of base with no headers but the ones given (an <img> sends none).
func get(t *testing.T, ctx context.Context, rawURL string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", rawURL, err)
	}
	return resp, body
}

// statusOf gets a URL with no headers and returns its status, without reading the body.
func statusOf(t *testing.T, ctx context.Context, rawURL string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get %s: %v", rawURL, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// linkOf asks base for who's signed link of a file, failing the test if there is none.
func (s *fileSetup) linkOf(t *testing.T, base, who, id string) client.Link {
	t.Helper()
	links, err := client.FileLinks(s.ctx, nil, base, s.tokens[who], []string{id})
	if err != nil {
		t.Fatalf("links: %v", err)
	}
	l, ok := links[id]
	if !ok {
		t.Fatalf("%s got no link to file %s", who, id)
	}
	return l
}

// wantFileHeaders checks the headers every file response carries, and its disposition.
func wantFileHeaders(t *testing.T, what string, resp *http.Response, disposition string) {
	t.Helper()
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q", what, got)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != "default-src 'none'; sandbox" {
		t.Errorf("%s: Content-Security-Policy %q", what, got)
	}
	if got := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(got, disposition+";") {
		t.Errorf("%s: Content-Disposition %q; want %s", what, got, disposition)
	}
}

// waitMessageWithFiles waits for c's push of a message with attachments in conv.
func waitMessageWithFiles(t *testing.T, c *client.Conn, conv string) protocol.ServerFrame {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case f := <-c.Pushes():
			if f.Type == protocol.TypeMessage && f.ConversationID == conv && len(f.Attachments) > 0 {
				return f
			}
		case <-timeout:
			t.Fatal("no message with attachments arrived within 30s")
		}
	}
}

// TestFilesAcrossNodesOnS3: alice uploads a photo with a GPS position on node a into an S3
// bucket, sends it; bob on node b gets the message with the photo's size and thumbnail, downloads
// it through a signed link with no headers, and it has no EXIF; carol, not a member, gets no link
// and 403; a forged link is 403; a 30 MiB upload is 413 and leaves no object; after alice deletes
// the message for everyone, the file is 404 and its objects are gone from the bucket.
func TestFilesAcrossNodesOnS3(t *testing.T) {
	s := startFileNodes(t, true, nil)
	ctx := s.ctx
	up := s.mustUpload(t, "alice", s.group.ID, "beach.jpg", testenv.PhotoWithGPS(t, 40, 20))
	if up.Type != "image/jpeg" || up.Width != 20 || up.Height != 40 || !up.Thumbnail {
		t.Fatalf("upload answered %+v; want an image/jpeg of 20×40 (turned upright) with a thumbnail", up)
	}
	if _, err := s.alice.SendFiles(ctx, s.group.ID, "look", []string{up.ID}); err != nil {
		t.Fatalf("send with the photo: %v", err)
	}
	m := waitMessageWithFiles(t, s.bob, s.group.ID)
	want := protocol.Attachment{ID: up.ID, Name: "beach.jpg", Size: up.Size, Type: "image/jpeg", Width: 20, Height: 40, Thumbnail: true}
	if m.Body != "look" || len(m.Attachments) != 1 || m.Attachments[0] != want {
		t.Fatalf("bob got %q with %+v; want look with %+v", m.Body, m.Attachments, want)
	}
	page := blockRequest(t, s.bob, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: s.group.ID})
	if last := page.Messages[len(page.Messages)-1]; len(last.Attachments) != 1 || last.Attachments[0] != want {
		t.Fatalf("history on node b shows %+v", last.Attachments)
	}

	link := s.linkOf(t, s.bobURL, "bob", up.ID)
	resp, body := get(t, ctx, s.bobURL+link.URL, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("bob's signed link: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	wantFileHeaders(t, "photo", resp, "inline")
	var lat []byte
	for _, v := range testenv.GPSLatitude {
		lat = binary.LittleEndian.AppendUint32(lat, v)
	}
	if bytes.Contains(body, []byte("Exif")) || bytes.Contains(body, lat) {
		t.Error("the downloaded photo still carries its EXIF or GPS position")
	}
	if img, err := jpeg.Decode(bytes.NewReader(body)); err != nil || img.Bounds().Dx() != 20 || img.Bounds().Dy() != 40 {
		t.Fatalf("downloaded photo: %v", err)
	}
	if resp, _ := get(t, ctx, s.bobURL+link.Thumbnail, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("thumbnail: %d", resp.StatusCode)
	}

	// Carol, not a member: no link, 403 with her token, 403 presenting bob's link as herself.
	if links, err := client.FileLinks(ctx, nil, s.carolURL, s.tokens["carol"], []string{up.ID}); err != nil || len(links) != 0 {
		t.Fatalf("carol's links: %v, %v; want none", links, err)
	}
	if _, err := client.Download(ctx, nil, s.carolURL, s.tokens["carol"], up.ID); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("carol's download: %v; want 403", err)
	}
	if resp, _ := get(t, ctx, s.aliceURL+link.URL, bearer(s.tokens["carol"])); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's link with carol's token: %d; want 403", resp.StatusCode)
	}
	forged := strings.Replace(link.URL, "u=bob", "u=carol", 1)
	if resp, _ := get(t, ctx, s.aliceURL+forged, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a link with another user put in: %d; want 403", resp.StatusCode)
	}

	// 30 MiB, past the default 25 MiB: refused at once when its length says so, and after 25 MiB
	// when it streams without one; neither leaves an object in the bucket.
	before := len(s.objects(t))
	const tooBig = 30 << 20
	if _, err := client.UploadFile(ctx, nil, s.aliceURL, s.tokens["alice"], s.group.ID, "big.bin", io.LimitReader(&testenv.PatternReader{}, tooBig), tooBig); !isStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("a 30 MiB upload: %v; want 413", err)
	}
	if _, err := client.UploadFile(ctx, nil, s.aliceURL, s.tokens["alice"], s.group.ID, "big.bin", io.LimitReader(&testenv.PatternReader{}, tooBig), -1); !isStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("a 30 MiB upload without a length: %v; want 413", err)
	}
	if after := len(s.objects(t)); after != before {
		t.Fatalf("the refused 30 MiB uploads left %d objects", after-before)
	}

	if len(s.objectsOf(t, up.ID)) != 2 {
		t.Fatalf("objects of the photo: %v; want the file and its thumbnail", s.objectsOf(t, up.ID))
	}
	blockRequest(t, s.alice, protocol.ClientFrame{Type: protocol.TypeDeleteMessage, ConversationID: s.group.ID, Seq: m.Seq})
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		// The status only: a download that raced with the deletion is cut short, and that is
		// not what is waited for.
		if status := statusOf(t, ctx, s.bobURL+link.URL); status != http.StatusNotFound {
			return fmt.Errorf("the deleted message's photo answers %d, not 404", status)
		}
		if keys := s.objectsOf(t, up.ID); len(keys) > 0 {
			return fmt.Errorf("objects %v still in the bucket", keys)
		}
		return nil
	})

	// Counted on node a, where the uploads were: one stored, one refused while it streamed (the
	// one whose length was refused before it reached the attachments is not); the deletion on
	// whichever node owns the group.
	a := promtest.URL(s.a.AdminURL() + "/metrics")
	if got := promtest.Read(t, a, "chatd_uploads_total").Value; got != 1 {
		t.Errorf("chatd_uploads_total = %v, want 1", got)
	}
	if got := promtest.Read(t, a, "chatd_upload_refusals_total", "reason", "too_large").Value; got != 1 {
		t.Errorf("chatd_upload_refusals_total{reason=too_large} = %v, want 1", got)
	}
	// Counted once the record is gone too, a moment after the objects.
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		deleted := 0.0
		for _, n := range []*testenv.Node{s.a, s.b} {
			deleted += promtest.Read(t, promtest.URL(n.AdminURL()+"/metrics"), "chatd_files_deleted_total", "reason", "message_deleted").Value
		}
		if deleted != 1 {
			return fmt.Errorf("chatd_files_deleted_total{reason=message_deleted} = %v over both nodes, want 1", deleted)
		}
		return nil
	})
}

// isStatus reports whether err is an HTTP API refusal with status.
func isStatus(err error, status int) bool {
	var he *client.HTTPError
	return errors.As(err, &he) && he.Status == status
}

// TestUploadRefusals: a non-member's upload is 403, and so is one into a DM across a block; a
// file past the size limit is 413 whether its Content-Length says so or it streams without one,
// bytes that claim to be an image and are none are 422, an empty name is 400, and past the hourly
// uploads a user gets 429 with Retry-After; none of them leaves an object behind. An HTML file
// named .png and an SVG with script are stored as what they are and only ever downloaded.
func TestUploadRefusals(t *testing.T) {
	s := startFileNodes(t, false, func(c *attach.Config) { c.MaxFileBytes = 1 << 20; c.UploadsPerHour = 4 })
	ctx := s.ctx
	if _, err := s.upload(t, s.carolURL, "carol", s.group.ID, "x.txt", []byte("hi")); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("carol's upload into a group she is not in: %v; want 403", err)
	}
	big := bytes.Repeat([]byte("a"), 2<<20)
	if _, err := s.upload(t, s.aliceURL, "alice", s.group.ID, "big.txt", big); !isStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("a 2 MiB upload with its length: %v; want 413", err)
	}
	if _, err := client.UploadFile(ctx, nil, s.aliceURL, s.tokens["alice"], s.group.ID, "big.txt", io.MultiReader(bytes.NewReader(big)), -1); !isStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("a 2 MiB upload streamed without a length: %v; want 413", err)
	}
	if _, err := s.upload(t, s.aliceURL, "alice", s.group.ID, "", []byte("hi")); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("an upload without a name: %v; want 400", err)
	}
	notImage := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 100)...)
	if _, err := s.upload(t, s.aliceURL, "alice", s.group.ID, "broken.png", notImage); !isStatus(err, http.StatusUnprocessableEntity) {
		t.Fatalf("bytes that start like a PNG and are none: %v; want 422", err)
	}
	dm, err := s.alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	blockRequest(t, s.bob, protocol.ClientFrame{Type: protocol.TypeBlockUser, UserID: "alice"})
	if _, err := s.upload(t, s.aliceURL, "alice", dm.ID, "x.txt", []byte("hi")); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("an upload into a DM across a block: %v; want 403", err)
	}
	if keys := s.objects(t); len(keys) != 0 {
		t.Fatalf("refused uploads left %v", keys)
	}

	html := s.mustUpload(t, "alice", s.group.ID, "cat.png", []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"))
	svg := s.mustUpload(t, "alice", s.group.ID, "logo.svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`))
	if !strings.HasPrefix(html.Type, "text/html") || svg.Type != "image/svg+xml" || html.Width != 0 || svg.Thumbnail {
		t.Fatalf("html stored as %+v, svg as %+v", html, svg)
	}
	if _, err := s.alice.SendFiles(ctx, s.group.ID, "", []string{html.ID, svg.ID}); err != nil {
		t.Fatalf("send the files: %v", err)
	}
	for _, up := range []client.Upload{html, svg} {
		resp, err := client.Download(ctx, nil, s.bobURL, s.tokens["bob"], up.ID)
		if err != nil {
			t.Fatalf("bob downloads %s: %v", up.Name, err)
		}
		resp.Body.Close()
		wantFileHeaders(t, up.Name, resp, "attachment")
	}

	for range 5 {
		if _, err = s.upload(t, s.aliceURL, "alice", s.group.ID, "n.txt", []byte("n")); err != nil {
			break
		}
	}
	var he *client.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("uploads past the hourly limit: %v; want 429", err)
	}
}

// TestOwnerRefusesUploadsItMayNotAttach: the owner refuses a send that names someone else's
// upload, an upload of another conversation, one attached to another message already, or one
// older than half the pending TTL; the refusals store nothing.
func TestOwnerRefusesUploadsItMayNotAttach(t *testing.T) {
	const ttl = 8 * time.Second
	s := startFileNodes(t, false, func(c *attach.Config) { c.PendingTTL, c.SweepSlot = ttl, time.Second })
	ctx := s.ctx
	dm, err := s.alice.OpenDM(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	up := s.mustUpload(t, "alice", s.group.ID, "a.txt", []byte("alice's"))
	_, err = s.bob.SendFiles(ctx, s.group.ID, "mine now", []string{up.ID})
	wantRefused(t, "bob sends alice's upload", err, protocol.CodeNotFound)
	_, err = s.alice.SendFiles(ctx, dm.ID, "elsewhere", []string{up.ID})
	wantRefused(t, "alice sends the group's upload into the dm", err, protocol.CodeNotFound)
	if _, err := s.alice.SendFiles(ctx, s.group.ID, "", []string{up.ID}); err != nil {
		t.Fatalf("alice sends her upload: %v", err)
	}
	_, err = s.alice.SendFiles(ctx, s.group.ID, "again", []string{up.ID})
	wantRefused(t, "the same upload in a second message", err, protocol.CodeNotFound)

	stale := s.mustUpload(t, "alice", s.group.ID, "late.txt", []byte("late"))
	// Past half the TTL by the server's clock, which stamped the upload.
	time.Sleep(time.Until(stale.CreatedAt.Add(ttl/2 + 500*time.Millisecond)))
	_, err = s.alice.SendFiles(ctx, s.group.ID, "late", []string{stale.ID})
	wantRefused(t, "an upload older than half the pending TTL", err, protocol.CodeNotFound)
	page := blockRequest(t, s.bob, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: s.group.ID})
	if n := len(page.Messages); n != 1 {
		t.Fatalf("the group holds %d messages; want only the one accepted send", n)
	}
}

// TestCollectorDeletesUnreferencedUploads: an upload no send attached is gone after the pending
// TTL, its objects with it, while an attached one stays.
func TestCollectorDeletesUnreferencedUploads(t *testing.T) {
	s := startFileNodes(t, false, func(c *attach.Config) {
		c.PendingTTL, c.SweepSlot, c.SweepInterval = 4*time.Second, time.Second, 200*time.Millisecond
	})
	ctx := s.ctx
	lonely := s.mustUpload(t, "alice", s.group.ID, "lonely.jpg", testenv.PhotoWithGPS(t, 8, 8))
	kept := s.mustUpload(t, "alice", s.group.ID, "kept.txt", []byte("kept"))
	if _, err := s.alice.SendFiles(ctx, s.group.ID, "", []string{kept.ID}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.objectsOf(t, lonely.ID)); n != 2 {
		t.Fatalf("the pending photo has %d objects; want 2", n)
	}
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		if keys := s.objectsOf(t, lonely.ID); len(keys) > 0 {
			return fmt.Errorf("the unreferenced upload's objects %v are still there", keys)
		}
		return nil
	})
	if _, err := client.Download(ctx, nil, s.aliceURL, s.tokens["alice"], lonely.ID); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("the collected upload: %v; want 404", err)
	}
	resp, err := client.Download(ctx, nil, s.bobURL, s.tokens["bob"], kept.ID)
	if err != nil {
		t.Fatalf("the attached file after the collection: %v", err)
	}
	resp.Body.Close()
}

// TestDeletingAnAccountDeletesItsFiles: deleting a conversation for oneself deletes no file;
// deleting alice's account deletes the files she sent, and with the DM it removes, bob's files
// in it.
func TestDeletingAnAccountDeletesItsFiles(t *testing.T) {
	s := startFileNodes(t, false, nil)
	ctx := s.ctx
	dm, err := s.bob.OpenDM(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	mine := s.mustUpload(t, "alice", s.group.ID, "mine.txt", []byte("alice's"))
	if _, err := s.alice.SendFiles(ctx, s.group.ID, "", []string{mine.ID}); err != nil {
		t.Fatal(err)
	}
	bobs, err := s.upload(t, s.bobURL, "bob", dm.ID, "bobs.txt", []byte("bob's"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bob.SendFiles(ctx, dm.ID, "", []string{bobs.ID}); err != nil {
		t.Fatal(err)
	}
	blockRequest(t, s.bob, protocol.ClientFrame{Type: protocol.TypeHideConversation, ConversationID: s.group.ID})
	if n := len(s.objects(t)); n != 2 {
		t.Fatalf("after bob deleted the group for himself: %d objects; want both files", n)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.aliceURL+"/api/account", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.tokens["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete alice's account: %v %v", resp, err)
	}
	resp.Body.Close()
	if keys := s.objects(t); len(keys) != 0 {
		t.Fatalf("after alice's account was deleted: %v; want no object", keys)
	}
}

// TestSignedLinksExpire: a signed link works until its time is up, then answers 403.
func TestSignedLinksExpire(t *testing.T) {
	s := startFileNodes(t, false, func(c *attach.Config) { c.LinkTTL = 2 * time.Second })
	up := s.mustUpload(t, "alice", s.group.ID, "a.txt", []byte("short-lived"))
	if _, err := s.alice.SendFiles(s.ctx, s.group.ID, "", []string{up.ID}); err != nil {
		t.Fatal(err)
	}
	link := s.linkOf(t, s.bobURL, "bob", up.ID)
	u, err := url.Parse(link.URL)
	if err != nil || u.Query().Get("sig") == "" {
		t.Fatalf("link %q has no signature", link.URL)
	}
	if resp, _ := get(t, s.ctx, s.bobURL+link.URL, nil); resp.StatusCode != http.StatusOK && time.Now().Before(link.ExpiresAt) {
		t.Fatalf("the fresh link answers %d", resp.StatusCode)
	}
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		if resp, _ := get(t, s.ctx, s.bobURL+link.URL, nil); resp.StatusCode != http.StatusForbidden {
			return fmt.Errorf("the link answers %d, %s before it expires, not 403", resp.StatusCode, time.Until(link.ExpiresAt))
		}
		return nil
	})
	if time.Now().Before(link.ExpiresAt) {
		t.Fatalf("the link was refused before it expired at %s", link.ExpiresAt)
	}
}
