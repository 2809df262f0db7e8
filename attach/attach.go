// Package attach is attachments: files uploaded into a conversation, kept in a blob store, and
// the rules of their life. An upload is streamed to the store (never whole in memory), its type
// detected from its bytes, an image re-encoded without its metadata and given a thumbnail; its
// record is pending and owned by its uploader until a send attaches it, which only the
// conversation's owner does (Attach, for sequencer.Files), in the order that keeps a stored
// message from naming a missing file. Deleting a message for everyone or an account deletes
// their files; the collector deletes uploads that no send attached in time. Downloads are for
// current members (the server asks chat), through the bearer token or a short-lived link signed
// with the server's secret.
package attach

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/media"
	"github.com/chatd/chatd/storage"
)

// Defaults, each with its reason.
const (
	// DefaultMaxFileBytes bounds one file: a phone's photo or a document, not a video library.
	DefaultMaxFileBytes = 25 << 20
	// DefaultMaxFilesPerMessage bounds the files of one message: a few photos of one moment.
	DefaultMaxFilesPerMessage = 10
	// DefaultUploadsPerHour and DefaultBytesPerHour bound what one user uploads through one node
	// in an hour: ten times what a busy person sends, far below what fills a disk.
	DefaultUploadsPerHour = 200
	DefaultBytesPerHour   = 1 << 30
	// DefaultPendingTTL is how long an upload no send attached is kept: the collector deletes it
	// after this, and the owner attaches only uploads younger than half of it, so a send in
	// flight never meets the collector (the half in between is far longer than any send).
	DefaultPendingTTL = 2 * time.Hour
	// DefaultSweepInterval is how often each node looks for uploads to collect.
	DefaultSweepInterval = 5 * time.Minute
	// DefaultSweepSlot is the span of upload times whose objects share a key prefix; the
	// collector lists one slot at a time, each once, after all its uploads are past the TTL.
	// It is part of every key: changing it leaves older pending uploads uncollected.
	DefaultSweepSlot = time.Minute
	// DefaultLinkTTL is how long a signed download link works: long enough for a page to load
	// its images, short enough that a copied link is soon useless.
	DefaultLinkTTL = 5 * time.Minute
	// DefaultMaxConcurrentDecodes bounds the images decoded at once on a node: each may take up
	// to 4 bytes a pixel (about 100 MB at media.DefaultMaxPixels).
	DefaultMaxConcurrentDecodes = 2
	// sweepLookbackSlots is how many slots before the newest a store's first sweep starts: a
	// day of the default slots.
	sweepLookbackSlots = 1440
	// maxSlotsPerSweep bounds one sweep's listings, so a pass ends in time; the next goes on.
	maxSlotsPerSweep = 240
	// sweepTimeout bounds one sweep.
	sweepTimeout = 2 * time.Minute
	// maxNameBytes bounds a file's name as shown: a long name still fits, a paragraph does not.
	maxNameBytes = 255
	// thumbSuffix ends a thumbnail's key.
	thumbSuffix = ".thumb"
)

// Config tunes a Service. Zero fields take the defaults above, except LinkSecret.
type Config struct {
	MaxFileBytes         int64
	MaxFilesPerMessage   int
	UploadsPerHour       int
	BytesPerHour         int64
	PendingTTL           time.Duration
	SweepInterval        time.Duration
	SweepSlot            time.Duration
	LinkTTL              time.Duration
	MaxConcurrentDecodes int
	// LinkSecret signs download links (HMAC-SHA256); at least 32 bytes.
	LinkSecret []byte
	// Media bounds image decoding; zero means media.DefaultConfig.
	Media media.Config
	// Metrics records uploads, refusals, deletions and store latency; nil records nothing.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	c.MaxFileBytes = cmp.Or(c.MaxFileBytes, DefaultMaxFileBytes)
	c.MaxFilesPerMessage = cmp.Or(c.MaxFilesPerMessage, DefaultMaxFilesPerMessage)
	c.UploadsPerHour = cmp.Or(c.UploadsPerHour, DefaultUploadsPerHour)
	c.BytesPerHour = cmp.Or(c.BytesPerHour, DefaultBytesPerHour)
	c.PendingTTL = cmp.Or(c.PendingTTL, DefaultPendingTTL)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.SweepSlot = cmp.Or(c.SweepSlot, DefaultSweepSlot)
	c.LinkTTL = cmp.Or(c.LinkTTL, DefaultLinkTTL)
	c.MaxConcurrentDecodes = cmp.Or(c.MaxConcurrentDecodes, DefaultMaxConcurrentDecodes)
	c.Media = cmp.Or(c.Media, media.DefaultConfig())
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxFileBytes < 0 || c.MaxFilesPerMessage < 0 || c.UploadsPerHour < 0 || c.BytesPerHour < 0 || c.MaxConcurrentDecodes < 0:
		return errors.New("attach: limits must be positive")
	case c.SweepSlot < time.Second || c.SweepSlot%time.Second != 0:
		return errors.New("attach: the sweep slot must be whole seconds")
	case c.PendingTTL < 4*c.SweepSlot || c.SweepInterval <= 0 || c.LinkTTL <= 0:
		return errors.New("attach: the pending TTL must be at least four sweep slots, and intervals positive")
	case len(c.LinkSecret) < 32:
		return errors.New("attach: the link secret must be at least 32 bytes")
	case c.MaxFilesPerMessage > 32:
		return errors.New("attach: at most 32 files per message (protocol.MaxAttachments)")
	}
	return c.Media.Validate()
}

