package media_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/chatd/chatd/media"
	"github.com/chatd/chatd/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

func encodeJPEG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// jpegMarkers returns the markers of a JPEG's segments up to its image data.
func jpegMarkers(t *testing.T, b []byte) []byte {
	t.Helper()
	var markers []byte
	for i := 2; i+4 <= len(b); {
		if b[i] != 0xFF {
			t.Fatalf("no marker at %d", i)
		}
		markers = append(markers, b[i+1])
		if b[i+1] == 0xDA { // start of scan: entropy-coded data follows
			break
		}
		i += 2 + int(binary.BigEndian.Uint16(b[i+2:]))
	}
	return markers
}

func decode(t *testing.T, data []byte) *media.Image {
	t.Helper()
	im, err := media.Decode(bytes.NewReader(data), media.DefaultConfig())
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return im
}

func encode(t *testing.T, im *media.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := im.Encode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestJPEGLosesItsGPSPosition: a photo with GPS EXIF comes back as a JPEG without any EXIF,
// turned upright as its EXIF said.
func TestJPEGLosesItsGPSPosition(t *testing.T) {
	exif := testenv.EXIFWithGPS()
	upload := testenv.WithEXIF(encodeJPEG(t, testenv.Picture(40, 20)), exif)
	if ct, _, _ := media.Detect(bytes.NewReader(upload)); ct != "image/jpeg" {
		t.Fatalf("detected %s", ct)
	}
	if m := jpegMarkers(t, upload); m[0] != 0xE1 {
		t.Fatalf("the upload has no EXIF segment first: %x", m)
	}

	im := decode(t, upload)
	if im.ContentType != "image/jpeg" || im.Width != 20 || im.Height != 40 {
		t.Fatalf("decoded %s %d×%d, want image/jpeg 20×40 (40×20 turned by its orientation)", im.ContentType, im.Width, im.Height)
	}
	clean := encode(t, im)
	for _, m := range jpegMarkers(t, clean) {
		if m >= 0xE0 && m <= 0xEF || m == 0xFE { // APPn (EXIF, XMP, ICC, JFIF) and comments
			t.Errorf("the clean copy has a metadata segment FF%X", m)
		}
	}
	var lat []byte
	for _, v := range testenv.GPSLatitude {
		lat = binary.LittleEndian.AppendUint32(lat, v)
	}
	for _, leak := range [][]byte{[]byte("Exif"), []byte("II*\x00"), lat} {
		if bytes.Contains(clean, leak) {
			t.Errorf("the clean copy contains %q", leak)
		}
	}
	back, err := jpeg.Decode(bytes.NewReader(clean))
	if err != nil {
		t.Fatalf("the clean copy is no JPEG: %v", err)
	}
	// Turned clockwise, the left (red) half is on top.
	if r, _, b, _ := back.At(10, 5).RGBA(); r < b {
		t.Errorf("top of the upright image is not red: r %d b %d", r, b)
	}
}

// pngChunk is a PNG chunk with its CRC.
func pngChunk(typ string, data []byte) []byte {
	c := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	c = append(c, typ...)
	c = append(c, data...)
	return binary.BigEndian.AppendUint32(c, crc32.ChecksumIEEE(c[4:]))
}

// pngChunkTypes lists the chunk types of a PNG.
func pngChunkTypes(t *testing.T, b []byte) []string {
	t.Helper()
	var types []string
	for i := 8; i+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[i:]))
		types = append(types, string(b[i+4:i+8]))
		i += 12 + n
	}
	return types
}

