package sequencer

// OwnAll makes this node the owner of every partition, as a single node is, so that a test can
// send without leases.
func (s *Sequencer) OwnAll() error {
	for p := range s.cfg.Partitions {
		if err := s.Own(p, nil); err != nil {
			return err
		}
	}
	return nil
}
