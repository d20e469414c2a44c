package chaos

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
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

// yapp is a YARN app of the workload: it runs for dur once all its
// containers are placed, then the sampler finishes it. Every container
// counts as work, its ApplicationMaster and CPU containers too.
type yapp struct {
	dur     time.Duration
	started time.Time
	// want is how many non-AM containers it asks for; gpu whether any of
	// them asks for GPUs (then it is GPU demand while none runs).
	want    int
	gpu     bool
	running map[string]ycontainer // by container id, as last seen
}

// ycontainer is a container of a workload app as last seen.
type ycontainer struct {
	host string
	am   bool
	gpus int
}

func (c ycontainer) what() string {
	switch {
	case c.am:
		return "its ApplicationMaster container"
	case c.gpus == 0:
		return "its CPU container"
	}
	return "its GPU container"
}

// sampler builds the checker's samples. It also finishes YARN apps (in
// the same goroutine, so a finish is never mistaken for a kill).
type sampler struct {
	w   *world
	smu sync.Mutex // one sample at a time

	mu   sync.Mutex
	apps map[string]*yapp // running or pending YARN apps of the workload

	evicted   int // k8ssim evictions seen
	histID    int64
	decID     int64
	closed    map[string]string
	preempted map[string]bool

	submitted, finished int
}

func newSampler(w *world) *sampler {
	return &sampler{w: w, apps: map[string]*yapp{}, closed: map[string]string{}, preempted: map[string]bool{}}
}

// runWorkload submits the generator's tasks at their arrival times until
// ctx ends: pods to k8ssim (which ends them after their run time), apps to
// yarnsim (which the sampler ends).
func (s *sampler) runWorkload(ctx context.Context, gen *workload.Generator) {
	w := s.w
	start := time.Now()
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	for {
		t := gen.Next()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(t.Arrival))):
		}
		ns, queue := "ml-training", "root.training"
		if n, _ := strconv.Atoi(t.Name[len(t.Name)-1:]); n%3 == 0 {
			ns, queue = "research", "root.research"
		}
		switch t.Side {
		case broker.SourceK8s:
			err := w.kc.SubmitPod(ctx, k8ssim.PodSpec{Namespace: ns, Name: t.Name, GPUs: t.GPUs,
				PriorityClassName: qosClasses[t.QoS], Priority: int32(t.Priority),
				NodeSelector: map[string]string{"infra-type": "gpu"}, Tolerations: tol, Duration: t.Duration,
				Annotations: map[string]string{k8s.PreemptibleAnnotation: strconv.FormatBool(t.Preemptible)}})
			if err != nil && ctx.Err() == nil {
				w.t.Errorf("submit pod %s: %v", t.Name, err)
				return
			}
		default:
			var tags []string
			if !t.Preemptible {
				tags = append(tags, yarn.TagNotPreemptible)
			}
			// Every app has a managed AM (a 0-GPU container on a GPU
			// node); one in four has a CPU executor beside its GPU
			// container, and one in ten is a CPU-only app on the GPU
			// nodes: any of them keeps its node on YARN.
			s.mu.Lock()
			i := s.submitted
			s.mu.Unlock()
			reqs := []yarnsim.RequestSpec{{Containers: 1, GPUs: t.GPUs}}
			switch {
			case i%10 == 7:
				reqs = []yarnsim.RequestSpec{{Containers: 2, GPUs: 0}}
			case i%4 == 1:
				reqs = append(reqs, yarnsim.RequestSpec{Containers: 1, GPUs: 0})
			}
			id, err := w.ysim.Submit(yarnsim.AppSpec{Name: t.Name, Queue: queue, Priority: t.Priority, Tags: tags,
				ManagedAM: true, Requests: reqs})
			if err != nil {
				w.t.Errorf("submit app %s: %v", t.Name, err)
				return
			}
			if i%5 == 3 {
				// A trainer that traps SIGTERM to checkpoint: preempted,
				// it outlives its grace and gets FORCEFUL_SHUTDOWN, so a
				// preemption is in flight long enough for a failover to
				// hit it (fRMFailoverPreempt).
				w.ysim.IgnoreGracefulShutdown(id)
			}
			a := &yapp{dur: t.Duration, running: map[string]ycontainer{}}
			for _, r := range reqs {
				a.want += r.Containers
				a.gpu = a.gpu || r.GPUs > 0
			}
			s.mu.Lock()
			s.apps[id] = a
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.submitted++
		s.mu.Unlock()
	}
}

// yarnStep finishes the apps whose run time is over and reports every
// container (AMs and CPU containers too) that ended otherwise.
func (s *sampler) yarnStep(now time.Time) []Kill {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kills []Kill
	lost := func(id, cid string, c ycontainer, why string) {
		kills = append(kills, Kill{Source: broker.SourceYARN, Key: cid, App: id, Node: c.host, Why: c.what() + " " + why})
	}
	for id, a := range s.apps {
		cs, err := s.w.ysim.Containers(id)
		if err != nil {
			// The app is gone without being finished here: killed.
			for cid, c := range a.running {
				lost(id, cid, c, "died with its app")
			}
			delete(s.apps, id)
			continue
		}
		cur := map[string]yarnsim.Container{}
		for _, c := range cs {
			cur[c.ID] = c
		}
		for cid, c := range a.running {
			if _, ok := cur[cid]; !ok {
				lost(id, cid, c, "was lost")
				delete(a.running, cid)
				if !c.am {
					a.started = time.Time{} // its work starts again
				}
			}
		}
		work := 0
		for _, c := range cs {
			if _, ok := a.running[c.ID]; !ok {
				a.running[c.ID] = ycontainer{host: c.Host, am: c.AM, gpus: c.GPUs}
			}
			if !c.AM {
				work++
			}
		}
		if a.started.IsZero() {
			if work < a.want {
				continue
			}
			a.started = now
		}
		if now.Sub(a.started) >= a.dur {
			delete(s.apps, id)
			s.finished++
			if err := s.w.ysim.Finish(id); err != nil {
				s.w.t.Errorf("finish %s: %v", id, err)
			}
		}
	}
	return kills
}