// TestPNGLosesItsMetadataAndTrailer: text and EXIF chunks are gone from a PNG's clean copy, and
// so is anything hidden after its end (a PNG that is also an HTML page).
func TestPNGLosesItsMetadataAndTrailer(t *testing.T) {
	src := encodePNG(t, testenv.Picture(30, 10))
	ihdrEnd := 8 + 25
	upload := append([]byte{}, src[:ihdrEnd]...)
	upload = append(upload, pngChunk("tEXt", []byte("Comment\x00taken at home"))...)
	upload = append(upload, pngChunk("eXIf", testenv.EXIFWithGPS())...)
	upload = append(upload, src[ihdrEnd:]...)
	upload = append(upload, "<html><script>alert(document.cookie)</script>"...)

	im := decode(t, upload)
	if im.ContentType != "image/png" || im.Width != 30 || im.Height != 10 {
		t.Fatalf("decoded %s %d×%d", im.ContentType, im.Width, im.Height)
	}
	clean := encode(t, im)
	for _, typ := range pngChunkTypes(t, clean) {
		if typ != "IHDR" && typ != "IDAT" && typ != "IEND" {
			t.Errorf("the clean copy has a %s chunk", typ)
		}
	}
	if bytes.Contains(clean, []byte("<script>")) || bytes.Contains(clean, []byte("taken at home")) {
		t.Error("the clean copy kept what followed or annotated the image")
	}
}

// TestHugePNGIsRefusedBeforeDecoding: a PNG that says it is 100,000×100,000 (40 GB decoded,
// a few dozen bytes on the wire) is refused from its header.
func TestHugePNGIsRefusedBeforeDecoding(t *testing.T) {
	ihdr := binary.BigEndian.AppendUint32(nil, 100_000)
	ihdr = binary.BigEndian.AppendUint32(ihdr, 100_000)
	ihdr = append(ihdr, 8, 6, 0, 0, 0) // 8-bit RGBA
	bomb := append([]byte("\x89PNG\r\n\x1a\n"), pngChunk("IHDR", ihdr)...)
	bomb = append(bomb, pngChunk("IDAT", []byte{0x78, 0x9c})...)
	_, err := media.Decode(bytes.NewReader(bomb), media.DefaultConfig())
	if !errors.Is(err, media.ErrTooManyPixels) {
		t.Fatalf("decode: %v, want ErrTooManyPixels", err)
	}
	if !strings.Contains(err.Error(), "100000×100000") {
		t.Errorf("the error does not say the size: %v", err)
	}

	// The limit is the configured one: a 200×200 image is refused under 10,000 pixels.
	_, err = media.Decode(bytes.NewReader(encodePNG(t, testenv.Picture(200, 200))), media.Config{MaxPixels: 10_000, ThumbnailSide: 10})
	if !errors.Is(err, media.ErrTooManyPixels) {
		t.Fatalf("decode under a small limit: %v, want ErrTooManyPixels", err)
	}
}

// TestHostileFilesAreNotImages: what a browser would run (HTML, whatever its name; SVG with
// script) is detected for what it is, is not an inline image, and does not decode as one.
func TestHostileFilesAreNotImages(t *testing.T) {
	cases := []struct {
		name, content, wantType string
	}{
		{"page.png", "<!DOCTYPE html><html><body><script>fetch('/api/account')</script></body></html>", "text/html"},
		{"photo.jpg", "<html><img src=x onerror=alert(1)>", "text/html"},
		{"logo.svg", `<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`, "image/svg+xml"},
		{"drawing.png", `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`, "image/svg+xml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct, all, err := media.Detect(strings.NewReader(c.content))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ct, c.wantType) {
				t.Errorf("detected %q, want %s", ct, c.wantType)
			}
			if media.IsInlineImage(ct) {
				t.Errorf("%s is an inline image", ct)
			}
			if _, err := media.Decode(all, media.DefaultConfig()); !errors.Is(err, media.ErrNotImage) {
				t.Errorf("decode: %v, want ErrNotImage", err)
			}
		})
	}
}

func TestIsInlineImage(t *testing.T) {
	for ct, want := range map[string]bool{
		"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true,
		"IMAGE/PNG": true, "image/png; charset=binary": true,
		"image/svg+xml": false, "text/html; charset=utf-8": false, "image/bmp": false, "image/tiff": false,
		"application/octet-stream": false, "": false, "image/png;;": false,
	} {
		if got := media.IsInlineImage(ct); got != want {
			t.Errorf("IsInlineImage(%q) = %v", ct, got)
		}
	}
}

