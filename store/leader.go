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

// DefaultLeaseCheck is how often a lease proves itself when the caller
// does not say.
const DefaultLeaseCheck = time.Second

// LeaseBoundFactor is how many check periods a proof of the lease stays
// valid: a leader acts only on a proof younger than LeaseBoundFactor
// times its check period, and a new leader waits that long after taking
// the lock before it acts (Lease.Settle). Three periods tolerate one check
// that is slow without letting a replica that lost the lock act for long.
const LeaseBoundFactor = 3

// heldByMe is true when the session running the statement holds the
// leader lock. A bigint advisory key shows in pg_locks as classid (high
// 32 bits) and objid (low 32 bits) with objsubid 1.
const heldByMe = `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
	AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1 AND pid = pg_backend_pid())`

// Lease is held by the one replica that plans and acts. It lives on a
// dedicated connection outside the pool: PostgreSQL releases a session
// advisory lock when its connection ends, so a leader that dies, hangs past
// TCP keepalive, or is partitioned from the database loses the lock and
// another replica can take it.
//
// A lease is proved, not assumed. Every check period it asks the server
// whether its own session still holds the lock, on the same backend, in
// the same epoch; each success is a proof dated when the question was
// sent. A proof older than the bound (LeaseBoundFactor check periods) ends
// the lease: Lost closes and every context from Context is cancelled, so
// no external action starts on a stale proof. Each acquisition takes a new
// epoch (see Epoch), which the store writes with every op update, so a
// replica that lost the lock without knowing it cannot advance an op.
type Lease struct {
	conn  *pgx.Conn
	store *Store
	pid   uint32 // the server's backend pid of the lease session
	epoch int64
	every time.Duration
	bound time.Duration
	since time.Time // when the lock was asked for (the first proof)

	lost chan struct{}
	once sync.Once
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex // serialises use of conn between the watcher and Release

	pmu     sync.Mutex // guards proof, why, cancels and expiry
	proof   time.Time
	why     string
	cancels []context.CancelCauseFunc
	expiry  *time.Timer
}

// ErrNotLeader means another replica holds the leader lock.
var ErrNotLeader = errors.New("another replica holds the leader lock")

// ErrLeaseLost means this replica can no longer prove that it holds the
// leader lock: it must not act until it leads again.
var ErrLeaseLost = errors.New("leader lease lost")

// ErrSessionPooler means the database connection does not keep a server
// session across transactions (a pooler such as PgBouncer in transaction
// or statement mode), so a session advisory lock cannot elect a leader.
var ErrSessionPooler = errors.New("the connection does not keep its server session across transactions")

// ErrFenced means a newer leader took over: the write carried this
// replica's leader epoch, which is no longer the current one.
var ErrFenced = errors.New("fenced by a newer leader")

