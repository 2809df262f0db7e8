// Package media tells what an uploaded file is from its bytes, never from what the client says,
// and turns an image that browsers may show inline (JPEG, PNG, GIF, WebP) into a clean copy,
// re-encoded with no EXIF, GPS position or other metadata, and a thumbnail. Memory stays bounded:
// a file's type is read from its first bytes while the rest streams on, and an image is decoded
// only if its pixel count is within a limit, checked from its header before any pixel is.
package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"mime"

	"github.com/disintegration/imaging"
	"github.com/gabriel-vasile/mimetype"
	_ "golang.org/x/image/webp" // registers WebP with image.Decode
)

// SniffLen is how many bytes Detect reads: mimetype's own default, enough for every signature
// it knows, including text formats (HTML, SVG) that may start after a long preamble.
const SniffLen = 3072

// DefaultMaxPixels is the default of Config.MaxPixels: a 24-megapixel camera photo fits. Decoding
// takes up to 4 bytes a pixel (about 100 MB at the limit), so the caller also bounds how many
// images are decoded at once.
const DefaultMaxPixels = 25_000_000

// DefaultThumbnailSide is the default of Config.ThumbnailSide: the longest side, in pixels, of
// a thumbnail, enough for an inline preview on a phone at twice its CSS pixels.
const DefaultThumbnailSide = 320

// maxHeaderLen bounds what is read to find an image's dimensions. A JPEG may put metadata
// segments (EXIF, ICC profiles: up to 64 KiB each) before its frame header; this leaves room for
// many and refuses a file that claims to be an image and never says its size.
const maxHeaderLen = 1 << 20

// jpegQuality is the quality of re-encoded JPEGs: visually lossless for photos, at about half
// the size of a phone camera's own output.
const jpegQuality = 88

// ErrNotImage is wrapped by Decode's error for bytes that are not a decodable JPEG, PNG, GIF or
// WebP image: they are stored and served as a file to download.
var ErrNotImage = errors.New("not a decodable JPEG, PNG, GIF or WebP image")

// ErrTooManyPixels is wrapped by Decode's error for an image larger than Config.MaxPixels, such
// as a decompression bomb: a small file that would decode to gigabytes.
var ErrTooManyPixels = errors.New("image has too many pixels")

// Detect returns the media type of the bytes r starts with (such as "image/png" or
// "text/html; charset=utf-8"; "application/octet-stream" for unknown bytes) and a reader that
// yields all of r's bytes again, those read and the rest. It reads at most SniffLen bytes of r.
func Detect(r io.Reader) (contentType string, all io.Reader, err error) {
	head := make([]byte, SniffLen)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", nil, fmt.Errorf("detect type: %w", err)
	}
	head = head[:n]
	return mimetype.Detect(head).String(), io.MultiReader(bytes.NewReader(head), r), nil
}

// inlineTypes are the image types a browser may show in the page: raster formats that cannot
// carry script. SVG can, and HTML is a page: never inline.
var inlineTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// IsInlineImage reports whether content of type contentType may be shown inline (as an <img>)
// rather than only downloaded. It says so of a type; only a clean copy from Image.Encode, whose
// type it is given, should be served inline.
func IsInlineImage(contentType string) bool {
	t, _, err := mime.ParseMediaType(contentType)
	return err == nil && inlineTypes[t]
}

// Config sets the limits of Decode.
type Config struct {
	// MaxPixels is the largest width×height Decode accepts. Default DefaultMaxPixels.
	MaxPixels int
	// ThumbnailSide is the longest side of a thumbnail. Default DefaultThumbnailSide.
	ThumbnailSide int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxPixels: DefaultMaxPixels, ThumbnailSide: DefaultThumbnailSide}
}

// Validate returns an error if a limit is not positive.
func (c Config) Validate() error {
	if c.MaxPixels <= 0 || c.ThumbnailSide <= 0 {
		return fmt.Errorf("media: MaxPixels (%d) and ThumbnailSide (%d) must be positive", c.MaxPixels, c.ThumbnailSide)
	}
	return nil
}

// Image is a decoded image, turned upright as its EXIF orientation said, its metadata gone.
type Image struct {
	// Width and Height are its size in pixels, upright.
	Width, Height int
	// ContentType is the type Encode writes: the original's for JPEG, PNG and GIF, PNG for
	// WebP (Go has no WebP encoder; PNG keeps its transparency and quality).
	ContentType string

	img       image.Image
	format    imaging.Format
	thumbSide int
}

// Decode reads a JPEG, PNG, GIF or WebP image from r. It reads the image's header first and
// refuses, wrapping ErrTooManyPixels, an image larger than cfg.MaxPixels before decoding it, so
// memory stays bounded by the limit; anything else is refused wrapping ErrNotImage. Only a GIF's
// first frame is kept: a still image. r is read until the image ends, not necessarily to EOF.
func Decode(r io.Reader, cfg Config) (*Image, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var head bytes.Buffer
	conf, format, err := image.DecodeConfig(io.TeeReader(io.LimitReader(r, maxHeaderLen), &head))
	if err != nil {
		return nil, fmt.Errorf("%w: read header: %w", ErrNotImage, err)
	}
	var out imaging.Format
	contentType := "image/" + format
	switch format {
	case "jpeg":
		out = imaging.JPEG
	case "png", "webp":
		out, contentType = imaging.PNG, "image/png"
	case "gif":
		out = imaging.GIF
	default: // BMP and TIFF, which imaging registers too: not for the page
		return nil, fmt.Errorf("%w: %s", ErrNotImage, format)
	}
	if int64(conf.Width)*int64(conf.Height) > int64(cfg.MaxPixels) {
		return nil, fmt.Errorf("%w: %d×%d is more than %d", ErrTooManyPixels, conf.Width, conf.Height, cfg.MaxPixels)
	}
	img, err := imaging.Decode(io.MultiReader(&head, r), imaging.AutoOrientation(true))
	if err != nil {
		return nil, fmt.Errorf("%w: decode %s: %w", ErrNotImage, format, err)
	}
	b := img.Bounds()
	return &Image{Width: b.Dx(), Height: b.Dy(), ContentType: contentType, img: img, format: out, thumbSide: cfg.ThumbnailSide}, nil
}

// Encode writes the image in the format of ContentType. Go's encoders write pixels and what
// decoding them needs, nothing else: no EXIF, XMP, comments or text chunks.
func (im *Image) Encode(w io.Writer) error {
	var err error
	switch im.format {
	case imaging.JPEG:
		err = jpeg.Encode(w, im.img, &jpeg.Options{Quality: jpegQuality})
	case imaging.GIF:
		err = gif.Encode(w, im.img, nil)
	default:
		err = png.Encode(w, im.img)
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", im.ContentType, err)
	}
	return nil
}

// Thumbnail returns the image scaled down to fit in a square of Config.ThumbnailSide pixels, its
// proportions kept (never enlarged). A JPEG's thumbnail is a JPEG; any other's a PNG, which keeps
// transparency.
func (im *Image) Thumbnail() *Image {
	side, img := im.thumbSide, im.img
	if im.Width > side || im.Height > side {
		img = imaging.Fit(im.img, side, side, imaging.Lanczos)
	}
	t := &Image{Width: img.Bounds().Dx(), Height: img.Bounds().Dy(), ContentType: "image/png", img: img, format: imaging.PNG, thumbSide: side}
	if im.format == imaging.JPEG {
		t.ContentType, t.format = "image/jpeg", imaging.JPEG
	}
	return t
}
