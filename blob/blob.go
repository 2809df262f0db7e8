// Package blob stores immutable objects (uploaded files, their thumbnails) by key, streamed in and
// out, behind one small interface with two real implementations: Dir keeps them in a directory on
// local disk (the embedded default) and S3 in a bucket of any S3-compatible object store
// (production, so that every node reads what any node stored). Both pass the same conformance
// tests, so what works on the default works in production.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
)

// Store keeps objects by key. An object is written once, whole, and then only read or deleted:
// a reader never sees half an object, and a Put under an existing key replaces it whole.
// Implementations are safe for concurrent use.
type Store interface {
	// Put stores the bytes of r under key with its content type and returns what was stored.
	// size is the exact number of bytes r yields, or -1 if unknown (S3 then sends it in parts of
	// S3PartSize, buffering one part; with the size known nothing is buffered). If r yields a
	// different number of bytes than size, or fails, or ctx ends, Put returns an error and
	// leaves no object under key that was not there before.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error)
	// Get opens the object for reading: the caller reads it and closes it. ctx bounds the whole
	// read, not only the opening. It returns an error wrapping ErrNotFound if there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat returns what is stored under key, or an error wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object under key. Deleting a key that holds nothing is not an error, so
	// that a retried or repeated deletion succeeds.
	Delete(ctx context.Context, key string) error
	// ListOlder yields the objects whose keys start with prefix and which were stored before
	// before, in no particular order, for collecting uploads that nothing references. Info's
	// ContentType is left empty (S3 listings do not carry it). The iteration stops at the first
	// error, which it yields; breaking out of the loop ends the listing.
	ListOlder(ctx context.Context, prefix string, before time.Time) iter.Seq2[Info, error]
}

// Info describes a stored object.
type Info struct {
	// Key is the object's key.
	Key string
	// Size is its length in bytes.
	Size int64
	// ContentType is the media type given to Put.
	ContentType string
	// Modified is when it was stored.
	Modified time.Time
}

// ErrNotFound is wrapped by the errors of Get and Stat for a key that holds no object.
var ErrNotFound = errors.New("object not found")

// ErrInvalidKey is wrapped by the errors for a key or prefix that is not of the form ValidateKey
// accepts.
var ErrInvalidKey = errors.New("invalid object key")

// MaxKeyLen bounds a key's length: well under S3's 1,024 bytes and the 4,096 of a Linux path, so
// that a key valid for one store is valid for the other.
const MaxKeyLen = 512

// MaxContentTypeLen bounds a content type's length; Dir keeps it in a fixed-size header.
const MaxContentTypeLen = 200

// ValidateKey returns nil if key can name an object in every Store: segments separated by single
// slashes, each made of ASCII letters, digits, '-', '_' and '.', not starting with '.' (so no
// segment is "." or "..", and no key reaches outside a Dir or into its temporary files), at most
// MaxKeyLen bytes in all. Keys are chosen by chatd (ids), never by users, so a narrow alphabet
// costs nothing and no two stores can disagree on what a key means.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	return validatePrefix(key, false)
}

// validatePrefix checks a key, or with partial a listing prefix, which may also be empty, end in
// a slash or end in the middle of a segment.
func validatePrefix(p string, partial bool) error {
	if len(p) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(p), MaxKeyLen)
	}
	if p == "" && partial {
		return nil
	}
	segments := strings.Split(p, "/")
	for i, seg := range segments {
		if seg == "" && partial && i == len(segments)-1 {
			continue // "a/b/" lists the objects under a/b
		}
		if seg == "" || seg[0] == '.' {
			return fmt.Errorf("%w: %q has an empty segment or one starting with '.'", ErrInvalidKey, p)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return fmt.Errorf("%w: %q has %q", ErrInvalidKey, p, c)
			}
		}
	}
	return nil
}

// validateContentType checks what Put is given: any media type fits, and nothing else would be
// served back as one.
func validateContentType(ct string) error {
	if ct == "" || len(ct) > MaxContentTypeLen || strings.ContainsAny(ct, "\r\n\x00") {
		return fmt.Errorf("invalid content type %q: empty, longer than %d bytes or with a line break", ct, MaxContentTypeLen)
	}
	return nil
}

// ctxReader ends a copy once ctx ends, for I/O that takes no context of its own (files).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