// Store is what attachments keep in the database: the uploads' records, the collector's
// progress, and the claims of sends (to tell a send that was stored from one that never was).
type Store interface {
	InsertUpload(ctx context.Context, u storage.Upload) error
	Uploads(ctx context.Context, ids []string) (map[string]storage.Upload, error)
	AttachUploads(ctx context.Context, ids []string, clientMsgID string) error
	DeleteUploads(ctx context.Context, ids []string) error
	UploadsOfAccount(ctx context.Context, userID string, conversationIDs []string) ([]storage.Upload, error)
	UploadSweep(ctx context.Context) (time.Time, error)
	SetUploadSweep(ctx context.Context, through time.Time) error
	MessageByClientID(ctx context.Context, conversationID, clientMsgID string) (storage.Message, error)
}

// Service is the attachments of one node. It is safe for concurrent use.
type Service struct {
	cfg     Config
	store   Store
	blobs   blob.Store
	log     zerolog.Logger
	metrics *Metrics
	limits  *hourlyLimits
	decodes chan struct{}
	now     func() time.Time

	// stopped ends the collector, and a sweep under way with it.
	stopped context.Context
	stop    context.CancelFunc
	done    sync.WaitGroup
}

// New returns a service over the records in store and the objects in blobs. Start its collector
// with StartCollector.
func New(cfg Config, store Store, blobs blob.Store, log zerolog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	stopped, stop := context.WithCancel(context.Background())
	return &Service{cfg: cfg, store: store, blobs: timedStore{blobs, cfg.Metrics}, log: log.With().Str("component", "attach").Logger(),
		metrics: cfg.Metrics, limits: newHourlyLimits(cfg.UploadsPerHour, cfg.BytesPerHour),
		decodes: make(chan struct{}, cfg.MaxConcurrentDecodes), now: time.Now, stopped: stopped, stop: stop}, nil
}

// Config returns the service's configuration, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// slotOf is the start of the sweep slot t falls in.
func (s *Service) slotOf(t time.Time) time.Time {
	sec := int64(s.cfg.SweepSlot / time.Second)
	u := t.Unix()
	return time.Unix(u-u%sec, 0).UTC()
}

// keyOf is the blob key of an upload made at t: its slot's prefix, then its id.
func (s *Service) keyOf(id string, t time.Time) string {
	return slotPrefix(s.slotOf(t)) + id
}

// slotPrefix is the key prefix of the uploads of the slot starting at start.
func slotPrefix(start time.Time) string {
	return "files/" + strconv.FormatInt(start.Unix(), 10) + "/"
}

// uploadIDOfKey is the upload a key belongs to (a file or its thumbnail).
func uploadIDOfKey(key string) string {
	return strings.TrimSuffix(path.Base(key), thumbSuffix)
}

// deleteUploads deletes uploads' objects and then their records: a record whose objects could
// not all be deleted stays, so a later deletion or the collector tries again. It returns how many
// were deleted.
func (s *Service) deleteUploads(ctx context.Context, uploads []storage.Upload, why string) (int, error) {
	var ids []string
	var errs []error
	for _, u := range uploads {
		if err := s.deleteObjects(ctx, u.Key, u.ThumbnailKey); err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, u.ID)
	}
	if err := s.store.DeleteUploads(ctx, ids); err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	s.metrics.deleted(why, len(ids))
	return len(ids), errors.Join(errs...)
}

// deleteObjects deletes objects by key, skipping empty keys.
func (s *Service) deleteObjects(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if k == "" {
			continue
		}
		if err := s.blobs.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete object %s: %w", k, err)
		}
	}
	return nil
}
