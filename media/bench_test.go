package media_test

import (
	"io"
	"testing"

	"github.com/chatd/chatd/media"
)

// patternReader yields made-up bytes that start like a ZIP archive, so the input costs no memory.
type patternReader struct{ i int }

func (p *patternReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = "PK\x03\x04"[min(p.i, 3)]
		p.i++
	}
	return len(b), nil
}

// BenchmarkDetect25MiB detects the type of a 25 MiB file and streams all of it on, as an upload
// of a file that is no image does: B/op is Detect's head (SniffLen) and the copy's 32 KiB buffer,
// whatever the file's size.
func BenchmarkDetect25MiB(b *testing.B) {
	const size = 25 << 20
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		ct, all, err := media.Detect(io.LimitReader(&patternReader{}, size))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, all); err != nil || n != size || ct != "application/zip" {
			b.Fatalf("%s: copied %d bytes: %v", ct, n, err)
		}
	}
}
