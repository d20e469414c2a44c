package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/store"
)

// partitionProxy forwards one replica's database connections and can
// partition it: the server side of every connection is closed, so
// PostgreSQL ends the replica's sessions and releases its leader lock, while
// the replica's side stays open and silent, as behind a network partition
// or a failover it has not noticed: its queries neither fail nor answer.
type partitionProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	ups    map[net.Conn]struct{}
	downs  map[net.Conn]struct{}
	parted bool
}

func newPartitionProxy(t *testing.T, target string) *partitionProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{ln: ln, target: target, ups: map[net.Conn]struct{}{}, downs: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *partitionProxy) forward(c net.Conn) {
	p.mu.Lock()
	p.downs[c] = struct{}{}
	parted := p.parted
	p.mu.Unlock()
	if parted {
		return // accepted, never answered
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.parted {
		p.mu.Unlock()
		up.Close()
		return
	}
	p.ups[up] = struct{}{}
	p.mu.Unlock()
	go io.Copy(up, c)
	io.Copy(c, up)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.parted {
		c.Close()
		delete(p.downs, c)
	}
}

// partition cuts the server side and leaves the replica's side hanging.
func (p *partitionProxy) partition() {
	p.mu.Lock()
	p.parted = true
	ups := p.ups
	p.ups = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range ups {
		c.Close()
	}
}

func (p *partitionProxy) close() {
	p.mu.Lock()
	p.parted = true
	cs := []net.Conn{}
	for c := range p.ups {
		cs = append(cs, c)
	}
	for c := range p.downs {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range cs {
		c.Close()
	}
}

// fenceCloud is the cloud both replicas act on. It records each call as
// landed (it took effect) or aborted (its context ended first, as an HTTP
// request whose context is cancelled is never sent or is abandoned), in
// one order for both replicas. The held replica's first SetDesired stays
// in flight until its context ends: the leader is mid-step when the
// partition comes.
type fenceCloud struct {
	pool    broker.Pool
	mu      sync.Mutex
	seq     int
	desired int
	events  []fenceEvent
	hold    string
	held    chan struct{}
	ticked  map[string]bool
}

type fenceEvent struct {
	seq     int
	replica string
	call    string
	landed  bool
}

func (c *fenceCloud) record(replica, call string, landed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.events = append(c.events, fenceEvent{seq: c.seq, replica: replica, call: call, landed: landed})
}

func (c *fenceCloud) snapshot() []fenceEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]fenceEvent(nil), c.events...)
}

// replicaCloud is one replica's client of the fenceCloud.
type replicaCloud struct {
	c    *fenceCloud
	name string
}

func (r replicaCloud) Pools(context.Context) ([]broker.PoolState, error) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.c.ticked[r.name] = true
	return []broker.PoolState{{Pool: r.c.pool, Desired: r.c.desired}}, nil
}

func (r replicaCloud) SetDesired(ctx context.Context, pool string, target int) error {
	call := fmt.Sprintf("SetDesired(%s, %d)", pool, target)
	if ctx.Err() != nil {
		r.c.record(r.name, call, false)
		return ctx.Err()
	}
	r.c.mu.Lock()
	held := r.name == r.c.hold && r.c.held != nil
	var signal chan struct{}
	if held {
		signal, r.c.held = r.c.held, nil
	}
	r.c.mu.Unlock()
	if held {
		close(signal)
		<-ctx.Done()
		r.c.record(r.name, call, false)
		return ctx.Err()
	}
	r.c.mu.Lock()
	r.c.desired = target
	r.c.mu.Unlock()
	r.c.record(r.name, call, true)
	return nil
}

func (r replicaCloud) Terminate(ctx context.Context, pool, id string) error {
	r.c.record(r.name, fmt.Sprintf("Terminate(%s, %s)", pool, id), ctx.Err() == nil)
	return ctx.Err()
}

