package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestPlanGateSingleFlight: callers that arrive while a dry run is in
// flight share it: one observation, one plan for all of them.
func TestPlanGateSingleFlight(t *testing.T) {
	g := &planGate{interval: 5 * time.Second, now: time.Now}
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	runs := 0
	dry := func(context.Context) (broker.Plan, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		entered <- struct{}{}
		<-release
		return broker.Plan{Actions: []broker.Action{{Kind: broker.ActScaleUp, Target: 3}}}, nil
	}
	const callers = 6
	type result struct {
		c      *planCall
		reused bool
		err    error
	}
	results := make(chan result, callers)
	call := func() {
		c, reused, err := g.do(context.Background(), dry)
		results <- result{c, reused, err}
	}
	go call()
	<-entered // the first caller's run is in flight
	for i := 1; i < callers; i++ {
		go call()
	}
	// Wait until every other caller has joined the run in flight (a
	// second run would block on entered instead, and they never join).
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		joined := g.joined
		g.mu.Unlock()
		if joined == callers-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers joined the dry run in flight", joined, callers-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	var first *planCall
	fresh := 0
	for i := 0; i < callers; i++ {
		r := <-results
		if r.err != nil || r.c.err != nil {
			t.Fatalf("caller: %v %v", r.err, r.c.err)
		}
		if first == nil {
			first = r.c
		}
		if r.c != first || r.c.plan.Actions[0].Target != 3 {
			t.Fatalf("callers got different runs")
		}
		if !r.reused {
			fresh++
		}
	}
	if runs != 1 || fresh != 1 {
		t.Fatalf("%d runs, %d callers started one; want 1 and 1", runs, fresh)
	}
}