// TestGIFAndWebP: a GIF's clean copy is its first frame as a GIF; a WebP's is a PNG.
func TestGIFAndWebP(t *testing.T) {
	pal := color.Palette{color.Black, color.White}
	anim := &gif.GIF{}
	for i := range 3 {
		f := image.NewPaletted(image.Rect(0, 0, 16, 8), pal)
		f.SetColorIndex(i, 0, 1)
		anim.Image, anim.Delay = append(anim.Image, f), append(anim.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, anim); err != nil {
		t.Fatal(err)
	}
	im := decode(t, b.Bytes())
	if im.ContentType != "image/gif" || im.Width != 16 || im.Height != 8 {
		t.Fatalf("gif decoded as %s %d×%d", im.ContentType, im.Width, im.Height)
	}
	if _, err := gif.Decode(bytes.NewReader(encode(t, im))); err != nil {
		t.Fatalf("the clean gif: %v", err)
	}

	webp, err := os.ReadFile("testdata/blue-purple-pink.lossy.webp")
	if err != nil {
		t.Fatal(err)
	}
	if ct, _, _ := media.Detect(bytes.NewReader(webp)); ct != "image/webp" {
		t.Fatalf("detected %s", ct)
	}
	im = decode(t, webp)
	if im.ContentType != "image/png" {
		t.Fatalf("webp's clean copy is %s", im.ContentType)
	}
	back, err := png.Decode(bytes.NewReader(encode(t, im)))
	if err != nil || back.Bounds().Dx() != im.Width || back.Bounds().Dy() != im.Height {
		t.Fatalf("the clean webp: %v, %v", back.Bounds(), err)
	}
}

func TestThumbnail(t *testing.T) {
	cases := []struct {
		name         string
		data         []byte
		wantW, wantH int
		wantType     string
	}{
		{"wide jpeg", encodeJPEG(t, testenv.Picture(1280, 640)), 320, 160, "image/jpeg"},
		{"tall png", encodePNG(t, testenv.Picture(100, 1000)), 32, 320, "image/png"},
		{"small png stays its size", encodePNG(t, testenv.Picture(50, 40)), 50, 40, "image/png"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := decode(t, c.data).Thumbnail()
			if th.Width != c.wantW || th.Height != c.wantH || th.ContentType != c.wantType {
				t.Fatalf("thumbnail %s %d×%d, want %s %d×%d", th.ContentType, th.Width, th.Height, c.wantType, c.wantW, c.wantH)
			}
			conf, format, err := image.DecodeConfig(bytes.NewReader(encode(t, th)))
			if err != nil || conf.Width != c.wantW || conf.Height != c.wantH || "image/"+format != c.wantType {
				t.Fatalf("encoded thumbnail: %s %d×%d, %v", format, conf.Width, conf.Height, err)
			}
		})
	}
}

// countingReader counts what is read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestDetectReadsOnlyTheHead: Detect of a 25 MiB file reads SniffLen bytes of it, and the
// reader it returns yields the whole file, byte for byte.
func TestDetectReadsOnlyTheHead(t *testing.T) {
	data := append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte{0xA5, 0x5A, 0x01}, 25<<20/3)...)
	src := &countingReader{r: bytes.NewReader(data)}
	ct, all, err := media.Detect(src)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "application/pdf" || src.n > media.SniffLen {
		t.Fatalf("detected %s after reading %d bytes", ct, src.n)
	}
	got, err := io.ReadAll(all)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the reader yielded %d bytes of %d (%v)", len(got), len(data), err)
	}
	if ct, all, err := media.Detect(strings.NewReader("hi")); ct != "text/plain; charset=utf-8" || err != nil {
		t.Fatalf("a 2-byte file: %s, %v", ct, err)
	} else if b, _ := io.ReadAll(all); string(b) != "hi" {
		t.Fatalf("a 2-byte file read back as %q", b)
	}
}