// TestFencedLeaderNeverOverlaps: two replicas on one database, each
// through its own proxy. The leader is mid-step — its SetDesired for a
// journaled scale-up is in flight — when its proxy partitions it: its
// sessions end on the server (the lock is free) but it hears nothing. The
// standby takes the lock and the op. Nothing the old leader does lands
// after the new leader's first action: its in-flight call is abandoned
// when its lease can no longer be proved, before the new leader, which
// first waits out that bound, acts; and the scale-up lands exactly once.
func TestFencedLeaderNeverOverlaps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lvl := slog.LevelWarn
	if os.Getenv("CHAOS_LOG") != "" {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: lvl}))

	db := "fence_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	conn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pg.DatabaseURL(db, "")); err != nil {
		t.Fatal(err)
	}
	check, err := store.Open(ctx, store.Config{URL: pg.DatabaseURL(db, ""), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()

	pool := broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "A100", GPUsPerNode: 4, MinNodes: 0, MaxNodes: 4,
		Sides: broker.PoolShared, Labels: gpuLabels}
	cloud := &fenceCloud{pool: pool, held: make(chan struct{}), ticked: map[string]bool{}}
	type replica struct {
		name  string
		proxy *partitionProxy
		done  chan error
		stop  context.CancelFunc
	}
	start := func(name string) *replica {
		r := &replica{name: name, proxy: newPartitionProxy(t, pg.Addr()), done: make(chan error, 1)}
		rctx, stop := context.WithCancel(ctx)
		r.stop = stop
		m, err := app.Open(rctx, app.Config{DatabaseURL: pg.DatabaseURL(db, r.proxy.ln.Addr().String()), MaxConns: 4,
			Seed: true, Pools: []broker.Pool{pool}, Policy: chaosPolicy(),
			Cloud:  app.CloudConfig{NodePool: replicaCloud{c: cloud, name: name}},
			Logger: log.With("replica", name), Period: 200 * time.Millisecond})
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		go func() { r.done <- m.Run(rctx) }()
		t.Cleanup(func() {
			stop()
			r.proxy.close()
			<-r.done
			m.Close()
		})
		return r
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s; cloud events %+v", what, cloud.snapshot())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	a := start("replica-a")
	waitFor("replica-a to lead and tick", func() bool { cloud.mu.Lock(); defer cloud.mu.Unlock(); return cloud.ticked["replica-a"] })
	cloud.mu.Lock()
	cloud.hold = "replica-a"
	held := cloud.held
	cloud.mu.Unlock()
	start("replica-b")

	if _, err := check.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 2, Reason: "fence test",
		Step: broker.StepSetDesired}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(90 * time.Second):
		t.Fatalf("the leader never started the scale-up; cloud events %+v", cloud.snapshot())
	}
	a.proxy.partition()
	waitFor("the new leader's scale-up", func() bool {
		for _, e := range cloud.snapshot() {
			if e.replica == "replica-b" && e.landed {
				return true
			}
		}
		return false
	})

	events := cloud.snapshot()
	firstB, abandonedA := 0, 0
	landed := 0
	for _, e := range events {
		switch {
		case e.replica == "replica-b" && e.landed && firstB == 0:
			firstB = e.seq
		case e.replica == "replica-a" && !e.landed && abandonedA == 0:
			abandonedA = e.seq
		}
		if e.landed && e.call == "SetDesired(gpu, 2)" {
			landed++
		}
	}
	if abandonedA == 0 || abandonedA > firstB {
		t.Fatalf("the partitioned leader's in-flight call was not abandoned before the new leader acted: events %+v", events)
	}
	for _, e := range events {
		if e.replica == "replica-a" && e.landed {
			t.Fatalf("the partitioned leader's call landed: events %+v", events)
		}
	}
	if landed != 1 {
		t.Fatalf("the scale-up landed %d times, want once: events %+v", landed, events)
	}
	ops, err := check.OpenOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Step == broker.StepSetDesired {
		t.Fatalf("open ops %+v: want the scale-up past its set-desired step, advanced by the new leader", ops)
	}
	t.Logf("events: %+v", events)
}
