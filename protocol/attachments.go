package protocol

import "time"

// Attachments: files are uploaded over HTTP first (pending, owned by the uploader), then a send
// names them by id in its attachments field, and the message carries what clients need to show
// them (docs/PROTOCOL.md, "Attachments").

// MaxAttachments bounds the ids one send frame may name, whatever the server's configured limit
// (which is lower or equal): it bounds the owner's reads for one send.
const MaxAttachments = 32

// Attachment is one file of a message as every member sees it. Width and Height are those of an
// image shown inline (zero for other files), so a page reserves the space before it loads.
type Attachment struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Type is the media type detected from the file's bytes, never the uploader's word.
	Type   string `json:"type"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
	// Thumbnail says a small preview of the image can be downloaded.
	Thumbnail bool `json:"thumbnail,omitempty"`
}

// Upload is what an upload answers (HTTP): the pending upload, whose ID a send names in its
// attachments, and when it was made (a send must attach it within half the server's upload TTL).
type Upload struct {
	Attachment
	CreatedAt time.Time `json:"createdAt"`
}

// FileLink is a signed download link of a file, and of its thumbnail when it has one: what an
// <img> can load without headers, until ExpiresAt.
type FileLink struct {
	URL       string    `json:"url"`
	Thumbnail string    `json:"thumbnailUrl,omitempty"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// AttachmentRef is how a quote or a list preview names a message's first file: its name, and
// Image when it is an image shown inline (a page says "Photo").
type AttachmentRef struct {
	Name  string `json:"name"`
	Image bool   `json:"image,omitempty"`
}

// validAttachments checks a send's upload ids: valid ids, none twice, at most MaxAttachments.
func validAttachments(ids []string) error {
	if len(ids) > MaxAttachments {
		return Errorf(CodeInvalidField, "attachments names more than %d uploads", MaxAttachments)
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if err := requireID("attachments", id); err != nil {
			return err
		}
		if seen[id] {
			return Errorf(CodeInvalidField, "attachments names upload %s twice", id)
		}
		seen[id] = true
	}
	return nil
}
