package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestXIDClasses: the default classes follow the NVIDIA device plugin's
// application errors and NVIDIA's catalogue; 63, 92 and 94 (recoverable or
// contained, once counted fatal) no longer condemn a node at once.
func TestXIDClasses(t *testing.T) {
	for _, c := range []struct {
		xids  []uint64
		ecc   uint64
		class XIDClass
	}{
		{nil, 0, ""},
		{[]uint64{13}, 0, ""}, {[]uint64{31}, 0, ""}, {[]uint64{43}, 0, ""}, {[]uint64{45}, 0, ""},
		{[]uint64{68}, 0, ""}, {[]uint64{109}, 0, ""},
		{[]uint64{94}, 0, ""}, // contained: only the application that hit it dies
		{[]uint64{63}, 0, XIDNeedsReset}, {[]uint64{92}, 0, XIDNeedsReset},
		{nil, 2, XIDNeedsReset}, // uncorrectable ECC: remapped or retired on the next reset
		{[]uint64{48}, 0, XIDFatal}, {[]uint64{64}, 0, XIDFatal}, {[]uint64{74}, 0, XIDFatal},
		{[]uint64{79}, 0, XIDFatal}, {[]uint64{95}, 0, XIDFatal}, {[]uint64{119}, 0, XIDFatal},
		{[]uint64{120}, 0, XIDFatal}, {[]uint64{140}, 0, XIDFatal},
		{[]uint64{999}, 0, ""}, // unknown: logged by the agent, not acted on
		{[]uint64{13, 63, 79}, 0, XIDFatal},
		{[]uint64{63, 13}, 0, XIDNeedsReset},
	} {
		r := NodeReport{Node: "n", At: t0, GPUs: []GPUReport{{Index: 0, UUID: "GPU-0", XIDs: c.xids, ECCUncorrected: c.ecc}}}
		if _, got, why := r.Assess(nil); got != c.class || (got != "" && !strings.Contains(why, "GPU 0 (GPU-0)")) {
			t.Errorf("XIDs %v ECC %d: class %q (%q), want %q", c.xids, c.ecc, got, why, c.class)
		}
	}
	// An operator moves 79 to application and 13 to fatal.
	cls, err := NewXIDClasses([]uint64{13}, nil, []uint64{79})
	if err != nil {
		t.Fatal(err)
	}
	r := NodeReport{Node: "n", At: t0, GPUs: []GPUReport{{XIDs: []uint64{79}}}}
	if _, got, _ := r.Assess(cls); got != "" {
		t.Errorf("79 configured as application: %q", got)
	}
	r.GPUs[0].XIDs = []uint64{13}
	if _, got, _ := r.Assess(cls); got != XIDFatal {
		t.Errorf("13 configured as fatal: %q", got)
	}
	_, err = NewXIDClasses([]uint64{79}, nil, []uint64{79})
	if ve, ok := err.(*ValidationError); !ok || ve.Field != "xid_application" || !strings.Contains(ve.Problem, "xid_fatal") {
		t.Errorf("79 in two classes: %v", err)
	}
}

// TestMergeHealthNeedsTwoReports: one faulty report does not make a node
// unhealthy; two consecutive ones do, and so does one that stood for the
// unhealthy node timeout with no newer report. Freshness is the server's
// receive time, never the agent's "at".
func TestMergeHealthNeedsTwoReports(t *testing.T) {
	bad := func(at, received time.Time, xid uint64) NodeReport {
		return NodeReport{Node: "n1", At: at, ReceivedAt: received,
			GPUs: []GPUReport{{Index: 0, UUID: "GPU-0", Utilisation: 0.5, XIDs: []uint64{xid}}}}
	}
	good := func(at, received time.Time) NodeReport {
		return NodeReport{Node: "n1", At: at, ReceivedAt: received, GPUs: []GPUReport{{Index: 0, UUID: "GPU-0", Utilisation: 0.5}}}
	}
	prev := func(r, p NodeReport) NodeReport { r.Previous = &p; return r }
	for _, c := range []struct {
		name       string
		report     NodeReport
		healthy    bool
		needsReset bool
		util       float64
		why        string
	}{
		{"one fatal report: wait for the next", bad(t0, t0, 79), true, false, 0.5, ""},
		{"fatal after a healthy report: wait", prev(bad(t0, t0, 79), good(t0.Add(-30*time.Second), t0.Add(-30*time.Second))), true, false, 0.5, ""},
		{"two consecutive fatal reports", prev(bad(t0, t0, 79), bad(t0.Add(-30*time.Second), t0.Add(-30*time.Second), 79)), false, false, 0.5, "two consecutive reports"},
		{"two consecutive needs-reset reports", prev(bad(t0, t0, 63), bad(t0.Add(-30*time.Second), t0.Add(-30*time.Second), 92)), false, true, 0.5, "needs a reset"},
		{"a healthy report after a fatal one", prev(good(t0, t0), bad(t0.Add(-30*time.Second), t0.Add(-30*time.Second), 79)), true, false, 0.5, ""},
		{"two application errors", prev(bad(t0, t0, 13), bad(t0.Add(-30*time.Second), t0.Add(-30*time.Second), 13)), true, false, 0.5, ""},
		{"one fatal report, then silence past the timeout", bad(t0.Add(-11*time.Minute), t0.Add(-11*time.Minute), 79), false, false, -1, "past the unhealthy node timeout"},
		{"one fatal report, silence within the timeout", bad(t0.Add(-5*time.Minute), t0.Add(-5*time.Minute), 79), true, false, -1, ""},
		{"dated now but received 10 minutes ago: stale", good(t0, t0.Add(-10*time.Minute)), true, false, -1, ""},
		{"two fatal reports, the latest stale: wait for the timeout",
			prev(bad(t0, t0.Add(-5*time.Minute), 79), bad(t0, t0.Add(-6*time.Minute), 79)), true, false, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := Node{Name: "n1", Utilisation: -1, Healthy: true}
			mergeReport(&n, c.report, MergeInput{Now: t0, Policy: DefaultPolicy(), ReportMaxAge: 2 * time.Minute})
			if n.Healthy != c.healthy || n.NeedsReset != c.needsReset || n.Utilisation != c.util ||
				(c.why == "") != (n.HealthReason == "") || !strings.Contains(n.HealthReason, c.why) {
				t.Fatalf("healthy %t needs reset %t utilisation %g reason %q; want %t %t %g %q",
					n.Healthy, n.NeedsReset, n.Utilisation, n.HealthReason, c.healthy, c.needsReset, c.util, c.why)
			}
		})
	}
}

