package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/internal/workload"
)

var (
	seedFlag     = flag.Uint64("chaos.seed", 1, "seed of the fault schedule and the workload")
	durationFlag = flag.Duration("chaos.duration", 120*time.Second, "how long faults are injected (the run adds a warm-up and a settling phase)")
	speedFlag    = flag.Float64("chaos.speed", 600, "time compression of the openb workload: trace seconds per real second")
)

var pg *pgServer

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if pg, err = startPG(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: postgres:", err)
		os.Exit(2)
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// TestChaosSoak runs the product through the faults under the workload
// and fails on the first breach of an invariant (checker.go); at the end
// every op must be terminal and every pending demand in the ledger.
func TestChaosSoak(t *testing.T) {
	seed, dur := *seedFlag, *durationFlag
	t.Logf("chaos soak: seed %d, faults for %s (rerun with -chaos.seed=%d -chaos.duration=%s)", seed, dur, seed, dur)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWorld(t, ctx, pg, seed)
	defer w.stopAll()
	for i := 0; i < 2; i++ {
		if _, err := w.startReplica(); err != nil {
			t.Fatal(err)
		}
	}
	if w.ticked(time.Time{}, nil, time.Minute).IsZero() {
		t.Fatal("no replica led and ticked within a minute")
	}

	pol := chaosPolicy()
	lim := Limits{Pools: map[string]PoolLimit{}, ClusterMaxGPUs: clusterMaxGPUs,
		// An op's own deadline is at most drain + provision time; a
		// takeover, a database restart and a tick loop in backoff may
		// each delay its end by a while more.
		OpBound: 2 * (pol.DrainTimeout.D() + pol.MaxProvisionTime.D())}
	for _, p := range chaosPools {
		lim.Pools[p.Name] = PoolLimit{Min: p.MinNodes, Max: p.MaxNodes, GPUsPerNode: p.GPUsPerNode}
	}
	checker := NewChecker(lim)
	smp := newSampler(w)

	// The checker looks every 100 ms until the end; the first breach
	// stops the run.
	var (
		bmu      sync.Mutex
		breaches []Breach
		samples  int
		noStore  int
	)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	checkDone := make(chan struct{})
	go func() {
		defer close(checkDone)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tk.C:
			}
			s := smp.sample(runCtx)
			bs := checker.Check(s)
			bmu.Lock()
			samples++
			if s.Store == nil {
				noStore++
			}
			if len(bs) > 0 && len(breaches) == 0 {
				breaches = bs
				stopRun()
			}
			bmu.Unlock()
		}
	}()
	breached := func() bool {
		bmu.Lock()
		defer bmu.Unlock()
		return len(breaches) > 0
	}

	// Leadership, as the replicas report it: each change of leader, and
	// how often two replicas said "leader" in one look (a leader that has
	// not yet noticed its lost lease).
	var (
		lmu                sync.Mutex
		terms              []string
		overlaps, lastLead = 0, ""
	)
	go func() {
		for runCtx.Err() == nil {
			w.mu.Lock()
			rs := append([]*replica(nil), w.replicas...)
			w.mu.Unlock()
			var leaders []string
			for _, r := range rs {
				if st, err := w.status(r); err == nil && st.Role == "leader" {
					leaders = append(leaders, r.name)
				}
			}
			lmu.Lock()
			if len(leaders) > 1 {
				overlaps++
			}
			if len(leaders) == 1 && leaders[0] != lastLead {
				terms = append(terms, time.Now().Format("15:04:05.0")+" "+leaders[0])
				lastLead = leaders[0]
			}
			lmu.Unlock()
			sleep(runCtx, 200*time.Millisecond)
		}
	}()

	gen, err := workload.NewGenerator(workload.OpenBMultiGPU50(), seed, *speedFlag)
	if err != nil {
		t.Fatal(err)
	}
	wlCtx, stopWorkload := context.WithCancel(runCtx)
	go smp.runWorkload(wlCtx, gen)
	in := newInjector(w, seed)
	start := time.Now()
	in.run(runCtx, 10*time.Second, start.Add(dur))
	in.clear()
	stopWorkload()
	faultsEnd := time.Now()

	// Settle: the ops in flight end within their bound, then the end
	// state holds (polled, as the broker catches up with the last
	// arrivals).
	var final []Breach
	if !breached() {
		deadline := time.Now().Add(lim.OpBound + 30*time.Second)
		for time.Now().Before(deadline) && !breached() {
			ops, err := w.check.OpenOps(ctx)
			if err == nil && len(ops) == 0 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		deadline = time.Now().Add(30 * time.Second)
		for !breached() {
			pending, err := smp.pendingK8s(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, smp.pendingYARN()...)
			bmu.Lock()
			last := smp.sample(ctx)
			if bs := checker.Check(last); len(bs) > 0 && len(breaches) == 0 {
				breaches = bs
			}
			final = checker.Final(last, pending)
			bmu.Unlock()
			if len(final) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
	}
	stopRun()
	<-checkDone
	settled := time.Since(faultsEnd)

	// The report.
	var b strings.Builder
	fmt.Fprintf(&b, "chaos soak report (seed %d, faults for %s, settled in %s, postgres restart: %s)\n",
		seed, time.Since(start).Round(time.Second)-settled.Round(time.Second), settled.Round(time.Second), w.pg.restartMode())
	in.mu.Lock()
	fmt.Fprintf(&b, "faults injected by kind:\n")
	for _, k := range allFaults {
		fmt.Fprintf(&b, "  %-32s %d\n", k, in.injected[k])
	}
	for _, n := range in.notes {
		fmt.Fprintf(&b, "  · %s\n", n)
	}
	fmt.Fprintf(&b, "recovery times:\n")
	for _, k := range []string{recTakeover, recPG, recRM, recAPI} {
		fmt.Fprintf(&b, "  %-58s %s\n", k, summarize(in.recovery[k]))
	}
	in.mu.Unlock()
	lmu.Lock()
	fmt.Fprintf(&b, "leaders: %s (%d looks saw two replicas report leader)\n", strings.Join(terms, ", "), overlaps)
	lmu.Unlock()
	bmu.Lock()
	fmt.Fprintf(&b, "invariant checks: %d samples (%d without the store, checked when it answered)\n", samples, noStore)
	checks := checker.Checks()
	names := make([]string, 0, len(checks))
	for k := range checks {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "  %-14s %d\n", k, checks[k])
	}
	bmu.Unlock()
	smp.mu.Lock()
	fmt.Fprintf(&b, "workload: %d tasks submitted, %d YARN apps finished, %d evictions seen\n", smp.submitted, smp.finished, smp.evicted)
	smp.mu.Unlock()
	if counts, err := w.check.CountOps(ctx); err == nil {
		fmt.Fprintf(&b, "ops by kind and state:\n")
		for _, c := range counts {
			fmt.Fprintf(&b, "  %-18s %-10s %d\n", c.Kind, c.State, c.Count)
		}
	}
	t.Log(b.String())
	for _, br := range append(breaches, final...) {
		t.Errorf("%v (seed %d: go test ./test/chaos/ -run TestChaosSoak -chaos.seed=%d -chaos.duration=%s)", br, seed, seed, dur)
	}
}

// summarize renders durations as count, min, median and max.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none measured"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("n=%d min %s median %s max %s", len(s), r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}
