package testenv

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/jpeg"
	"testing"
)

// Images for the tests of uploads: a picture whose orientation shows, and a phone's EXIF with a
// GPS position to be stripped.

// Picture is a w×h image, red on the left half and blue on the right, so a rotation shows.
func Picture(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.NRGBA{R: 255, A: 255}
			if x >= w/2 {
				c = color.NRGBA{B: 255, A: 255}
			}
			img.Set(x, y, c)
		}
	}
	return img
}

// GPSLatitude is the latitude the test's EXIF carries, 51°30'26.12" N, as three rationals.
var GPSLatitude = []uint32{51, 1, 30, 1, 2612, 100}

// EXIFWithGPS is an EXIF block (little-endian TIFF) with IFD0 holding an orientation (6: the
// camera was turned, show the picture rotated 90° clockwise) and a pointer to a GPS IFD with a
// latitude and longitude, as a phone writes them.
func EXIFWithGPS() []byte {
	le := binary.LittleEndian
	var b []byte
	u16 := func(v uint16) { b = le.AppendUint16(b, v) }
	u32 := func(v uint32) { b = le.AppendUint32(b, v) }
	entry := func(tag, typ uint16, count, value uint32) { u16(tag); u16(typ); u32(count); u32(value) }
	const ifd0, gpsIFD = 8, 8 + 2 + 2*12 + 4
	const latData = gpsIFD + 2 + 4*12 + 4
	const lonData = latData + 24
	b = append(b, "II"...)
	u16(42)
	u32(ifd0)
	u16(2)
	entry(0x0112, 3, 1, 6)      // Orientation, SHORT: 6
	entry(0x8825, 4, 1, gpsIFD) // GPSInfo IFD pointer
	u32(0)
	u16(4)
	entry(0x0001, 2, 2, uint32('N')) // GPSLatitudeRef "N"
	entry(0x0002, 5, 3, latData)     // GPSLatitude
	entry(0x0003, 2, 2, uint32('W')) // GPSLongitudeRef "W"
	entry(0x0004, 5, 3, lonData)     // GPSLongitude
	u32(0)
	for _, v := range GPSLatitude {
		u32(v)
	}
	for _, v := range []uint32{0, 1, 7, 1, 3956, 100} {
		u32(v)
	}
	return b
}

// WithEXIF inserts exif as an APP1 segment right after a JPEG's start-of-image marker.
func WithEXIF(jpg, exif []byte) []byte {
	seg := append([]byte{0xFF, 0xE1, 0, 0}, "Exif\x00\x00"...)
	seg = append(seg, exif...)
	binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)-2))
	return append(append(append([]byte{}, jpg[:2]...), seg...), jpg[2:]...)
}

// PhotoWithGPS is a w×h JPEG of Picture with EXIF holding an orientation and a GPS position,
// as a phone's camera writes it.
func PhotoWithGPS(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, Picture(w, h), nil); err != nil {
		t.Fatal(err)
	}
	return WithEXIF(b.Bytes(), EXIFWithGPS())
}

// PatternReader yields bytes made up as they are read (0, 1, ..., 255, 0, ...), so that a
// benchmark's input costs no memory and the allocations measured are those of what reads it.
type PatternReader struct{ i byte }

func (p *PatternReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = p.i
		p.i++
	}
	return len(b), nil
}
