package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// rmSide is a YARN side that acts as the ResourceManager does for a
// preemption (checked in Hadoop 3.3.6 and 3.5.0): a container signal is
// taken only while the node is RUNNING and reaches the NodeManager with
// its next heartbeat (here: the next observation), also once the node is
// DECOMMISSIONING; a container of another application queued for the
// node is placed in the space a stopped victim frees while the node is
// RUNNING (and, with onDecommissioning, as Hadoop 3.3's scheduler does at
// the heartbeat that frees it, also while DECOMMISSIONING); a
// decommissioning node waits for its victims' applications until its
// graceful timeout, which kills whatever still runs there.
type rmSide struct {
	*rtSide
	// queued is the other application's container waiting for the node.
	queued            string
	onDecommissioning bool

	state    map[string]string // RUNNING, DECOMMISSIONING, DECOMMISSIONED
	finite   map[string]bool   // the decommission has a finite timeout
	signals  []string          // queued for the next heartbeat
	signaled map[string]bool
	// log is the order of what the broker asked and what happened.
	log []string
	// killed is work the graceful timeout cut off.
	killed []string
}

func newRMSide(s *rtSide, queued string) *rmSide {
	return &rmSide{rtSide: s, queued: queued, state: map[string]string{}, finite: map[string]bool{}, signaled: map[string]bool{}}
}

func (s *rmSide) nodeState(node string) string {
	if st := s.state[node]; st != "" {
		return st
	}
	return "RUNNING"
}

// heartbeat delivers the queued signals: each victim stops, and the
// queued container lands in the space it freed where the node takes it.
// Then a decommissioning node with a finite timeout (long since started)
// leaves, cutting off what runs there. Callers hold s.mu; it runs at each
// observation, seconds apart as NodeManager heartbeats are.
func (s *rmSide) heartbeat() {
	for _, key := range s.signals {
		for name, n := range s.nodes {
			i := slices.IndexFunc(n.Work, func(w broker.Workload) bool { return w.Key == key })
			if i < 0 {
				continue
			}
			n.GPUsAllocated -= n.Work[i].GPUs
			n.Work = slices.Delete(n.Work, i, i+1)
			s.log = append(s.log, "stopped "+key)
			st := s.nodeState(name)
			if s.queued != "" && (st == "RUNNING" || st == "DECOMMISSIONING" && s.onDecommissioning) && n.FreeGPUs() >= 4 {
				n.Work = append(n.Work, broker.Workload{Source: broker.SourceYARN, Key: s.queued, Name: s.queued, Tenant: "training",
					GPUs: 4, Class: broker.WorkBatch, CheckpointAge: -1})
				n.GPUsAllocated += 4
				s.log = append(s.log, "placed "+s.queued+" on "+name+" ("+st+")")
				s.queued = ""
			}
		}
	}
	s.signals = nil
	for name, n := range s.nodes {
		if s.nodeState(name) == "DECOMMISSIONING" && s.finite[name] {
			for _, w := range n.Work {
				s.killed = append(s.killed, w.Key)
			}
			n.Work, n.GPUsAllocated = nil, 0
			s.state[name] = "DECOMMISSIONED"
		}
	}
}

func (s *rmSide) Observe(ctx context.Context, ti broker.TenantIndex) (broker.SideObservation, error) {
	s.mu.Lock()
	s.heartbeat()
	s.mu.Unlock()
	return s.rtSide.Observe(ctx, ti)
}

func (s *rmSide) Evict(_ context.Context, node string, w broker.Workload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if !slices.ContainsFunc(n.Work, func(x broker.Workload) bool { return x.Key == w.Key }) {
		s.evicted = append(s.evicted, w.Key)
		return nil
	}
	if !s.signaled[w.Key] {
		s.log = append(s.log, "evict "+w.Key+" ("+s.nodeState(node)+")")
		if s.nodeState(node) == "RUNNING" { // dropped otherwise
			s.signaled[w.Key] = true
			s.signals = append(s.signals, w.Key)
		}
	}
	return fmt.Errorf("container %s is shutting down: %w", w.Key, broker.ErrInProgress)
}

func (s *rmSide) Release(_ context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if s.nodeState(node) == "RUNNING" {
		s.state[node] = "DECOMMISSIONING"
		s.released[node] = true
	}
	if !deadline.IsZero() && !s.finite[node] {
		s.finite[node] = true
		var running []string
		for _, w := range n.Work {
			running = append(running, w.Key)
		}
		s.log = append(s.log, fmt.Sprintf("release finite %v", running))
	} else if deadline.IsZero() && !slices.Contains(s.log, "release infinite") {
		s.log = append(s.log, "release infinite")
	}
	if s.nodeState(node) == "DECOMMISSIONED" {
		return broker.ReleaseStatus{Drained: true}, nil
	}
	var left []string
	for _, w := range n.Work {
		left = append(left, w.Key)
	}
	// The victims' applications still run: the RM waits for them.
	return broker.ReleaseStatus{Remaining: left}, nil
}

func (s *rmSide) Cordon(ctx context.Context, node string) error {
	_, err := s.Release(ctx, node, time.Time{})
	return err
}

func (s *rmSide) Admit(ctx context.Context, node string) error {
	s.mu.Lock()
	s.state[node], s.finite[node] = "RUNNING", false
	s.log = append(s.log, "admit "+node)
	s.mu.Unlock()
	return s.rtSide.Admit(ctx, node)
}

