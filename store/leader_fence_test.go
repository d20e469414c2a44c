package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// openReplica opens a second store on the same database, as another
// replica would.
func openReplica(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// terminate ends a backend from outside, as a failover or a proxy that
// cuts the connection does: the server drops the session and its locks.
func terminate(t *testing.T, url string, pid uint32) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var ok bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
}

// TestStaleLeaderOpWritesAreFenced: the leader's session ends (its
// connection is cut) but it has not noticed yet — its lease checks only
// once a minute here — and another replica takes the lock. The new
// leader's epoch is higher and it adopted the open op; every op write of
// the old one fails with ErrFenced, which also ends its lease and cancels
// its acting context, while the new leader's writes go through.
func TestStaleLeaderOpWritesAreFenced(t *testing.T) {
	ctx := context.Background()
	_, url := newStore(t)
	a, b := openReplica(t, url), openReplica(t, url)

	la, err := a.TryLead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	actA, stopA := la.Context(ctx)
	defer stopA()
	op, err := a.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "a100", Target: 3, Reason: "demand", Step: broker.StepSetDesired})
	if err != nil {
		t.Fatalf("leader journals: %v", err)
	}
	op.State = broker.OpRunning
	if op, err = a.AdvanceOp(ctx, op); err != nil {
		t.Fatalf("leader advances its op: %v", err)
	}

	terminate(t, url, la.BackendPID())
	lb, err := b.Lead(ctx, 50*time.Millisecond, time.Second)
	if err != nil {
		t.Fatalf("the other replica takes over: %v", err)
	}
	defer lb.Release(ctx)
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("new epoch %d is not above the old %d", lb.Epoch(), la.Epoch())
	}

	stale := op
	stale.Step = broker.StepAwaitInstances
	if _, err := a.AdvanceOp(ctx, stale); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("old leader's op update: got %v, want ErrFenced", err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("a fenced write must end the old leader's lease")
	}
	if actA.Err() == nil || !errors.Is(context.Cause(actA), store.ErrLeaseLost) {
		t.Fatalf("the old leader's acting context must be cancelled with ErrLeaseLost, got %v", context.Cause(actA))
	}
	if _, err := a.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Node: "n9", Reason: "idle", Step: broker.StepRelease}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("old leader's journal insert: got %v, want ErrFenced", err)
	}
	open, err := b.OpenOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].ID != op.ID || open[0].Step != broker.StepSetDesired {
		t.Fatalf("open ops after the fenced writes: %+v, want only op %d still at %s", open, op.ID, broker.StepSetDesired)
	}

	next := open[0]
	next.Step = broker.StepAwaitInstances
	if _, err := b.AdvanceOp(ctx, next); err != nil {
		t.Fatalf("new leader advances the adopted op: %v", err)
	}
	if _, err := b.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Node: "n9", Reason: "idle", Step: broker.StepRelease}); err != nil {
		t.Fatalf("new leader journals: %v", err)
	}
}

// TestLeaseWithoutProofStopsActing: a leader whose lease checks get no
// answer (the epoch table is locked, as a hung or partitioned database
// would leave them) loses the lease once its newest proof is older than
// the bound, and the context it acts under is cancelled then.
func TestLeaseWithoutProofStopsActing(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t)
	l, err := s.TryLead(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Bound() != store.LeaseBoundFactor*100*time.Millisecond {
		t.Fatalf("bound %s", l.Bound())
	}
	act, stop := l.Context(ctx)
	defer stop()
	if err := l.Check(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE leader_epoch IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-act.Done():
	case <-time.After(time.Minute):
		t.Fatal("the acting context outlived its lease by a minute")
	}
	cause := context.Cause(act)
	if !errors.Is(cause, store.ErrLeaseLost) || !strings.Contains(cause.Error(), "no proof") {
		t.Fatalf("cause: %v, want no proof within the bound (ErrLeaseLost)", cause)
	}
	if err := l.Check(); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Check after the bound: %v", err)
	}
}

// TestNewLeaderSettlesBeforeActing: Settle returns no earlier than the
// bound after the lock was asked for, the longest a replica that lost it
// may still act on its last proof.
func TestNewLeaderSettlesBeforeActing(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	asked := time.Now()
	l, err := s.TryLead(ctx, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(asked); waited < l.Bound() {
		t.Fatalf("settled after %s, before the bound of %s", waited, l.Bound())
	}
}

// TestEpochRisesPerAcquisition: each acquisition takes a new epoch and the
// store remembers it for its writes.
func TestEpochRisesPerAcquisition(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	var last int64
	for range 3 {
		l, err := s.TryLead(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Epoch() <= last || s.Epoch() != l.Epoch() {
			t.Fatalf("epoch %d (store %d) after %d", l.Epoch(), s.Epoch(), last)
		}
		last = l.Epoch()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseLostWhenEpochMoves: a lease whose epoch is no longer the
// current one (another acquisition raised it) fails its next proof.
func TestLeaseLostWhenEpochMoves(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t)
	l, err := s.TryLead(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "UPDATE leader_epoch SET epoch = epoch + 1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(time.Minute):
		t.Fatal("a lease whose epoch moved is still held after a minute")
	}
	if err := l.Check(); !errors.Is(err, store.ErrLeaseLost) || !strings.Contains(err.Error(), "superseded") {
		t.Fatalf("Check: %v, want the epoch superseded", err)
	}
}

// TestLeaseLostWhenLockOrBackendMoves: the periodic proof fails, and the
// acting context ends with the reason, when the lease's session no longer
// holds the lock, and when its connection reaches another server backend
// than the one that took the lock (a pooler handing the session over).
func TestLeaseLostWhenLockOrBackendMoves(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		move       func(*store.Lease) error
	}{
		{"lock released", "no longer holds the leader lock", store.UnlockLeaseForTest},
		{"backend moved", "a pooler in transaction mode", func(l *store.Lease) error {
			store.MoveLeaseBackendForTest(l)
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := newStore(t)
			l, err := s.TryLead(ctx, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			act, stop := l.Context(ctx)
			defer stop()
			if err := l.Check(); err != nil {
				t.Fatalf("fresh lease: %v", err)
			}
			if err := tc.move(l); err != nil {
				t.Fatal(err)
			}
			select {
			case <-act.Done():
			case <-time.After(time.Minute):
				t.Fatal("the acting context outlived the broken lease by a minute")
			}
			if cause := context.Cause(act); !errors.Is(cause, store.ErrLeaseLost) || !strings.Contains(cause.Error(), tc.want) {
				t.Fatalf("cause: %v, want ErrLeaseLost saying %q", cause, tc.want)
			}
			if err := l.Check(); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatalf("Check: %v", err)
			}
		})
	}
}
