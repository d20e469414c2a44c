package store

import (
	"context"
	"fmt"
	"time"
)

// ChangesChannel is the PostgreSQL notification channel the leader
// notifies after each tick (and a replica after an API write), so every
// replica's read model (api.ReadModel) drops its cached answers at once
// instead of waiting for them to age out.
const ChangesChannel = "gpubroker_changes"

// NotifyChanged tells every listening replica that the state the read
// routes serve has changed; payload says who sent it (api.ReadModel).
func (s *Store) NotifyChanged(ctx context.Context, payload string) error {
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", ChangesChannel, payload); err != nil {
		return mapError("notify "+ChangesChannel, err)
	}
	return nil
}

// ListenChanged calls changed with the payload of every notification on
// ChangesChannel until ctx ends, on a connection of its own. A lost
// connection is reconnected after retry; changed is also called, with an
// empty payload, after each (re)connect, since notifications sent while no
// connection listened are lost.
func (s *Store) ListenChanged(ctx context.Context, retry time.Duration, changed func(payload string)) {
	for ctx.Err() == nil {
		err := s.listen(ctx, changed)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listen for changes; retrying", "channel", ChangesChannel, "err", err, "retry_s", retry.Seconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (s *Store) listen(ctx context.Context, changed func(string)) error {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	// The connection carries the LISTEN: it must not go back to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+ChangesChannel); err != nil {
		return mapError("listen "+ChangesChannel, err)
	}
	changed("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for a notification: %w", err)
		}
		changed(n.Payload)
	}
}