// yarnPreemptWorld has YARN node y1 full with two low-priority containers
// and a Kubernetes pod that preempts them across sides; the RM holds
// another application's 4-GPU container queued for the node.
func yarnPreemptWorld(t *testing.T, onDecommissioning bool) (*rtWorld, *rmSide, *Runtime) {
	w := newRTWorld(t, 1)
	w.yarnHost("y1", broker.Workload{})
	n := w.yarn.nodes["y1"]
	n.Work = nil
	for _, c := range []string{"container_1_0001_01_000001", "container_1_0002_01_000001"} {
		n.Work = append(n.Work, broker.Workload{Source: broker.SourceYARN, Key: c, Name: c, Tenant: "training",
			GPUs: 2, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1})
	}
	n.GPUsAllocated = 4
	rm := newRMSide(w.yarn, "container_1_0003_01_000001")
	rm.onDecommissioning = onDecommissioning
	r := w.runtimeWith(rm, rm)
	w.k8s.submit(trainingPod("urgent", 4, 1000000))
	return w, rm, r
}

func (w *rtWorld) runPreempt(r *Runtime, step time.Duration) broker.Op {
	w.t.Helper()
	for range 200 {
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActPreempt); len(ops) == 1 && ops[0].State.Terminal() {
			return ops[0]
		}
		w.clock.Add(step)
	}
	w.t.Fatalf("preemptions %+v: none ended", w.ledger.opsOf(broker.ActPreempt))
	return broker.Op{}
}

// TestRuntimePreemptYARNSignalsThenDecommissionsBeforeAnyVictimStops: a
// preemption taking a YARN node signals every victim while the node is
// RUNNING (the RM drops signals to a DECOMMISSIONING node) and
// decommissions it before a victim stops, so the RM places no container
// of another application in the freed space, where the release's timeout
// would kill it; the node goes to Kubernetes and nothing else is killed.
func TestRuntimePreemptYARNSignalsThenDecommissionsBeforeAnyVictimStops(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t, false)
	op := w.runPreempt(r, 2*time.Second)
	if op.State != broker.OpDone || !slices.Equal(w.k8s.admitted, []string{"y1"}) {
		t.Fatalf("preemption %+v, k8s admitted %v, RM saw %q: want y1 handed over", op, w.k8s.admitted, rm.log)
	}
	first := func(prefix string) int {
		return slices.IndexFunc(rm.log, func(s string) bool { return strings.HasPrefix(s, prefix) })
	}
	dec, stop := first("release infinite"), first("stopped ")
	if dec < 0 || stop < 0 || dec > stop || rm.log[0] != "evict container_1_0001_01_000001 (RUNNING)" ||
		rm.log[1] != "evict container_1_0002_01_000001 (RUNNING)" {
		t.Fatalf("RM saw %q: want both victims signalled while RUNNING, then the decommission, then the victims stopping", rm.log)
	}
	if len(rm.killed) != 0 || slices.ContainsFunc(rm.log, func(s string) bool { return strings.HasPrefix(s, "placed ") }) {
		t.Fatalf("RM saw %q and the timeout killed %v: want the queued container kept off the node", rm.log, rm.killed)
	}
}

// TestRuntimePreemptYARNNeverTimesOutOtherWork: where the RM still places
// another application's container on the decommissioning node (Hadoop
// 3.3's scheduler does, at the heartbeat that frees the victims' space),
// the release keeps the decommission without a timeout, kills nothing,
// and the op deadline gives the node back to YARN naming that container.
func TestRuntimePreemptYARNNeverTimesOutOtherWork(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t, true)
	op := w.runPreempt(r, 10*time.Second)
	if op.State != broker.OpFailed || !strings.Contains(op.LastError, "given back to yarn") || !strings.Contains(op.LastError, "container_1_0003_01_000001") {
		t.Fatalf("preemption %+v: want y1 given back to yarn, naming the container that landed", op)
	}
	if len(rm.killed) != 0 || slices.ContainsFunc(rm.log, func(s string) bool { return strings.HasPrefix(s, "release finite") }) {
		t.Fatalf("RM saw %q, the timeout killed %v: want no timeout while another app's container runs there", rm.log, rm.killed)
	}
	if !slices.Contains(rm.log, "admit y1") || len(w.k8s.admitted) != 0 {
		t.Fatalf("RM saw %q, k8s admitted %v: want y1 recommissioned to yarn", rm.log, w.k8s.admitted)
	}
}

// TestRuntimePreemptYARNSetsTheTimeoutOnceTheNodeIsEmpty: once a fresh
// look shows the decommissioning node empty, the release sets the finite
// timeout (the RM otherwise waits for the victims' applications, which
// retry elsewhere and run on), and the node goes to Kubernetes.
func TestRuntimePreemptYARNSetsTheTimeoutOnceTheNodeIsEmpty(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t, false)
	rm.queued = ""
	op := w.runPreempt(r, 2*time.Second)
	if op.State != broker.OpDone || !slices.Contains(rm.log, "release finite []") || len(rm.killed) != 0 {
		t.Fatalf("preemption %+v, RM saw %q, killed %v: want the finite timeout set on the empty node, done", op, rm.log, rm.killed)
	}
}
