package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/blob"
)

// fileOptions are the attachments' settings: where files are kept and the limits on uploads.
// The S3 keys are read from the environment only, never from flags, which ps shows.
type fileOptions struct {
	dir, s3Endpoint, s3Bucket, s3Region string
	s3TLS                               bool
	cfg                                 attach.Config
}

// register adds the attachments' flags, each defaulting to its CHAT_* variable.
func (o *fileOptions) register(fs *flag.FlagSet) error {
	fs.StringVar(&o.dir, "files-dir", env("CHAT_FILES_DIR", ""), "directory of attachments when no S3 bucket is set; default <data-dir>/files (CHAT_FILES_DIR)")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", env("CHAT_S3_ENDPOINT", ""), "S3-compatible object store for attachments, host:port; set with the bucket and CHAT_S3_ACCESS_KEY/CHAT_S3_SECRET_KEY (CHAT_S3_ENDPOINT)")
	fs.StringVar(&o.s3Bucket, "s3-bucket", env("CHAT_S3_BUCKET", ""), "bucket of attachments; it must exist (CHAT_S3_BUCKET)")
	fs.StringVar(&o.s3Region, "s3-region", env("CHAT_S3_REGION", ""), "region of the bucket; empty: asked of the server (CHAT_S3_REGION)")
	tls, err := envBool("CHAT_S3_TLS", true)
	if err != nil {
		return err
	}
	fs.BoolVar(&o.s3TLS, "s3-tls", tls, "speak HTTPS to the S3 endpoint (CHAT_S3_TLS)")
	maxFile, err := envInt("CHAT_MAX_FILE_BYTES", attach.DefaultMaxFileBytes)
	if err != nil {
		return err
	}
	fs.Int64Var(&o.cfg.MaxFileBytes, "max-file-bytes", int64(maxFile), "largest file an upload may carry (CHAT_MAX_FILE_BYTES)")
	perMessage, err := envInt("CHAT_MAX_FILES_PER_MESSAGE", attach.DefaultMaxFilesPerMessage)
	if err != nil {
		return err
	}
	fs.IntVar(&o.cfg.MaxFilesPerMessage, "max-files-per-message", perMessage, "most files one message may carry, at most 32 (CHAT_MAX_FILES_PER_MESSAGE)")
	uploads, err := envInt("CHAT_UPLOADS_PER_HOUR", attach.DefaultUploadsPerHour)
	if err != nil {
		return err
	}
	fs.IntVar(&o.cfg.UploadsPerHour, "uploads-per-hour", uploads, "uploads per user per hour on this node (CHAT_UPLOADS_PER_HOUR)")
	bytes, err := envInt("CHAT_UPLOAD_BYTES_PER_HOUR", attach.DefaultBytesPerHour)
	if err != nil {
		return err
	}
	fs.Int64Var(&o.cfg.BytesPerHour, "upload-bytes-per-hour", int64(bytes), "bytes uploaded per user per hour on this node (CHAT_UPLOAD_BYTES_PER_HOUR)")
	ttl, err := envDuration("CHAT_UPLOAD_TTL", attach.DefaultPendingTTL)
	if err != nil {
		return err
	}
	fs.DurationVar(&o.cfg.PendingTTL, "upload-ttl", ttl, "how long an upload no message attached is kept; a send must attach it within half of this (CHAT_UPLOAD_TTL)")
	linkTTL, err := envDuration("CHAT_FILE_LINK_TTL", attach.DefaultLinkTTL)
	if err != nil {
		return err
	}
	fs.DurationVar(&o.cfg.LinkTTL, "file-link-ttl", linkTTL, "how long a signed download link works (CHAT_FILE_LINK_TTL)")
	return nil
}

// openBlobs opens the store of attachments: the S3 bucket when an endpoint is set, else a
// directory under the data directory. close releases it.
func (o *fileOptions) openBlobs(ctx context.Context, dataDir string, log zerolog.Logger) (store blob.Store, closeStore func(), err error) {
	if o.s3Endpoint == "" && o.s3Bucket == "" {
		dir := o.dir
		if dir == "" {
			dir = filepath.Join(dataDir, "files")
		}
		d, err := blob.OpenDir(dir)
		if err != nil {
			return nil, nil, err
		}
		log.Info().Str("dir", dir).Msg("attachments kept in a directory")
		return d, func() {}, nil
	}
	if o.dir != "" {
		return nil, nil, errors.New("set either a files directory or an S3 bucket, not both")
	}
	s3, err := blob.OpenS3(ctx, blob.S3Config{Endpoint: o.s3Endpoint, Bucket: o.s3Bucket, Region: o.s3Region,
		AccessKey: os.Getenv("CHAT_S3_ACCESS_KEY"), SecretKey: os.Getenv("CHAT_S3_SECRET_KEY"), TLS: o.s3TLS})
	if err != nil {
		return nil, nil, err
	}
	log.Info().Str("endpoint", o.s3Endpoint).Str("bucket", o.s3Bucket).Msg("attachments kept in an S3 bucket")
	return s3, s3.Close, nil
}
