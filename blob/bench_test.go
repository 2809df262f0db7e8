package blob_test

import (
	"fmt"
	"io"
	"testing"

	"github.com/chatd/chatd/testenv"
)

// uploadSize is the default per-file limit of attachments: the largest stream a Put carries.
const uploadSize = 25 << 20

// BenchmarkPut25MiB stores a 25 MiB stream through each implementation, with its size known (as
// an upload with a Content-Length) and unknown (chunked): B/op is what the store allocates per
// upload, to compare with the 25 MiB it carries.
func BenchmarkPut25MiB(b *testing.B) {
	for _, impl := range stores {
		for _, sized := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/sized=%v", impl.name, sized), func(b *testing.B) {
				s := impl.open(b)
				size := int64(-1)
				if sized {
					size = uploadSize
				}
				b.SetBytes(uploadSize)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					r := io.LimitReader(&testenv.PatternReader{}, uploadSize)
					if _, err := s.Put(ctxT(b), fmt.Sprintf("bench/%d", i), r, size, "application/octet-stream"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
