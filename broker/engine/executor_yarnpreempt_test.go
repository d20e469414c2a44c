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

// rmSide is a YARN side that acts as the ResourceManager does with the
// broker's cordon (an exclusive node label no request names) and the
// exclude file: a container signal is taken only while the node is
// RUNNING and reaches the NodeManager with its next heartbeat (here: the
// next observation); a container of another application queued for the
// node is placed in the space a stopped victim frees while the node is
// RUNNING and not cordoned; Release follows yarn.Decommissioner's
// contract: the host enters the exclude file (-1) only when empty and
// cordoned, gets its short timeout only when empty and DECOMMISSIONING,
// and is DECOMMISSIONED at the next heartbeat after that.
type rmSide struct {
	*rtSide
	// queued is the other application's container waiting for the node.
	queued string
	// noCordon makes the cordon unavailable, with this reason.
	noCordon string
	// lose, when set, makes the next heartbeat shut the NodeManager of
	// this host down with its containers (an RM failover that found the
	// host in the exclude file).
	lose string

	state    map[string]string // RUNNING, DECOMMISSIONING, DECOMMISSIONED, SHUTDOWN
	short    map[string]bool   // the decommission has its short timeout
	labels   map[string][]string
	signals  []string // queued for the next heartbeat
	signaled map[string]bool
	lost     map[string][]string
	// log is the order of what the broker asked and what happened.
	log []string
	// killed is work a timeout or a shutdown cut off.
	killed []string
	// onCordon, when set, runs as Cordon is called (under no lock).
	onCordon func(node string)
	// unknown makes Release report that the RM cannot tell.
	unknown string
}

const cordonLabel = "gpubroker-cordon"

func newRMSide(s *rtSide, queued string) *rmSide {
	return &rmSide{rtSide: s, queued: queued, state: map[string]string{}, short: map[string]bool{},
		labels: map[string][]string{}, signaled: map[string]bool{}, lost: map[string][]string{}}
}

func (s *rmSide) nodeState(node string) string {
	if st := s.state[node]; st != "" {
		return st
	}
	return "RUNNING"
}

func (s *rmSide) cordoned(node string) bool { return slices.Contains(s.labels[node], cordonLabel) }

// heartbeat delivers the queued signals: each victim stops, and the
// queued container lands in the space it freed where the node takes it.
// A DECOMMISSIONING node with its short timeout leaves, cutting off what
// runs there. Callers hold s.mu.
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
			if s.queued != "" && s.nodeState(name) == "RUNNING" && !s.cordoned(name) && n.FreeGPUs() >= 4 {
				n.Work = append(n.Work, broker.Workload{Source: broker.SourceYARN, Key: s.queued, Name: s.queued, Tenant: "training",
					GPUs: 4, Class: broker.WorkBatch, CheckpointAge: -1})
				n.GPUsAllocated += 4
				s.log = append(s.log, "placed "+s.queued+" on "+name)
				s.queued = ""
			}
		}
	}
	s.signals = nil
	for name, n := range s.nodes {
		if s.nodeState(name) == "DECOMMISSIONING" && s.short[name] {
			for _, w := range n.Work {
				s.killed = append(s.killed, w.Key)
			}
			n.Work, n.GPUsAllocated = nil, 0
			s.state[name] = "DECOMMISSIONED"
			s.log = append(s.log, "decommissioned "+name)
		}
	}
	if n := s.nodes[s.lose]; n != nil {
		for _, w := range n.Work {
			s.killed = append(s.killed, w.Key)
			s.lost[s.lose] = append(s.lost[s.lose], w.Key)
		}
		n.Work, n.GPUsAllocated = nil, 0
		s.state[s.lose] = "SHUTDOWN"
		s.log = append(s.log, "shut down "+s.lose)
		s.lose = ""
	}
}

func (s *rmSide) Observe(ctx context.Context, ti broker.TenantIndex) (broker.SideObservation, error) {
	s.mu.Lock()
	s.heartbeat()
	for name := range s.nodes {
		if s.cordoned(name) {
			s.released[name] = true // the side reports a cordoned host as no side's
		}
	}
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
		state := s.nodeState(node)
		if s.cordoned(node) {
			state += ", cordoned"
		}
		s.log = append(s.log, "evict "+w.Key+" ("+state+")")
		if s.nodeState(node) == "RUNNING" { // dropped otherwise
			s.signaled[w.Key] = true
			s.signals = append(s.signals, w.Key)
		}
	}
	return fmt.Errorf("container %s is shutting down: %w", w.Key, broker.ErrInProgress)
}

