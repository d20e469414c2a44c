package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// noPools is a provider with no groups, enough for a tick loop with no
// sides to run.
type noPools struct{}

func (noPools) Pools(context.Context) ([]broker.PoolState, error) { return nil, nil }
func (noPools) SetDesired(context.Context, string, int) error     { return nil }
func (noPools) Terminate(context.Context, string, string) error   { return nil }

// TestLeaderFailover runs two replicas' leadership loops on one database:
// one leads, the other stands by, and when the leader stops the other
// takes over within seconds.
func TestLeaderFailover(t *testing.T) {
	url := pg.NewDatabase(t, store.Migrate)
	type replica struct {
		ar     *apiRuntime
		cancel context.CancelFunc
		done   chan error
	}
	start := func() replica {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := store.Open(ctx, store.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		m, err := Open(ctx, Config{Store: st, Cloud: CloudConfig{NodePool: noPools{}}, Period: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		first, err := m.NewRuntime()
		if err != nil {
			t.Fatal(err)
		}
		r := replica{ar: &apiRuntime{}, cancel: cancel, done: make(chan error, 1)}
		r.ar.rt.Store(first)
		go func() { r.done <- lead(ctx, st, r.ar, m.NewRuntime, m.Trigger(), slog.New(slog.DiscardHandler)) }()
		return r
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	a := start()
	wait("the first replica to lead", func() bool { return a.ar.leader.Load() })
	b := start()
	time.Sleep(time.Second)
	if b.ar.leader.Load() {
		t.Fatal("two leaders at once")
	}
	if err := b.ar.Drain(context.Background(), "n1"); err == nil {
		t.Fatal("a follower must refuse node operations")
	}
	wait("the leader to tick", func() bool { return a.ar.Status().LastTick.After(time.Time{}) })
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("leader loop: %v", err)
	}
	took := time.Now()
	wait("the standby to take over", func() bool { return b.ar.leader.Load() })
	wait("the new leader to tick", func() bool { return b.ar.Status().LastTick.After(took) })
	t.Logf("standby led and ticked %s after the leader stopped", time.Since(took).Round(time.Millisecond))
	b.cancel()
	<-b.done
}
