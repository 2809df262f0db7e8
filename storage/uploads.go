package storage

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Collections of attachments: an upload's record, read by its _id, and the collector's progress.
const (
	uploadsCollection      = "uploads"
	uploadSweepsCollection = "uploadSweeps"
	// uploadSweepID is the one document of uploadSweeps.
	uploadSweepID = "uploads"
)

// Attachment is one file of a message as stored with it: what the message shows of its upload.
type Attachment struct {
	ID          string `bson:"id"`
	Name        string `bson:"name"`
	Size        int64  `bson:"size"`
	ContentType string `bson:"type"`
	Width       int    `bson:"width,omitempty"`
	Height      int    `bson:"height,omitempty"`
	Thumbnail   bool   `bson:"thumbnail,omitempty"`
}

// AttachmentRef names a message's first file in a quote or a preview.
type AttachmentRef struct {
	Name  string `bson:"name"`
	Image bool   `bson:"image,omitempty"`
}

// Upload is the record of one uploaded file: pending (ClientMsgID empty) until a send of its
// uploader in its conversation attaches it, then attached to that send. The objects it names are
// in the blob store; the record is read by its _id only, except by an account deletion.
type Upload struct {
	ID             string `bson:"_id"`
	UploaderID     string `bson:"uploaderId"`
	ConversationID string `bson:"conversationId"`
	Name           string `bson:"name"`
	Size           int64  `bson:"size"`
	ContentType    string `bson:"type"`
	Width          int    `bson:"width,omitempty"`
	Height         int    `bson:"height,omitempty"`
	// Key and ThumbnailKey are the blob store's keys of the file and of its thumbnail ("" when
	// it has none).
	Key          string    `bson:"key"`
	ThumbnailKey string    `bson:"thumbnailKey,omitempty"`
	CreatedAt    time.Time `bson:"createdAt"`
	// ClientMsgID is the send that attached the upload; empty while it is pending.
	ClientMsgID string `bson:"clientMsgId,omitempty"`
}

// Attachment is what a message shows of the upload.
func (u Upload) Attachment() Attachment {
	return Attachment{ID: u.ID, Name: u.Name, Size: u.Size, ContentType: u.ContentType, Width: u.Width, Height: u.Height,
		Thumbnail: u.ThumbnailKey != ""}
}

// uploadIndexes serve an account deletion, which removes the files a user sent and those of
// the DMs it removes; every other read is by _id.
func (s *Store) uploadIndexes(ctx context.Context) error {
	for _, key := range []string{"uploaderId", "conversationId"} {
		model := mongo.IndexModel{Keys: bson.D{{Key: key, Value: 1}}, Options: options.Index().SetName(key)}
		if _, err := s.uploads.Indexes().CreateOne(ctx, model); err != nil {
			return fmt.Errorf("create index %s on uploads: %w", key, err)
		}
	}
	return nil
}

// InsertUpload stores the record of a new, pending upload.
func (s *Store) InsertUpload(ctx context.Context, u Upload) (err error) {
	defer s.metrics.observe(opInsertUpload, time.Now(), &err)
	if _, err := s.uploads.InsertOne(ctx, u); err != nil {
		return fmt.Errorf("insert upload %s: %w", u.ID, err)
	}
	return nil
}

// Uploads reads the records of the given uploads by _id; those that do not exist are missing
// from the map.
func (s *Store) Uploads(ctx context.Context, ids []string) (_ map[string]Upload, err error) {
	defer s.metrics.observe(opUploads, time.Now(), &err)
	return findByIDs[Upload](ctx, s.uploads, ids)
}

// AttachUploads marks uploads attached to the send clientMsgID, each by _id. Only the owner of
// their conversation writes it (the embedded store's updates rewrite the whole document).
func (s *Store) AttachUploads(ctx context.Context, ids []string, clientMsgID string) (err error) {
	defer s.metrics.observe(opAttachUploads, time.Now(), &err)
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = mongo.NewUpdateOneModel().SetFilter(byID(id)).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "clientMsgId", Value: clientMsgID}}}})
	}
	if err := bulkWrite(ctx, s.uploads, models, false); err != nil {
		return fmt.Errorf("attach uploads to %s: %w", clientMsgID, err)
	}
	return nil
}

// DeleteUploads removes upload records by _id; those already gone are no error.
func (s *Store) DeleteUploads(ctx context.Context, ids []string) (err error) {
	defer s.metrics.observe(opDeleteUploads, time.Now(), &err)
	if len(ids) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = deleteByID(id)
	}
	if err := bulkWrite(ctx, s.uploads, models, false); err != nil {
		return fmt.Errorf("delete %d uploads: %w", len(ids), err)
	}
	return nil
}

// UploadsOfAccount returns the uploads a user made and those in the given conversations, for an
// account deletion: a filter on an indexed field, which the embedded store answers by scanning
// the collection (a rare operation; every frequent one reads by _id).
func (s *Store) UploadsOfAccount(ctx context.Context, userID string, conversationIDs []string) (_ []Upload, err error) {
	defer s.metrics.observe(opUploadsOfAccount, time.Now(), &err)
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "uploaderId", Value: userID}},
		bson.D{{Key: "conversationId", Value: bson.D{{Key: "$in", Value: append([]string{}, conversationIDs...)}}}},
	}}}
	cur, err := s.uploads.Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("find uploads of %s: %w", userID, err)
	}
	var out []Upload
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read uploads of %s: %w", userID, err)
	}
	return out, nil
}

// UploadSweep returns how far the collector of unreferenced uploads has got: the start of the
// last time slot it swept, or ErrNotFound before its first sweep.
func (s *Store) UploadSweep(ctx context.Context) (_ time.Time, err error) {
	defer s.metrics.observe(opUploadSweep, time.Now(), &err)
	doc, err := findByID[struct {
		Through time.Time `bson:"through"`
	}](ctx, s.uploadSweeps, uploadSweepID)
	if err != nil {
		return time.Time{}, err
	}
	return doc.Through, nil
}

// SetUploadSweep records that the collector swept every slot up to the one starting at through.
// Two nodes sweeping at once write the same progress, or one a little behind the other: a slot
// swept twice deletes nothing twice.
func (s *Store) SetUploadSweep(ctx context.Context, through time.Time) (err error) {
	defer s.metrics.observe(opSetUploadSweep, time.Now(), &err)
	_, err = s.uploadSweeps.UpdateOne(ctx, byID(uploadSweepID),
		bson.D{{Key: "$set", Value: bson.D{{Key: "through", Value: through}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) { // two first upserts at once: one wins
		return fmt.Errorf("record the upload sweep: %w", err)
	}
	return nil
}