// pendingYARN returns the ID prefixes of the workload's apps waiting for
// their container.
func (s *sampler) pendingYARN() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, a := range s.apps {
		if !a.gpu {
			continue // no GPU demand
		}
		gpuRunning := false
		for _, c := range a.running {
			gpuRunning = gpuRunning || c.gpus > 0
		}
		if !gpuRunning {
			out = append(out, "yarn/"+id+"/")
		}
	}
	return out
}

// pendingK8s returns the demand IDs of GPU pods waiting to be scheduled.
func (s *sampler) pendingK8s(ctx context.Context) ([]string, error) {
	pods, err := s.w.kc.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" && podGPUs(&p) > 0 {
			out = append(out, "k8s/"+string(p.UID))
		}
	}
	return out, nil
}

// sample looks at the world: the kills first, then the clouds and
// clusters, then the store (whose records of a kill's preemption precede
// the kill).
func (s *sampler) sample(ctx context.Context) Sample {
	s.smu.Lock()
	defer s.smu.Unlock()
	w := s.w
	now := time.Now()
	smp := Sample{At: now}
	for _, e := range w.kc.EvictedPods(s.evicted) {
		s.evicted++
		if e.GPUs > 0 {
			smp.Kills = append(smp.Kills, Kill{Source: broker.SourceK8s, Key: string(e.UID), Name: e.Namespace + "/" + e.Name, Node: e.Node, Why: "evicted"})
		}
	}
	w.mu.Lock()
	smp.Kills = append(smp.Kills, w.kills...)
	w.kills = nil
	smp.LostToFaults = map[string]bool{}
	for n := range w.lost {
		smp.LostToFaults[n] = true
	}
	w.mu.Unlock()
	smp.Kills = append(smp.Kills, s.yarnStep(now)...)
	for _, p := range chaosPools {
		g, ok := w.aws.Group(p.Group)
		if ok {
			smp.Pools = append(smp.Pools, PoolSample{Name: p.Name, Desired: g.Desired, Live: g.InService + g.Pending})
		}
	}
	smp.Nodes = s.nodes(ctx)
	smp.Store = s.readStore(ctx)
	return smp
}

// nodes reads Kubernetes, then YARN, then Kubernetes again: a node counts
// as schedulable on Kubernetes only in both reads, so a hand-over between
// the reads is not mistaken for overlap while a real overlap still shows.
func (s *sampler) nodes(ctx context.Context) []NodeSample {
	first := s.k8sSchedulable(ctx)
	yarnOK := map[string]bool{}
	for name := range first {
		yarnOK[name] = s.w.ysim.NodeState(name) == "RUNNING" && s.w.ysim.NodeGPUs(name) > 0
	}
	second := s.k8sSchedulable(ctx)
	var out []NodeSample
	for name, ok := range first {
		out = append(out, NodeSample{Name: name, K8sSchedulable: ok && second[name], YARNSchedulable: yarnOK[name]})
	}
	return out
}

func (s *sampler) k8sSchedulable(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	nodes, err := s.w.kc.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out
	}
	for _, n := range nodes.Items {
		ok := !n.Spec.Unschedulable
		for _, t := range n.Spec.Taints {
			if t.Key == k8s.OwnerTaintKey && t.Effect == corev1.TaintEffectNoSchedule {
				ok = false
			}
		}
		out[n.Name] = ok
	}
	return out
}

// readStore reads the ops, the ledger and the preemptions; nil when the
// database does not answer.
func (s *sampler) readStore(ctx context.Context) *StoreSample {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w := s.w
	rows, err := w.raw.Query(ctx, `SELECT source || '/' || key FROM demand`)
	if err != nil {
		return nil
	}
	open := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil
		}
		open[id] = true
	}
	if rows.Err() != nil {
		return nil
	}
	rows, err = w.raw.Query(ctx, `SELECT id, source || '/' || key, reason FROM demand_history WHERE id > $1 ORDER BY id`, s.histID)
	if err != nil {
		return nil
	}
	for rows.Next() {
		var id int64
		var key, reason string
		if err := rows.Scan(&id, &key, &reason); err != nil {
			rows.Close()
			return nil
		}
		s.closed[key], s.histID = reason, id
	}
	if rows.Err() != nil {
		return nil
	}
	rows, err = w.raw.Query(ctx, `SELECT id, detail FROM decisions WHERE kind = 'preempt' AND id > $1 ORDER BY id`, s.decID)
	if err != nil {
		return nil
	}
	for rows.Next() {
		var id int64
		var detail []byte
		if err := rows.Scan(&id, &detail); err != nil {
			rows.Close()
			return nil
		}
		s.decID = id
		var a broker.Action
		if json.Unmarshal(detail, &a) == nil {
			for _, v := range a.Victims {
				s.preempted[v.Key], s.preempted[v.Name] = true, true
				if v.App != "" {
					s.preempted[v.App] = true
				}
			}
		}
	}
	if rows.Err() != nil {
		return nil
	}
	ops, err := w.check.OpenOps(ctx)
	if err != nil {
		return nil
	}
	st := &StoreSample{OpenOps: ops, Open: open, Closed: map[string]string{}, Preempted: map[string]bool{}}
	for k, v := range s.closed {
		st.Closed[k] = v
	}
	for k := range s.preempted {
		if !strings.HasPrefix(k, "unlisted/") {
			st.Preempted[k] = true
		}
	}
	return st
}