func (s *rmSide) Release(_ context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unknown != "" {
		return broker.ReleaseStatus{Unknown: s.unknown}, nil
	}
	switch s.nodeState(node) {
	case "DECOMMISSIONED":
		return broker.ReleaseStatus{Drained: true}, nil
	case "SHUTDOWN":
		return broker.ReleaseStatus{Drained: true, Lost: s.lost[node]}, nil
	}
	var left []string
	for _, w := range s.nodes[node].Work {
		left = append(left, w.Key)
	}
	if len(left) > 0 {
		return broker.ReleaseStatus{Remaining: left, BlockedBy: "waiting for its containers to end under the cordon"}, nil
	}
	switch {
	case s.nodeState(node) == "DECOMMISSIONING":
		if !s.short[node] {
			s.short[node] = true
			s.log = append(s.log, "short timeout "+node)
		}
	case !s.cordoned(node):
		return broker.ReleaseStatus{BlockedBy: "not cordoned"}, nil
	default:
		s.state[node] = "DECOMMISSIONING"
		s.log = append(s.log, "exclude "+node)
	}
	return broker.ReleaseStatus{BlockedBy: "decommissioning"}, nil
}

func (s *rmSide) Cordon(_ context.Context, node string) error {
	if s.onCordon != nil {
		s.onCordon(node)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noCordon != "" {
		return fmt.Errorf("no cordon: %s", s.noCordon)
	}
	s.labels[node] = []string{cordonLabel}
	s.log = append(s.log, "cordon "+node)
	return nil
}

func (s *rmSide) Admit(ctx context.Context, node string) error {
	s.mu.Lock()
	s.state[node], s.short[node] = "RUNNING", false
	s.log = append(s.log, "admit "+node)
	s.mu.Unlock()
	return s.rtSide.Admit(ctx, node)
}

func (s *rmSide) CordonAvailable(context.Context) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noCordon == "", s.noCordon
}

func (s *rmSide) CordonPrior(_ context.Context, node string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var prior []string
	for _, l := range s.labels[node] {
		if l != cordonLabel {
			prior = append(prior, l)
		}
	}
	return prior, nil
}

func (s *rmSide) Uncordon(_ context.Context, node string, prior []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels[node] = slices.Clone(prior)
	delete(s.released, node)
	s.log = append(s.log, fmt.Sprintf("uncordon %s %v", node, prior))
	return nil
}

func (s *rmSide) EnsureCordon(_ context.Context, node string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cordoned(node) {
		return false, nil
	}
	s.labels[node] = []string{cordonLabel}
	s.log = append(s.log, "re-cordon "+node)
	return true, nil
}

var _ Cordoner = (*rmSide)(nil)