// fleet is a pool of n active Kubernetes nodes of which the first bad
// are unhealthy by their agents.
func fleet(n, bad int, opts ...func(*Node)) []Node {
	var out []Node
	for i := range n {
		nd := gpuNode("n"+string(rune('a'+i)), gtg, OwnerK8s, 4, 0)
		if i < bad {
			unhealthy("GPU 0 (GPU-0): XID 79, GPU has fallen off the bus (fatal); confirmed by two consecutive reports")(&nd)
			for _, o := range opts {
				o(&nd)
			}
		}
		out = append(out, nd)
	}
	return out
}

// TestPlanRepairsPauseWhenMuchOfAPoolIsUnhealthy: unhealthy nodes are
// replaced while at most 20% of their pool (rounded up to a node) is
// unhealthy; beyond that repairs pause, each unhealthy node is kept with
// the reason, so a fleet-wide false alarm does not drain the fleet. A node
// that needs a reset is replaced only once its work has ended.
func TestPlanRepairsPauseWhenMuchOfAPoolIsUnhealthy(t *testing.T) {
	for _, c := range []struct {
		name    string
		pool    PoolState
		nodes   []Node
		actions []Action
		kept    []string // nodes noted as not repaired
		keptWhy string
	}{
		{"2 of 10 unhealthy (20%): both replaced", gpuPool(gtg, 10, bounds(0, 12)), fleet(10, 2),
			[]Action{replace(gtg, "na", OwnerK8s), replace(gtg, "nb", OwnerK8s)}, nil, ""},
		{"3 of 10 unhealthy (30%): repairs pause", gpuPool(gtg, 10, bounds(0, 12)), fleet(10, 3),
			nil, []string{"na", "nb", "nc"}, "repairs of pool gpu-training-group are paused: 3 of its 10 nodes are unhealthy"},
		{"10 of 10 unhealthy (a fleet-wide false alarm): nothing drained", gpuPool(gtg, 10, bounds(0, 12)), fleet(10, 10),
			nil, []string{"na", "nb", "nc", "nd", "ne", "nf", "ng", "nh", "ni", "nj"}, "are paused"},
		{"1 of 4 unhealthy: rounded up to one node, replaced", gpuPool(gtg, 4, bounds(0, 5)), fleet(4, 1),
			[]Action{replace(gtg, "na", OwnerK8s)}, nil, ""},
		{"a down node counts: 1 down and 1 faulty of 4 pause", gpuPool(gtg, 4, bounds(0, 5)),
			append(fleet(3, 1), gpuNode("nd", gtg, OwnerK8s, 4, 0, isDown("kubelet stopped posting node status", time.Hour))),
			nil, []string{"na", "nd"}, "2 of its 4 nodes are unhealthy"},
		{"needs a reset and runs work: kept until its work ends", gpuPool(gtg, 4, bounds(0, 5)),
			fleet(4, 1, func(n *Node) { n.NeedsReset = true; *n = withWork(*n) }),
			nil, []string{"na"}, "replaced once its running work ends"},
		{"needs a reset and idle: replaced", gpuPool(gtg, 4, bounds(0, 5)),
			fleet(4, 1, func(n *Node) { n.NeedsReset = true }),
			[]Action{replace(gtg, "na", OwnerK8s)}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := snap([]PoolState{c.pool}, c.nodes, nil)
			got := MakePlan(s, refPolicy())
			opts := cmp.Options{cmpopts.IgnoreFields(Action{}, "Reason", "InstanceID", "GPUHoursLost"), cmpopts.EquateEmpty()}
			if d := cmp.Diff(c.actions, got.Actions, opts); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			var kept []string
			for _, k := range got.Kept {
				if strings.HasPrefix(k.Reason, "not repaired") {
					kept = append(kept, k.Node)
					if !strings.Contains(k.Reason, c.keptWhy) {
						t.Errorf("kept %s: %q, want it to say %q", k.Node, k.Reason, c.keptWhy)
					}
				}
			}
			if d := cmp.Diff(c.kept, kept, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("nodes kept unrepaired (-want +got):\n%s", d)
			}
		})
	}
}

// withWork gives n a running non-preemptible workload of one GPU.
func withWork(n Node) Node {
	n.GPUsAllocated = 1
	n.Work = []Workload{{Source: SourceK8s, Key: n.Name + "-w", Tenant: "research", GPUs: 1, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1}}
	return n
}