// TryLead tries once to take the leader lock. It returns ErrNotLeader when
// another session holds it, and an error wrapping ErrSessionPooler when
// the connection goes through a pooler that breaks session locks. The
// lease proves itself every checkEvery (default 1s) and is lost when a
// proof fails or none succeeded for LeaseBoundFactor periods.
func (s *Store) TryLead(ctx context.Context, checkEvery time.Duration) (*Lease, error) {
	if checkEvery <= 0 {
		checkEvery = DefaultLeaseCheck
	}
	cc := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("leader lock: connect to %s: %w", Address(s.cfg.URL), err)
	}
	closeConn := func() { conn.Close(context.WithoutCancel(ctx)) }
	sent := time.Now()
	var ok bool
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1), pg_backend_pid()", LeaderLockKey).Scan(&ok, &pid); err != nil {
		closeConn()
		return nil, fmt.Errorf("leader lock: %w", err)
	}
	if !ok {
		closeConn()
		return nil, ErrNotLeader
	}
	if err := s.checkSession(ctx, conn, pid); err != nil {
		// Unlock on whatever backend answers; the lock was never safe.
		conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", LeaderLockKey)
		closeConn()
		return nil, err
	}
	// IMPORTANT: the epoch is raised and every open op adopted in one
	// transaction. An op write of the previous leader either committed
	// before it (and is adopted) or waits on the row and then finds the
	// new epoch (and fails): there is no moment when both may write.
	var epoch int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `UPDATE leader_epoch SET epoch = epoch + 1, holder_pid = pg_backend_pid(),
			acquired_at = now() RETURNING epoch`).Scan(&epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE ops SET epoch = $1 WHERE state IN ('pending', 'running')`, epoch)
		return err
	})
	if err != nil {
		conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", LeaderLockKey)
		closeConn()
		return nil, fmt.Errorf("leader lock: take a new epoch: %w", err)
	}
	l := &Lease{conn: conn, store: s, pid: pid, epoch: epoch, every: checkEvery,
		bound: LeaseBoundFactor * checkEvery, since: sent, proof: sent,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	l.expiry = time.AfterFunc(time.Until(sent.Add(l.bound)), func() {
		l.markLost(fmt.Sprintf("no proof of the leader lock for %s", l.bound))
	})
	s.epoch.Store(epoch)
	s.lease.Store(l)
	s.log.Info("leader lock taken", "epoch", epoch, "backend_pid", pid, "lease_bound", l.bound.String())
	go l.watch()
	return l, nil
}

// checkSession refuses a connection whose server session does not last:
// behind PgBouncer in transaction mode each transaction may run on
// another backend, so the advisory lock taken by the first one elects
// nobody (another replica's statement may run on the backend that holds
// it and "take" it again). Three separate transactions on the lease
// connection must run on the backend that holds the lock, and a
// transaction from the pool must not be able to take it.
func (s *Store) checkSession(ctx context.Context, conn *pgx.Conn, pid uint32) error {
	const fix = "connect the broker to PostgreSQL directly or through a pooler in session mode (PgBouncer pool_mode=session)"
	for range 3 {
		var now uint32
		var held bool
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), "+heldByMe, LeaderLockKey).Scan(&now, &held); err != nil {
			return fmt.Errorf("leader lock: check the session: %w", err)
		}
		if now != pid || !held {
			return fmt.Errorf("leader lock: the lock was taken by backend %d but the next transaction ran on backend %d (holding it: %t); %s: %w",
				pid, now, held, fix, ErrSessionPooler)
		}
	}
	var other uint32
	var took bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A transaction-scoped lock is released by the rollback, so the
		// probe leaves nothing behind on whichever backend runs it.
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid(), pg_try_advisory_xact_lock($1)", LeaderLockKey).Scan(&other, &took); err != nil {
			return err
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return fmt.Errorf("leader lock: probe from a second connection: %w", err)
	}
	if took {
		return fmt.Errorf("leader lock: a second connection (backend %d) could take the lock that backend %d holds: it shares the lease's server session; %s: %w",
			other, pid, fix, ErrSessionPooler)
	}
	return nil
}

var errRollback = errors.New("rollback")

// Lead blocks until this replica holds the leader lock or ctx ends, trying
// every retry interval. A connection that breaks session locks is refused
// at once (ErrSessionPooler), not retried.
func (s *Store) Lead(ctx context.Context, retry, checkEvery time.Duration) (*Lease, error) {
	if retry <= 0 {
		retry = 2 * time.Second
	}
	t := time.NewTicker(retry)
	defer t.Stop()
	for {
		l, err := s.TryLead(ctx, checkEvery)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrSessionPooler) {
			return nil, err
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

func (l *Lease) watch() {
	defer close(l.done)
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if why := l.prove(); why != "" {
			l.markLost(why)
			return
		}
	}
}

// prove asks the server once whether this session still holds the lock in
// this lease's epoch, and on success renews the proof with the time the
// question was sent. It returns why the lease is lost, or "".
func (l *Lease) prove() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	// The timer, not this timeout, bounds how long the holder may act on
	// an old proof: a slow answer may still renew it if it comes in time.
	ctx, cancel := context.WithTimeout(context.Background(), l.bound)
	defer cancel()
	var pid uint32
	var held bool
	var epoch int64
	err := l.conn.QueryRow(ctx, "SELECT pg_backend_pid(), "+heldByMe+", (SELECT epoch FROM leader_epoch)", LeaderLockKey).
		Scan(&pid, &held, &epoch)
	switch {
	case err != nil:
		return fmt.Sprintf("the lease connection failed: %s", err)
	case pid != l.pid:
		return fmt.Sprintf("the lease connection moved from backend %d to %d: a pooler in transaction mode breaks the session lock", l.pid, pid)
	case !held:
		return "the lease session no longer holds the leader lock"
	case epoch != l.epoch:
		return fmt.Sprintf("leader epoch %d was superseded by %d", l.epoch, epoch)
	}
	l.pmu.Lock()
	defer l.pmu.Unlock()
	if l.why == "" {
		l.proof = sent
		l.expiry.Reset(time.Until(sent.Add(l.bound)))
	}
	return ""
}

func (l *Lease) markLost(why string) {
	l.once.Do(func() {
		l.pmu.Lock()
		l.why = why
		l.expiry.Stop()
		cancels := l.cancels
		l.cancels = nil
		l.pmu.Unlock()
		l.store.log.Warn("leader lease lost", "epoch", l.epoch, "reason", why)
		close(l.lost)
		for _, c := range cancels {
			c(fmt.Errorf("%s: %w", why, ErrLeaseLost))
		}
	})
}

// Lost is closed when the lease can no longer be proved: its connection
// failed, the lock or the epoch moved, or no proof succeeded within the
// bound. The lock may already belong to another replica, so the holder
// must stop acting at once.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context returns a context cancelled, synchronously, the moment the lease
// is lost (its cause wraps ErrLeaseLost). The leader runs everything that
// acts under it: every cloud call, drain, decommission and signal then
// starts only while the last proof is younger than the bound.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	l.pmu.Lock()
	if l.why != "" {
		why := l.why
		l.pmu.Unlock()
		cancel(fmt.Errorf("%s: %w", why, ErrLeaseLost))
		return ctx, func() { cancel(context.Canceled) }
	}
	l.cancels = append(l.cancels, cancel)
	l.pmu.Unlock()
	return ctx, func() { cancel(context.Canceled) }
}

// Check returns nil while the newest proof is younger than the bound, and
// an error wrapping ErrLeaseLost otherwise.
func (l *Lease) Check() error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	if l.why != "" {
		return fmt.Errorf("%s: %w", l.why, ErrLeaseLost)
	}
	if age := time.Since(l.proof); age >= l.bound {
		return fmt.Errorf("the newest proof of the leader lock is %s old, over the bound of %s: %w", age.Round(time.Millisecond), l.bound, ErrLeaseLost)
	}
	return nil
}

// Settle waits until a previous leader's last proof has expired: a
// replica that lost the lock may act for at most the bound after its last
// proof, which came before this lease took the lock, so waiting out the
// bound from the acquisition keeps the two from acting at once. It
// returns early with an error when ctx ends or the lease is lost.
func (l *Lease) Settle(ctx context.Context) error {
	t := time.NewTimer(time.Until(l.since.Add(l.bound)))
	defer t.Stop()
	select {
	case <-t.C:
		return l.Check()
	case <-l.lost:
		return l.Check()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Epoch is the leader epoch this lease took: one more than the previous
// acquisition's.
func (l *Lease) Epoch() int64 { return l.epoch }

// Bound is how old a proof of the lease may be before the holder stops
// acting.
func (l *Lease) Bound() time.Duration { return l.bound }

// Release gives the lock up and closes the connection. The store keeps the
// lease's epoch, so its op writes stay fenced until it leads again.
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
	l.markLost("released")
	cerr := l.conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("release leader lock: %w", err)
	}
	return cerr
}

// BackendPID returns the lease connection's server process id (for tests
// and diagnostics).
func (l *Lease) BackendPID() uint32 { return l.pid }

// Epoch is the leader epoch this store last took, 0 if it never led. Op
// writes carry it.
func (s *Store) Epoch() int64 { return s.epoch.Load() }

// fenced builds the error for a write refused because a newer leader took
// over, and ends this store's lease so that the replica stops acting.
func (s *Store) fenced(what string, mine, cur int64) error {
	err := fmt.Errorf("%s: this replica leads in epoch %d but the leader lock is in epoch %d; it stops acting: %w", what, mine, cur, ErrFenced)
	if l := s.lease.Load(); l != nil && l.epoch == mine {
		l.markLost(err.Error())
	}
	return err
}
