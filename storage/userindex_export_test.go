package storage

// SetAfterMembershipsWrite makes every write of memberships run f before the write is read back,
// so a test can lose the write there, as a racing update on the embedded store can.
func SetAfterMembershipsWrite(s *Store, f func()) { s.memberships.afterWrite = f }
