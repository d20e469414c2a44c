package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/workload"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// The kinds of fault.
const (
	fKillScaleUp      = "kill leader mid-scale-up"
	fKillDrain        = "kill leader mid-drain"
	fKillDecommission = "kill leader mid-decommission"
	fPGRestart        = "postgres restart"
	fRMFailover       = "rm failover"
	// RM failovers aimed at a YARN node the broker holds: one it drains
	// by attrition under the cordon, one whose release (the fence, then
	// the decommission of the empty host) is in flight, one whose
	// preemption waits for its victims to exit. A new active RM shuts
	// down the NodeManager of every excluded host: the work-killed
	// invariant catches a busy host the broker excluded.
	fRMFailoverAttrition = "rm failover under attrition"
	fRMFailoverFenced    = "rm failover while a yarn release is in flight"
	fRMFailoverPreempt   = "rm failover while preempting"
	fRM500               = "rm answers 500"
	fRMLogin             = "rm answers a login page"
	fAPIDown             = "apiserver unavailable"
	fThrottle            = "cloud throttling"
	fICE                 = "insufficient instance capacity"
	fNeverRegister       = "launch never registers"
	fTerminateFails      = "terminate fails"
	fXID79               = "agent reports xid 79"
)

var allFaults = []string{fKillScaleUp, fKillDrain, fKillDecommission, fPGRestart, fRMFailover,
	fRMFailoverAttrition, fRMFailoverFenced, fRMFailoverPreempt, fRM500, fRMLogin,
	fAPIDown, fThrottle, fICE, fNeverRegister, fTerminateFails, fXID79}

// Recovery figures.
const (
	recTakeover = "leader takeover (kill to the new leader's first tick)"
	recPG       = "after postgres restart (stop to the leader's first tick)"
	recRM       = "after rm failover (failover to a tick with yarn fresh)"
	recAPI      = "after apiserver outage (end to a tick with k8s fresh)"
)

// injector injects faults at seeded random moments, one at a time.
type injector struct {
	w   *world
	rng *rand.Rand

	// until is when the faults end; armed kills wait until then.
	until  time.Time
	wg     sync.WaitGroup
	killMu sync.Mutex // one kill and takeover at a time
	failMu sync.Mutex // one RM failover at a time

	mu       sync.Mutex
	armed    map[string]bool
	injected map[string]int
	notes    []string
	recovery map[string][]time.Duration
}

func newInjector(w *world, seed uint64) *injector {
	return &injector{w: w, rng: rand.New(rand.NewPCG(seed, seed^0x6368616f73)), armed: map[string]bool{}, injected: map[string]int{}, recovery: map[string][]time.Duration{}}
}

