package attach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chatd/chatd/storage"
)

// StartCollector starts the collector of unreferenced uploads: every SweepInterval it sweeps
// the slots whose uploads are all older than the pending TTL (sweep). Close stops it.
func (s *Service) StartCollector() {
	s.done.Go(func() {
		t := time.NewTicker(s.cfg.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				ctx, cancel := context.WithTimeout(s.stopped, sweepTimeout)
				if err := s.sweep(ctx); err != nil && s.stopped.Err() == nil {
					s.log.Warn().Err(err).Msg("collect unreferenced uploads; the next sweep goes on from where this one stopped")
				}
				cancel()
			case <-s.stopped.Done():
				return
			}
		}
	})
}

// Close stops the collector, ending a sweep under way, and waits for it.
func (s *Service) Close() {
	s.stop()
	s.done.Wait()
}

// sweep goes through the slots after the last one swept up to the newest whose uploads are all
// past the pending TTL, each once (the store keeps how far the sweeps got), at most
// maxSlotsPerSweep of them.
func (s *Service) sweep(ctx context.Context) error {
	cutoff := s.now().Add(-s.cfg.PendingTTL)
	last := s.slotOf(cutoff).Add(-s.cfg.SweepSlot) // its uploads all started before cutoff
	through, err := s.store.UploadSweep(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		through = last.Add(-sweepLookbackSlots * s.cfg.SweepSlot)
	} else if err != nil {
		return err
	}
	for n, slot := 0, through.Add(s.cfg.SweepSlot); !slot.After(last) && n < maxSlotsPerSweep; n, slot = n+1, slot.Add(s.cfg.SweepSlot) {
		if err := s.sweepSlot(ctx, slot); err != nil {
			return err
		}
		if err := s.store.SetUploadSweep(ctx, slot); err != nil {
			return err
		}
	}
	return nil
}

// sweepSlot deletes what no message holds among the objects of one slot: uploads still pending,
// uploads marked attached to a send that was never stored (its owner failed after marking them,
// and the client did not retry), and objects without a record (a node failed between storing
// an object and its record).
func (s *Service) sweepSlot(ctx context.Context, slot time.Time) error {
	keys := make(map[string][]string) // by upload id
	var ids []string
	for info, err := range s.blobs.ListOlder(ctx, slotPrefix(slot), s.now().Add(-s.cfg.PendingTTL)) {
		if err != nil {
			return err
		}
		id := uploadIDOfKey(info.Key)
		if _, ok := keys[id]; !ok {
			ids = append(ids, id)
		}
		keys[id] = append(keys[id], info.Key)
	}
	if len(ids) == 0 {
		return nil
	}
	uploads, err := s.store.Uploads(ctx, ids)
	if err != nil {
		return err
	}
	var collect []storage.Upload
	for _, id := range ids {
		u, ok := uploads[id]
		if !ok {
			if err := s.deleteObjects(ctx, keys[id]...); err != nil {
				return err
			}
			s.metrics.deleted(deletedOrphan, 1)
			continue
		}
		if u.ClientMsgID != "" {
			_, err := s.store.MessageByClientID(ctx, u.ConversationID, u.ClientMsgID)
			if err == nil {
				continue // attached to a stored message: it goes with the message
			}
			if !errors.Is(err, storage.ErrNotFound) {
				return fmt.Errorf("look up the send of upload %s: %w", id, err)
			}
		}
		collect = append(collect, u)
	}
	_, err = s.deleteUploads(ctx, collect, deletedCollected)
	return err
}
