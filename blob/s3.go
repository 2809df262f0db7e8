package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3PartSize is the part size of a Put of unknown size: S3's smallest, since minio-go buffers a
// whole part in memory before sending it (with its default, 16 MiB per upload).
const S3PartSize = 5 << 20

// S3Config says where an S3 bucket is and how to reach it.
type S3Config struct {
	// Endpoint is the server's host and port, e.g. "s3.eu-west-1.amazonaws.com" or
	// "127.0.0.1:9000", without a scheme: TLS says which.
	Endpoint string
	// Bucket holds the objects; it must exist (chatd does not create buckets, whose policies
	// are the operator's).
	Bucket string
	// Region is the bucket's region; empty: the client asks the server.
	Region string
	// AccessKey and SecretKey are the credentials of a user allowed to read, write, list and
	// delete objects in the bucket.
	AccessKey, SecretKey string
	// TLS is whether to speak HTTPS to the endpoint. Over plain HTTP the payload is signed
	// chunk by chunk as it streams; keep it to a private network all the same.
	TLS bool
}

// Validate returns an error if a required field is missing.
func (c S3Config) Validate() error {
	switch {
	case c.Endpoint == "":
		return errors.New("s3: endpoint is required")
	case c.Bucket == "":
		return errors.New("s3: bucket is required")
	case c.AccessKey == "" || c.SecretKey == "":
		return errors.New("s3: access key and secret key are required")
	}
	return nil
}

// S3 is a Store in a bucket of an S3-compatible object store, through minio-go.
type S3 struct {
	client    *minio.Client
	transport *http.Transport // the client's own, so that Close can close its connections
	bucket    string
}

var _ Store = (*S3)(nil)

// OpenS3 connects to the bucket of cfg and checks that it exists and that the credentials may
// see it, so that a misconfiguration shows at start, not at the first upload.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("open s3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.TLS,
		Region:    cfg.Region,
		Transport: transport,
	})
	if err != nil {
		return nil, fmt.Errorf("open s3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	s := &S3{client: client, transport: transport, bucket: cfg.Bucket}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err == nil && !ok {
		err = errors.New("no such bucket")
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open s3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	return s, nil
}

// Close closes the client's idle connections. Requests still running finish on theirs; call it
// once nothing uses the store.
func (s *S3) Close() { s.transport.CloseIdleConnections() }

// Put uploads the object in one streamed request when its size is known, so nothing is
// buffered, and in parts of S3PartSize otherwise. S3 publishes an object only once all of it
// has arrived, so a failed Put leaves nothing.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := validateContentType(contentType); err != nil {
		return Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	opts := minio.PutObjectOptions{ContentType: contentType, DisableMultipart: size >= 0, PartSize: S3PartSize}
	counted := &countingReader{r: r}
	up, err := s.client.PutObject(ctx, s.bucket, key, counted, size, opts)
	if err != nil {
		return Info{}, fmt.Errorf("put %s after %d bytes: %w", key, counted.n, err)
	}
	if size >= 0 {
		// minio-go sends exactly size bytes (a shorter r fails the request): if r had more, the
		// object stored is not what the caller gave. Undo it.
		if n, _ := counted.Read(make([]byte, 1)); n > 0 {
			_ = s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}) // best effort; the error below says what matters
			return Info{}, fmt.Errorf("put %s: r holds more than the %d bytes expected", key, size)
		}
	}
	// A PUT's answer carries no modification time, which ListOlder compares with: ask for it.
	info, err := s.Stat(ctx, key)
	if err != nil {
		return Info{}, fmt.Errorf("put %s: stored %d bytes, then: %w", key, up.Size, err)
	}
	return info, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Get starts the download and returns once the server has answered with the object's headers.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, fmt.Errorf("get %s: %w", key, err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	st, err := obj.Stat() // minio-go's GetObject is lazy: this sends the request
	if err != nil {
		_ = obj.Close()
		return nil, Info{}, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	return obj, objectInfo(st), nil
}

// Stat asks for the object's headers.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	st, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, notFound(err))
	}
	return objectInfo(st), nil
}

// Delete removes the object; S3 answers a deletion of a missing key with success too.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// ListOlder lists the bucket under the prefix, page by page as the loop asks for more.
func (s *S3) ListOlder(ctx context.Context, prefix string, before time.Time) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		if err := validatePrefix(prefix, true); err != nil {
			yield(Info{}, fmt.Errorf("list %s: %w", prefix, err))
			return
		}
		// minio-go lists in a goroutine of its own until ctx ends: end it when the loop does.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for obj := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				yield(Info{}, fmt.Errorf("list %s: %w", prefix, obj.Err))
				return
			}
			if !obj.LastModified.Before(before) {
				continue
			}
			info := objectInfo(obj)
			info.ContentType = "" // some servers list it, others not: never promised
			if !yield(info, nil) {
				return
			}
		}
	}
}

// objectInfo describes an object as minio-go does.
func objectInfo(o minio.ObjectInfo) Info {
	return Info{Key: o.Key, Size: o.Size, ContentType: o.ContentType, Modified: o.LastModified}
}

// notFound makes S3's answer for a missing object wrap ErrNotFound.
func notFound(err error) error {
	resp := minio.ToErrorResponse(err)
	if resp.Code == minio.NoSuchKey || (resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