func (in *injector) note(kind, format string, args ...any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.injected[kind]++
	in.notes = append(in.notes, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.0"), kind, fmt.Sprintf(format, args...)))
}

func (in *injector) recovered(what string, d time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recovery[what] = append(in.recovery[what], d)
}

// between draws a duration in [lo, hi).
func (in *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run injects faults from after warm until until: every kind once per
// round, in a seeded order, with seeded gaps and windows.
func (in *injector) run(ctx context.Context, warm time.Duration, until time.Time) {
	in.until = until
	defer in.wg.Wait()
	sleep(ctx, warm)
	for ctx.Err() == nil && time.Now().Before(until) {
		order := slices.Clone(allFaults)
		in.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, kind := range order {
			if ctx.Err() != nil || !time.Now().Before(until) {
				return
			}
			in.inject(ctx, kind)
			sleep(ctx, in.between(1500*time.Millisecond, 4*time.Second))
		}
	}
}

func (in *injector) inject(ctx context.Context, kind string) {
	w := in.w
	switch kind {
	case fKillScaleUp:
		in.armKill(ctx, kind, func() (string, bool) {
			return in.openOp(ctx, func(op broker.Op) bool { return op.Kind == broker.ActScaleUp })
		})
	case fKillDrain:
		in.armKill(ctx, kind, func() (string, bool) {
			return in.openOp(ctx, func(op broker.Op) bool { return in.releasing(ctx, op, broker.OwnerK8s) })
		})
	case fKillDecommission:
		in.armKill(ctx, kind, func() (string, bool) {
			return in.openOp(ctx, func(op broker.Op) bool {
				return in.releasing(ctx, op, broker.OwnerYARN) || op.Node != "" && w.ysim.NodeState(op.Node) == "DECOMMISSIONING"
			})
		})
	case fPGRestart:
		down := in.between(time.Second, 3*time.Second)
		at := time.Now()
		if err := w.pg.Restart(ctx, w.dbName, down); err != nil {
			if ctx.Err() == nil {
				w.t.Errorf("restart postgres: %v", err)
			}
			return
		}
		in.note(kind, "%s, down %s", w.pg.restartMode(), down.Round(time.Millisecond))
		if ok := w.ticked(at.Add(down), nil, time.Minute); !ok.IsZero() {
			in.recovered(recPG, ok.Sub(at))
		}
	case fRMFailover:
		in.failover(ctx, kind, "")
	case fRMFailoverAttrition:
		in.armWhen(ctx, kind, func() (string, bool) {
			return in.openOp(ctx, func(op broker.Op) bool {
				return broker.AttritionOp(&op) && in.yarnBusy(op.Node) && slices.Contains(w.ysim.NodeLabels(op.Node), yarn.DefaultCordonLabel)
			})
		}, in.failover)
	case fRMFailoverFenced:
		in.armWhen(ctx, kind, func() (string, bool) {
			return in.openOp(ctx, func(op broker.Op) bool {
				return !broker.AttritionOp(&op) && in.releasing(ctx, op, broker.OwnerYARN)
			})
		}, in.failover)
	case fRMFailoverPreempt:
		// The workload alone may never make the broker preempt a YARN
		// node (seed 1 did not): five seconds after arming, pods of the
		// highest class, not preemptible, ask for every GPU the cluster
		// may have, so that what YARN runs must make room.
		armedAt, provoked := time.Now(), false
		in.armWhen(ctx, kind, func() (string, bool) {
			what, hit := in.openOp(ctx, func(op broker.Op) bool {
				return op.Kind == broker.ActPreempt && op.Node != "" && in.yarnBusy(op.Node)
			})
			if !hit && !provoked && time.Since(armedAt) > 5*time.Second {
				provoked = true
				for i := 1; i <= clusterMaxGPUs/4; i++ {
					in.provokePreemption(ctx, kind, i)
				}
			}
			return what, hit
		}, in.failover)
	case fRM500, fRMLogin:
		f := yarnsim.FaultServerError
		if kind == fRMLogin {
			f = yarnsim.FaultHTML
		}
		d := in.between(2*time.Second, 6*time.Second)
		w.ysim.SetFault(f)
		sleep(ctx, d)
		w.ysim.SetFault(yarnsim.FaultNone)
		in.note(kind, "for %s", d.Round(time.Millisecond))
	case fAPIDown:
		d := in.between(2*time.Second, 8*time.Second)
		w.setAPIDown(true)
		sleep(ctx, d)
		w.setAPIDown(false)
		end := time.Now()
		in.note(kind, "for %s", d.Round(time.Millisecond))
		if ok := w.ticked(end, []string{"k8s"}, time.Minute); !ok.IsZero() {
			in.recovered(recAPI, ok.Sub(end))
		}
	case fThrottle:
		d := in.between(2*time.Second, 6*time.Second)
		w.aws.Throttle("", -1)
		sleep(ctx, d)
		w.aws.Throttle("", 0)
		in.note(kind, "every autoscaling and EC2 call for %s", d.Round(time.Millisecond))
	case fICE:
		p := chaosPools[in.rng.IntN(len(chaosPools))].Group
		w.aws.FailLaunches(p, 2, "")
		in.note(kind, "the next 2 launches of %s", p)
	case fNeverRegister:
		p := chaosPools[in.rng.IntN(len(chaosPools))].Group
		w.aws.NeverRegister(p, 1)
		in.note(kind, "the next launch of %s", p)
	case fTerminateFails:
		if in.rng.IntN(2) == 0 {
			w.aws.FailTerminate(5)
			in.note(kind, "the next 5 terminate calls answer 503 without effect")
		} else {
			w.aws.FailTerminateHalfway(1)
			in.note(kind, "the next terminate takes effect, then answers 500")
		}
	case fXID79:
		node := in.pickNode(ctx)
		if node == "" {
			in.note(kind, "no registered node to report on")
			return
		}
		w.mu.Lock()
		w.lost[node] = true
		w.mu.Unlock()
		in.note(kind, "node %s", node)
		go in.keepReporting(ctx, node)
	}
}

// keepReporting posts the fatal XID for node until its machine is gone,
// as an agent does (the XID stays in every report until a GPU reset).
func (in *injector) keepReporting(ctx context.Context, node string) {
	w := in.w
	for ctx.Err() == nil {
		if !w.machines.Live(node) {
			return
		}
		if err := w.report(node, []uint64{79}); err != nil {
			w.log.Debug("chaos: xid report", "node", node, "err", err)
		}
		sleep(ctx, 2*time.Second)
	}
}

// pickNode picks a running machine that joined Kubernetes.
func (in *injector) pickNode(ctx context.Context) string {
	w := in.w
	nodes, err := w.kc.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var names []string
	w.mu.Lock()
	for _, n := range nodes.Items {
		if w.machines.Live(n.Name) && !w.lost[n.Name] {
			names = append(names, n.Name)
		}
	}
	w.mu.Unlock()
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return names[in.rng.IntN(len(names))]
}

// releasing reports whether op is releasing its node from side: a
// transfer away from it, or a scale-down or replacement of a node the
// broker records as side's.
func (in *injector) releasing(ctx context.Context, op broker.Op, side broker.Owner) bool {
	if op.Node == "" || op.Step != "release" {
		return false
	}
	if op.Kind == broker.ActTransfer {
		return op.To != side
	}
	n, err := in.w.check.GetNode(ctx, op.Node)
	return err == nil && n.Owner == side
}

// openOp returns a description of an open op that match accepts.
func (in *injector) openOp(ctx context.Context, match func(broker.Op) bool) (string, bool) {
	ops, err := in.w.check.OpenOps(ctx)
	if err != nil {
		return "", false
	}
	for _, op := range ops {
		if match(op) {
			return fmt.Sprintf("op %d %s (pool %q, node %q) at step %s", op.ID, op.Kind, op.Pool, op.Node, op.Step), true
		}
	}
	return "", false
}

// armKill waits, without holding up the other faults, for the moment
// cond describes (until the faults end), kills the leader then, and times
// the standby's takeover; a new process then starts as the next standby,
// as a supervisor would restart the killed one.
// failover fails the YARN RM over to the standby after a gap without an
// active RM; what names the state it was aimed at.
func (in *injector) failover(ctx context.Context, kind, what string) {
	in.failMu.Lock()
	defer in.failMu.Unlock()
	w := in.w
	from := w.ha.Active()
	gap := in.between(500*time.Millisecond, 2*time.Second)
	at := time.Now()
	w.yadmin.SetStandby(true)
	w.ha.SetActive(-1)
	sleep(ctx, gap)
	w.ha.SetActive(1 - from)
	w.yadmin.SetStandby(false)
	if what != "" {
		what = " during " + what
	}
	in.note(kind, "active RM %d → %d after %s without an active RM%s", from, 1-from, gap.Round(time.Millisecond), what)
	if ok := w.ticked(time.Now(), []string{"yarn"}, time.Minute); !ok.IsZero() {
		in.recovered(recRM, ok.Sub(at))
	}
}

// yarnBusy reports whether the simulated RM runs any container (of any
// app, AMs included) on host.
func (in *injector) yarnBusy(host string) bool {
	return host != "" && in.w.ysim.NodeContainers(host) > 0
}

func (in *injector) armKill(ctx context.Context, kind string, cond func() (string, bool)) {
	in.armWhen(ctx, kind, cond, in.killLeader)
}

// provokePreemption submits the n-th pod that should make the broker
// preempt: the highest priority class, not preemptible, a whole node's
// GPUs, for 20 seconds.
func (in *injector) provokePreemption(ctx context.Context, kind string, n int) {
	name := fmt.Sprintf("chaos-preemptor-%d", n)
	err := in.w.kc.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "ml-training", Name: name, GPUs: 4,
		PriorityClassName: qosClasses[workload.QoSGuaranteed], Priority: int32(guaranteedPriority()),
		NodeSelector: map[string]string{"infra-type": "gpu"}, Duration: 20 * time.Second,
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Annotations: map[string]string{k8s.PreemptibleAnnotation: "false"}})
	in.mu.Lock()
	defer in.mu.Unlock()
	if err != nil {
		in.notes = append(in.notes, fmt.Sprintf("%s %s: provoking pod %s not submitted: %v", time.Now().Format("15:04:05.0"), kind, name, err))
		return
	}
	in.notes = append(in.notes, fmt.Sprintf("%s %s: no preemption yet; submitted %s (4 GPUs, %s, not preemptible)",
		time.Now().Format("15:04:05.0"), kind, name, qosClasses[workload.QoSGuaranteed]))
}

