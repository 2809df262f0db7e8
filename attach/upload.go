package attach

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/media"
	"github.com/chatd/chatd/storage"
)

// Refusals of an upload, which the server answers with their documented statuses. Nothing of a
// refused upload is kept.
var (
	// ErrTooLarge refuses a file larger than Config.MaxFileBytes, said by its Content-Length or
	// found while it streamed.
	ErrTooLarge = errors.New("file too large")
	// ErrBadName refuses a file name that is empty, too long, or holds control characters or
	// slashes.
	ErrBadName = errors.New("bad file name")
	// ErrBadImage refuses a file whose bytes say it is an image that cannot be decoded, or one
	// with more pixels than the media limit.
	ErrBadImage = errors.New("image cannot be decoded, or has too many pixels")
)

// RateLimitedError refuses an upload past the user's hourly uploads or bytes; RetryAfter is when
// their hour ends.
type RateLimitedError struct {
	RetryAfter time.Duration
	What       string
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many %s this hour; retry in %s", e.What, e.RetryAfter.Round(time.Second))
}

// UploadRequest is one file a user uploads into a conversation they may send to (the caller
// checks that: chat.CheckUpload).
type UploadRequest struct {
	UserID, ConversationID string
	// Name is the file's name as the uploader gave it, shown to members; never used as a key.
	Name string
	// Body streams the file; Size is its length, or -1 when not known in advance.
	Body io.Reader
	Size int64
}

// Upload stores a file and its pending record, owned by the uploader, and returns the record.
// The bytes stream to the blob store; an image the page may show inline is decoded (within the
// pixel limit) and stored as a clean copy, without its metadata, with a thumbnail. A refused or
// failed upload leaves no object and no record.
func (s *Service) Upload(ctx context.Context, req UploadRequest) (_ storage.Upload, err error) {
	defer func() { s.metrics.uploaded(err) }()
	name, err := cleanName(req.Name)
	if err != nil {
		return storage.Upload{}, err
	}
	if req.Size > s.cfg.MaxFileBytes {
		return storage.Upload{}, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, req.Size, s.cfg.MaxFileBytes)
	}
	reserve := req.Size
	if reserve < 0 {
		reserve = s.cfg.MaxFileBytes
	}
	settle, err := s.limits.reserve(req.UserID, reserve, s.now())
	if err != nil {
		return storage.Upload{}, err
	}
	stored := int64(0)
	defer func() { settle(stored) }()

	body := &limitedReader{r: req.Body, left: s.cfg.MaxFileBytes}
	contentType, all, err := media.Detect(body)
	if err != nil {
		return storage.Upload{}, body.refusal(fmt.Errorf("read upload: %w", err))
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	id := uuid.NewString()
	u := storage.Upload{ID: id, UploaderID: req.UserID, ConversationID: req.ConversationID, Name: name,
		ContentType: contentType, Key: s.keyOf(id, now), CreatedAt: now}
	if media.IsInlineImage(contentType) {
		err = s.storeImage(ctx, &u, all)
	} else {
		var info blob.Info
		info, err = s.blobs.Put(ctx, u.Key, all, req.Size, contentType)
		u.Size = info.Size
	}
	if err != nil {
		return storage.Upload{}, body.refusal(err)
	}
	if err := s.store.InsertUpload(ctx, u); err != nil {
		// Without its record nobody can reach the object: delete it now (the collector would
		// find it in its slot otherwise).
		if derr := s.deleteObjects(context.WithoutCancel(ctx), u.Key, u.ThumbnailKey); derr != nil {
			s.log.Warn().Err(derr).Str("upload", id).Msg("delete the objects of an upload whose record failed")
		}
		return storage.Upload{}, err
	}
	stored = u.Size
	s.metrics.stored(u.Size)
	return u, nil
}

// storeImage decodes an image and stores its clean copy and thumbnail, filling in u's size,
// dimensions and keys. The copy streams to the store as it is encoded.
func (s *Service) storeImage(ctx context.Context, u *storage.Upload, r io.Reader) error {
	select {
	case s.decodes <- struct{}{}:
		defer func() { <-s.decodes }()
	case <-ctx.Done():
		return fmt.Errorf("wait to decode: %w", ctx.Err())
	}
	img, err := media.Decode(r, s.cfg.Media)
	if err != nil {
		if errors.Is(err, media.ErrNotImage) || errors.Is(err, media.ErrTooManyPixels) {
			return fmt.Errorf("%w: %w", ErrBadImage, err)
		}
		return err
	}
	u.ContentType, u.Width, u.Height = img.ContentType, img.Width, img.Height
	thumb := img.Thumbnail()
	var buf bytes.Buffer
	if err := thumb.Encode(&buf); err != nil {
		return err
	}
	thumbKey := u.Key + thumbSuffix
	if _, err := s.blobs.Put(ctx, thumbKey, &buf, int64(buf.Len()), thumb.ContentType); err != nil {
		return err
	}
	info, err := s.putEncoded(ctx, u.Key, img)
	if err != nil {
		if derr := s.deleteObjects(context.WithoutCancel(ctx), thumbKey); derr != nil {
			s.log.Warn().Err(derr).Str("upload", u.ID).Msg("delete the thumbnail of a failed upload")
		}
		return err
	}
	u.Size, u.ThumbnailKey = info.Size, thumbKey
	return nil
}

// putEncoded stores img as its encoder writes it, through a pipe: the encoded file is never
// whole in memory.
func (s *Service) putEncoded(ctx context.Context, key string, img *media.Image) (blob.Info, error) {
	pr, pw := io.Pipe()
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		pw.CloseWithError(img.Encode(pw)) // nil closes the pipe with EOF
	}()
	info, err := s.blobs.Put(ctx, key, pr, -1, img.ContentType)
	pr.CloseWithError(errors.New("upload ended")) // unblocks the encoder if Put stopped reading early
	<-encoded
	return info, err
}

// cleanName checks a file's name as shown to members: trimmed, valid UTF-8, no control
// characters or slashes (a name is never a path), at most maxNameBytes.
func cleanName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fmt.Errorf("%w: the name is empty", ErrBadName)
	case len(name) > maxNameBytes:
		return "", fmt.Errorf("%w: longer than %d bytes", ErrBadName, maxNameBytes)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("%w: not UTF-8", ErrBadName)
	case strings.ContainsAny(name, `/\`) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", fmt.Errorf("%w: slashes and control characters are not allowed", ErrBadName)
	}
	return name, nil
}

// limitedReader reads at most left bytes, and fails with ErrTooLarge on the first byte past
// them, so a Put reading it fails and stores nothing.
type limitedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One more byte tells a file of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.exceeded = true
			return 0, ErrTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// refusal is err, or ErrTooLarge if the file turned out too large: whatever the store made of
// the reader's error, the size is the reason.
func (l *limitedReader) refusal(err error) error {
	if l.exceeded {
		return fmt.Errorf("%w: more than the limit", ErrTooLarge)
	}
	return err
}
