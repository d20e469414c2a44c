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

// yapp is a YARN app of the workload: it runs for dur once its container
// is placed, then the sampler finishes it.
type yapp struct {
	dur       time.Duration
	started   time.Time
	container string
	host      string
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
			id, err := w.ysim.Submit(yarnsim.AppSpec{Name: t.Name, Queue: queue, Priority: t.Priority, Tags: tags,
				Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: t.GPUs}}})
			if err != nil {
				w.t.Errorf("submit app %s: %v", t.Name, err)
				return
			}
			s.mu.Lock()
			s.apps[id] = &yapp{dur: t.Duration}
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.submitted++
		s.mu.Unlock()
	}
}

// yarnStep finishes the apps whose run time is over and reports the
// containers that ended otherwise.
func (s *sampler) yarnStep(now time.Time) []Kill {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kills []Kill
	for id, a := range s.apps {
		cs, err := s.w.ysim.Containers(id)
		if err != nil {
			// The app is gone without being finished here: killed.
			if a.container != "" {
				kills = append(kills, Kill{Source: broker.SourceYARN, Key: a.container, App: id, Node: a.host, Why: "its app was killed"})
			}
			delete(s.apps, id)
			continue
		}
		var cur *yarnsim.Container
		for i := range cs {
			if !cs[i].AM {
				cur = &cs[i]
				break
			}
		}
		if a.container != "" && (cur == nil || cur.ID != a.container) {
			kills = append(kills, Kill{Source: broker.SourceYARN, Key: a.container, App: id, Node: a.host, Why: "its container was lost"})
			a.container, a.host = "", ""
		}
		if cur == nil {
			continue
		}
		if a.container == "" {
			a.container, a.host, a.started = cur.ID, cur.Host, now
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
		if a.container == "" {
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