func guaranteedPriority() int64 {
	p, _ := workload.QoSGuaranteed.Priority()
	return p
}

// armWhen waits, without holding up the other faults, for the moment
// cond describes (until the faults end), then fires the fault; when the
// moment never comes, the notes say so.
func (in *injector) armWhen(ctx context.Context, kind string, cond func() (string, bool), fire func(ctx context.Context, kind, what string)) {
	in.mu.Lock()
	if in.armed[kind] {
		in.mu.Unlock()
		return
	}
	in.armed[kind] = true
	until := in.until
	in.mu.Unlock()
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer func() {
			in.mu.Lock()
			in.armed[kind] = false
			in.mu.Unlock()
		}()
		armedAt := time.Now()
		for {
			if ctx.Err() != nil {
				return
			}
			if !time.Now().Before(until) {
				in.mu.Lock()
				in.notes = append(in.notes, fmt.Sprintf("%s %s: armed at %s, nothing of the kind in flight before the faults ended",
					time.Now().Format("15:04:05.0"), kind, armedAt.Format("15:04:05.0")))
				in.mu.Unlock()
				return
			}
			what, hit := cond()
			if hit {
				fire(ctx, kind, what)
				return
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}()
}

func (in *injector) killLeader(ctx context.Context, kind, what string) {
	in.killMu.Lock()
	defer in.killMu.Unlock()
	w := in.w
	r, _, ok := w.leader()
	if !ok {
		in.note(kind, "no leader to kill during %s", what)
		return
	}
	at := time.Now()
	w.kill(r)
	in.note(kind, "%s killed during %s", r.name, what)
	if ok := w.ticked(at, nil, time.Minute); !ok.IsZero() {
		in.recovered(recTakeover, ok.Sub(at))
	}
	if _, err := w.startReplica(); err != nil && ctx.Err() == nil {
		w.t.Errorf("start a new standby: %v", err)
	}
}

// setAPIDown cuts every replica off the API server, or restores it.
func (w *world) setAPIDown(down bool) {
	w.mu.Lock()
	w.apiDown = down
	fs := append(w.faulty[:0:0], w.faulty...)
	w.mu.Unlock()
	for _, f := range fs {
		f.SetUnavailable(down)
	}
}

// clear lifts every fault at the end of the run.
func (in *injector) clear() {
	w := in.w
	w.setAPIDown(false)
	w.ysim.SetFault(yarnsim.FaultNone)
	w.aws.Throttle("", 0)
	for _, p := range chaosPools {
		w.aws.FailLaunches(p.Group, 0, "")
		w.aws.NeverRegister(p.Group, 0)
	}
	w.aws.FailTerminate(0)
	w.aws.FailTerminateHalfway(0)
	if w.ha.Active() < 0 {
		w.ha.SetActive(0)
	}
	w.yadmin.SetStandby(false)
}
