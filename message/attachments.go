package message

import (
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// FirstAttachment names a message's first file for a quote or a preview ("Photo" for an image,
// which alone has a size; else its name), or nil for a message without files.
func FirstAttachment(files []storage.Attachment) *storage.AttachmentRef {
	if len(files) == 0 {
		return nil
	}
	return &storage.AttachmentRef{Name: files[0].Name, Image: files[0].Width > 0}
}

// RefView is a stored AttachmentRef on the wire.
func RefView(r *storage.AttachmentRef) *protocol.AttachmentRef {
	if r == nil {
		return nil
	}
	return &protocol.AttachmentRef{Name: r.Name, Image: r.Image}
}

// AttachmentsView is a message's stored files on the wire.
func AttachmentsView(files []storage.Attachment) []protocol.Attachment {
	var out []protocol.Attachment
	for _, a := range files {
		out = append(out, protocol.Attachment{ID: a.ID, Name: a.Name, Size: a.Size, Type: a.ContentType,
			Width: a.Width, Height: a.Height, Thumbnail: a.Thumbnail})
	}
	return out
}
