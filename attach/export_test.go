package attach

import (
	"io"
	"time"
)

// What the package's external tests reach inside.

var (
	CleanName     = cleanName
	UploadIDOfKey = uploadIDOfKey
)

const ThumbSuffix = thumbSuffix

// HourlyLimits are the per-user limits, for their tests.
type HourlyLimits = hourlyLimits

func NewHourlyLimits(uploads int, bytes int64) *HourlyLimits { return newHourlyLimits(uploads, bytes) }

func (h *hourlyLimits) Reserve(userID string, size int64, now time.Time) (func(int64), error) {
	return h.reserve(userID, size, now)
}

func NewLimitedReader(r io.Reader, left int64) io.Reader { return &limitedReader{r: r, left: left} }

func (s *Service) SetNow(now func() time.Time) { s.now = now }

func (s *Service) KeyOf(id string, t time.Time) string { return s.keyOf(id, t) }
