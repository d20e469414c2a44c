package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaderLockKey is the advisory lock key that elects gpubroker's leader
// ("gpub" in ASCII). All replicas that share a database must use the same one.
const LeaderLockKey int64 = 0x67707562

// Lease is held by the one replica that plans and acts. It lives on a
// dedicated connection outside the pool: PostgreSQL releases a session
// advisory lock when its connection ends, so a leader that dies, hangs past
// TCP keepalive, or is partitioned from the database loses the lock and
// another replica can take it.
type Lease struct {
	conn *pgx.Conn
	lost chan struct{}
	once sync.Once
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex // serialises use of conn between the watcher and Release
}

// ErrNotLeader means another replica holds the leader lock.
var ErrNotLeader = errors.New("another replica holds the leader lock")

// TryLead tries once to take the leader lock. It returns ErrNotLeader when
// another session holds it. The lease checks its connection every
// checkEvery (default 2s) and closes Lost() when the connection fails.
func (s *Store) TryLead(ctx context.Context, checkEvery time.Duration) (*Lease, error) {
	if checkEvery <= 0 {
		checkEvery = 2 * time.Second
	}
	cc := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("leader lock: connect to %s: %w", Address(s.cfg.URL), err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LeaderLockKey).Scan(&ok); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("leader lock: %w", err)
	}
	if !ok {
		conn.Close(ctx)
		return nil, ErrNotLeader
	}
	l := &Lease{conn: conn, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.watch(checkEvery)
	return l, nil
}

// Lead blocks until this replica holds the leader lock or ctx ends, trying
// every retry interval.
func (s *Store) Lead(ctx context.Context, retry, checkEvery time.Duration) (*Lease, error) {
	t := time.NewTicker(retry)
	defer t.Stop()
	for {
		l, err := s.TryLead(ctx, checkEvery)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrNotLeader) {
			s.log.Warn("leader lock attempt failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *Lease) watch(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := l.conn.Ping(ctx)
		cancel()
		l.mu.Unlock()
		if err != nil {
			l.markLost()
			return
		}
	}
}

func (l *Lease) markLost() { l.once.Do(func() { close(l.lost) }) }

// Lost is closed when the lease's connection failed: the lock may already
// belong to another replica, so the holder must stop acting at once.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Release gives the lock up and closes the connection.
func (l *Lease) Release(ctx context.Context) error {
	select {
	case <-l.stop:
		return nil
	default:
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", LeaderLockKey)
	l.markLost()
	cerr := l.conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("release leader lock: %w", err)
	}
	return cerr
}

// BackendPID returns the lease connection's server process id (for tests
// and diagnostics).
func (l *Lease) BackendPID() uint32 { return l.conn.PgConn().PID() }
