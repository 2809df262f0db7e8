package attach

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// File is one stored file opened for download: its record, what is being read (the file or its
// thumbnail) and the bytes.
type File struct {
	Upload storage.Upload
	Info   blob.Info
	Body   io.ReadCloser
}

// Record returns an upload's record, or ErrNoFile.
func (s *Service) Record(ctx context.Context, id string) (storage.Upload, error) {
	uploads, err := s.store.Uploads(ctx, []string{id})
	if err != nil {
		return storage.Upload{}, err
	}
	u, ok := uploads[id]
	if !ok {
		return storage.Upload{}, ErrNoFile
	}
	return u, nil
}

// Open opens the file of upload u, or with thumbnail its thumbnail, for reading; ErrNoFile if it
// has none or it is gone.
func (s *Service) Open(ctx context.Context, u storage.Upload, thumbnail bool) (File, error) {
	key := u.Key
	if thumbnail {
		key = u.ThumbnailKey
	}
	if key == "" {
		return File{}, ErrNoFile
	}
	body, info, err := s.blobs.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return File{}, ErrNoFile
	}
	if err != nil {
		return File{}, err
	}
	return File{Upload: u, Info: info, Body: body}, nil
}

// FilePath is the path a file is downloaded from; with "/thumbnail" after it, its thumbnail.
func FilePath(id string) string { return "/api/files/" + url.PathEscape(id) }

// Link signs links to upload u (and its thumbnail, if it has one) for userID, valid for the
// configured LinkTTL. Whoever follows one is checked again as a current member: a link outlives
// nobody's membership.
func (s *Service) Link(u storage.Upload, userID string) protocol.FileLink {
	exp := s.now().Add(s.cfg.LinkTTL).Truncate(time.Second)
	l := protocol.FileLink{URL: s.signed(u.ID, false, userID, exp), ExpiresAt: exp.UTC()}
	if u.ThumbnailKey != "" {
		l.Thumbnail = s.signed(u.ID, true, userID, exp)
	}
	return l
}

// signed is one signed URL: the path, then the user, expiry and signature as query parameters.
func (s *Service) signed(id string, thumbnail bool, userID string, exp time.Time) string {
	p := FilePath(id)
	if thumbnail {
		p += "/thumbnail"
	}
	q := url.Values{"u": {userID}, "exp": {strconv.FormatInt(exp.Unix(), 10)}, "sig": {s.signature(id, thumbnail, userID, exp.Unix())}}
	return p + "?" + q.Encode()
}

// signature is the HMAC-SHA256 of what a link grants, with the server's link secret.
func (s *Service) signature(id string, thumbnail bool, userID string, exp int64) string {
	variant := "file"
	if thumbnail {
		variant = "thumbnail"
	}
	mac := hmac.New(sha256.New, s.cfg.LinkSecret)
	fmt.Fprintf(mac, "chatd file link v1\n%s\n%s\n%s\n%d", variant, id, userID, exp)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// ErrBadLink refuses a signed link that is malformed, forged or expired.
var ErrBadLink = errors.New("link invalid or expired")

// VerifyLink checks a signed link's query for file id (or its thumbnail) and returns the user it
// was signed for.
func (s *Service) VerifyLink(id string, thumbnail bool, q url.Values) (string, error) {
	userID, sig := q.Get("u"), q.Get("sig")
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil || userID == "" || sig == "" {
		return "", ErrBadLink
	}
	want := s.signature(id, thumbnail, userID, exp)
	if !hmac.Equal([]byte(sig), []byte(want)) || !s.now().Before(time.Unix(exp, 0)) {
		return "", ErrBadLink
	}
	return userID, nil
}