// yarnPreemptWorld has YARN node y1 full with two low-priority containers
// and a Kubernetes pod that preempts them across sides; the RM holds
// another application's 4-GPU container queued for the node.
func yarnPreemptWorld(t *testing.T) (*rtWorld, *rmSide, *Runtime) {
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
	rm.labels["y1"] = []string{"gpu"}
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

func logIndex(log []string, prefix string) int {
	return slices.IndexFunc(log, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestRuntimePreemptYARNCordonsBeforeSignallingVictims: a preemption
// taking a YARN node cordons it with the label (the node stays RUNNING, so
// the RM delivers the signals) before it signals any victim, so the RM
// places no container of another application in the freed space; the
// host enters the exclude file only once empty, gets its short timeout
// only then, its labels are restored once DECOMMISSIONED, and it goes to
// Kubernetes with nothing else killed.
func TestRuntimePreemptYARNCordonsBeforeSignallingVictims(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t)
	op := w.runPreempt(r, 2*time.Second)
	if op.State != broker.OpDone || !slices.Equal(w.k8s.admitted, []string{"y1"}) {
		t.Fatalf("preemption %+v, k8s admitted %v, RM saw %q: want y1 handed over", op, w.k8s.admitted, rm.log)
	}
	cordon, evict, stop, exclude := logIndex(rm.log, "cordon y1"), logIndex(rm.log, "evict "), logIndex(rm.log, "stopped "), logIndex(rm.log, "exclude y1")
	if cordon < 0 || evict < 0 || cordon > evict || rm.log[evict] != "evict container_1_0001_01_000001 (RUNNING, cordoned)" {
		t.Fatalf("RM saw %q: want the cordon, then the victims signalled while RUNNING", rm.log)
	}
	if stop < 0 || exclude < stop {
		t.Fatalf("RM saw %q: want the host excluded only after its victims stopped", rm.log)
	}
	if len(rm.killed) != 0 || logIndex(rm.log, "placed ") >= 0 {
		t.Fatalf("RM saw %q and killed %v: want the queued container kept off the node", rm.log, rm.killed)
	}
	if un := logIndex(rm.log, "uncordon y1"); un < logIndex(rm.log, "decommissioned y1") || rm.log[un] != "uncordon y1 [gpu]" {
		t.Fatalf("RM saw %q: want the labels [gpu] restored once y1 is DECOMMISSIONED", rm.log)
	}
}

// TestRuntimePreemptYARNNeverTimesOutOtherWork: a container the
// preemption does not name (another application's, here a CPU container)
// keeps the node: it is never decommissioned while that runs, nothing is
// killed, and the op deadline gives the node back to YARN naming the
// container, its labels restored exactly.
func TestRuntimePreemptYARNNeverTimesOutOtherWork(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t)
	rm.queued = ""
	// An ApplicationMaster (0 GPUs) of another application placed right
	// after the plan.
	rm.afterObserve = func(s *rtSide) {
		if len(w.ledger.ops) == 0 || s.nodes["y1"].Work == nil || slices.ContainsFunc(s.nodes["y1"].Work, func(w broker.Workload) bool { return w.Key == "container_1_0004_01_000001" }) {
			return
		}
		s.nodes["y1"].Work = append(s.nodes["y1"].Work, broker.Workload{Source: broker.SourceYARN, Key: "container_1_0004_01_000001",
			Name: "container_1_0004_01_000001", Tenant: "training", AM: true, Class: broker.WorkBatch, CheckpointAge: -1})
		s.afterObserve = nil
	}
	op := w.runPreempt(r, 10*time.Second)
	if op.State != broker.OpFailed || !strings.Contains(op.LastError, "given back to yarn") || !strings.Contains(op.LastError, "container_1_0004_01_000001") {
		t.Fatalf("preemption %+v: want y1 given back to yarn, naming the container the preemption does not name", op)
	}
	if len(rm.killed) != 0 || logIndex(rm.log, "exclude ") >= 0 || logIndex(rm.log, "short timeout") >= 0 {
		t.Fatalf("RM saw %q, killed %v: want no decommission while another app's container runs there", rm.log, rm.killed)
	}
	if !slices.Contains(rm.log, "admit y1") || !slices.Contains(rm.log, "uncordon y1 [gpu]") || len(w.k8s.admitted) != 0 {
		t.Fatalf("RM saw %q, k8s admitted %v: want y1 given back to yarn with its labels [gpu]", rm.log, w.k8s.admitted)
	}
}

// TestRuntimePreemptYARNWithoutCordonIsRefused: where the cluster offers
// no cordon, a preemption that must hold a YARN node while its victims
// exit is refused: no victim is signalled, nothing is excluded.
func TestRuntimePreemptYARNWithoutCordonIsRefused(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t)
	rm.noCordon = "node labels are disabled on the RM"
	op := w.runPreempt(r, 2*time.Second)
	if op.State != broker.OpFailed || !strings.Contains(op.LastError, "node labels are disabled") {
		t.Fatalf("preemption %+v: want it refused for want of a cordon", op)
	}
	if len(rm.log) != 0 || len(rm.killed) != 0 {
		t.Fatalf("RM saw %q, killed %v: want nothing done to y1", rm.log, rm.killed)
	}
}

// TestRuntimeCordonPriorJournaledBeforeCordon: the labels a cordon
// replaces are in the journal before the side is asked to cordon, so a
// crash right after still restores them.
func TestRuntimeCordonPriorJournaledBeforeCordon(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t)
	var journaled []string
	rm.onCordon = func(node string) {
		for _, op := range w.ledger.ops {
			if op.Node == node && !op.State.Terminal() {
				if d := broker.OpDataOf(&op); d.Cordon != nil {
					journaled = append(journaled, strings.Join(d.Cordon.Prior, ","))
					return
				}
			}
		}
		journaled = append(journaled, "<none>")
	}
	w.runPreempt(r, 2*time.Second)
	if len(journaled) == 0 || slices.Contains(journaled, "<none>") || journaled[0] != "gpu" {
		t.Fatalf("priors in the journal at each cordon: %q, want [gpu] before every one", journaled)
	}
}

// TestRuntimeMissingCordonIsReapplied: a cordon an op holds that the RM
// no longer lists (its label store lost it across a failover) is put back
// at the next observation, and the op goes on.
func TestRuntimeMissingCordonIsReapplied(t *testing.T) {
	w, rm, r := yarnPreemptWorld(t)
	rm.queued = ""
	for range 20 {
		w.tick(r)
		if rm.cordoned("y1") {
			break
		}
		w.clock.Add(time.Second)
	}
	if !rm.cordoned("y1") {
		t.Fatalf("RM saw %q: y1 was never cordoned", rm.log)
	}
	rm.mu.Lock()
	rm.labels["y1"] = []string{"gpu"} // the failover lost the label
	rm.mu.Unlock()
	w.clock.Add(time.Second)
	w.tick(r)
	if !rm.cordoned("y1") || !slices.Contains(rm.log, "re-cordon y1") {
		t.Fatalf("RM saw %q, labels %v: want the cordon re-applied at once", rm.log, rm.labels["y1"])
	}
	op := w.runPreempt(r, 2*time.Second)
	if op.State != broker.OpDone || len(rm.killed) != 0 || !slices.Contains(rm.log, "uncordon y1 [gpu]") {
		t.Fatalf("preemption %+v, RM saw %q, killed %v: want y1 handed over, its labels restored", op, rm.log, rm.killed)
	}
}
