package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// The integration tests share one real control plane, started on first use
// (so unit tests alone never start it) and stopped by TestMain.
var (
	clusterOnce sync.Once
	clusterEnv  *k8senv.Env
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clusterEnv != nil {
		if err := clusterEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}
	os.Exit(code)
}

// cluster returns the shared control plane, building its binaries first
// on a cold cache (minutes, within the Start budget).
func cluster(t *testing.T) *k8senv.Env {
	t.Helper()
	clusterOnce.Do(func() {
		clusterEnv, clusterErr = k8senv.Start(context.Background(), k8senv.Options{
			Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
		})
	})
	if clusterErr != nil {
		t.Fatalf("start control plane: %v", clusterErr)
	}
	return clusterEnv
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var integrationConfig = Config{GPUNodeLabels: map[string]string{"infra-type": "gpu"}}

// integrationTenants maps the test's namespaces, as the broker's tenant
// index does for the Side.
var integrationTenants = broker.NewTenantIndex([]broker.Tenant{
	{Name: "research", Namespaces: []string{"ml", "gated"}}, {Name: "serving", Namespaces: []string{"drain"}}})

// observeTenants observes and maps tenants through integrationTenants.
func observeTenants(ctx context.Context, o *Observer) (Observation, error) {
	obs, err := o.Observe(ctx)
	return MapTenants(obs, integrationTenants), err
}

func startObserver(t *testing.T, ctx context.Context, env *k8senv.Env) *Observer {
	t.Helper()
	o, err := NewObserver(env.Client, integrationConfig, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return o
}

func createNamespace(t *testing.T, ctx context.Context, env *k8senv.Env, name string) {
	t.Helper()
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("wait for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func findPod(obs Observation, ns, prefix string) (PodReport, bool) {
	for _, p := range obs.Pods {
		if p.Namespace == ns && len(p.Name) >= len(prefix) && p.Name[:len(prefix)] == prefix {
			return p, true
		}
	}
	return PodReport{}, false
}

func findNode(obs Observation, name string) (broker.Node, bool) {
	i := slices.IndexFunc(obs.Nodes, func(n broker.Node) bool { return n.Name == name })
	if i < 0 {
		return broker.Node{}, false
	}
	return obs.Nodes[i], true
}

var gpuTaint = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}

// TestReferenceScenario runs the reference scenario's Job on a real control
// plane: with no GPU node it is pending demand within 2 s of the scheduler
// marking it unschedulable; a node that has joined but whose GPUs are not
// advertised yet is in flight (registered), not a reason to buy another;
// once the 4 GPUs are advertised the pod is scheduled and leaves the ledger.
func TestReferenceScenario(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "ml")
	_, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "high-priority-training"},
		Value:       1000000,
		Description: "critical training",
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := startObserver(t, ctx, env)

	// Our own watch records when the scheduler gives up on the pod.
	w, err := env.Client.CoreV1().Pods("ml").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	marked := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				continue
			}
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				if _, unsched := unschedulableCondition(pod); unsched {
					marked <- time.Now()
					return
				}
			}
		}
	}()

	two := resource.MustParse("2")
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "elastic-gpu-training", Namespace: "ml"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:     corev1.RestartPolicyOnFailure,
			PriorityClassName: "high-priority-training",
			NodeSelector:      map[string]string{"infra-type": "gpu"},
			Tolerations:       []corev1.Toleration{{Key: gpuTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "train", Image: "example.com/train:1",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{ResourceGPU: two},
					Limits:   corev1.ResourceList{ResourceGPU: two},
				},
			}},
		}}},
	}
	if _, err := env.Client.BatchV1().Jobs("ml").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var markedAt time.Time
	select {
	case markedAt = <-marked:
	case <-ctx.Done():
		t.Fatal("the scheduler never marked the Job's pod unschedulable")
	}
	var obs Observation
	waitFor(t, ctx, "the pod to be pending demand", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		return err == nil && len(obs.Demand) == 1, err
	})
	// A figure, not an assertion (the target is 2 s; timing on a shared
	// 2-core machine is not something a test should fail on).
	t.Logf("pending demand observed %s after the scheduler marked the pod unschedulable", time.Since(markedAt))
	// The informer's cache is updated before its event handlers run, so
	// the wake-up may trail the demand seen through Observe by a moment.
	select {
	case <-o.Unschedulable():
	case <-time.After(2 * time.Second):
		t.Error("no wake-up on the unschedulable channel within 2s")
	}
	d := obs.Demand[0]
	if d.Priority != 1000000 || d.GPUsPerUnit != 2 || d.Units != 1 || d.Tenant != "research" || d.Queue != "ml" ||
		d.Constraints.NodeSelector["infra-type"] != "gpu" || d.Source != broker.SourceK8s {
		t.Errorf("demand = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("demand does not validate: %v", err)
	}
	p, ok := findPod(obs, "ml", "elastic-gpu-training-")
	if !ok || !p.Counted || p.Reason != ReasonUnschedulable || p.PriorityClass != "high-priority-training" {
		t.Errorf("pod report = %+v", p)
	}

	// The instance boots: the node registers, KWOK makes it Ready, but the
	// device plugin has not advertised the GPUs yet.
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{
		Name: "gpu-training-1", GPUs: 4, Model: "NVIDIA-H100-80GB-HBM3", WithholdGPUs: true,
		Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
		Taints: []corev1.Taint{gpuTaint}, ProviderID: "aws:///us-east-1a/i-0123456789abcdef0",
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the new node to be Ready without GPUs", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		n, ok := findNode(obs, "gpu-training-1")
		return ok && obs.NodeDetails[n.Name].Ready, err
	})
	n, _ := findNode(obs, "gpu-training-1")
	if n.Phase != broker.PhaseRegistered || obs.NodeDetails[n.Name].Reason != NodeGPUNotAdvertised || n.InstanceID != "i-0123456789abcdef0" || n.GPUModel != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("node before the device plugin = %+v %+v", n, obs.NodeDetails[n.Name])
	}
	if len(obs.Demand) != 1 {
		t.Errorf("demand while GPUs are not advertised = %d, want the pod still pending", len(obs.Demand))
	}

	// The device plugin reports 4 GPUs: the scheduler places the pod.
	if err := env.AdvertiseGPUs(ctx, "gpu-training-1", 4); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod to be scheduled and leave the ledger", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		_, pending := findPod(obs, "ml", "elastic-gpu-training-")
		return err == nil && len(obs.Demand) == 0 && !pending, err
	})
	pods, err := env.Client.CoreV1().Pods("ml").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "gpu-training-1" {
		t.Errorf("pods after scale-up = %+v", pods.Items)
	}
	n, _ = findNode(obs, "gpu-training-1")
	if n.GPUsTotal != 4 || n.Phase != broker.PhaseActive {
		t.Errorf("node after the device plugin = phase %s total %d", n.Phase, n.GPUsTotal)
	}
}

// TestGatedPodIsNotDemand: a scheduling-gated GPU pod is reported as gated
// and not counted; once its gate is removed the scheduler decides and it
// becomes demand.
func TestGatedPodIsNotDemand(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "gated")
	o := startObserver(t, ctx, env)
	pod := gpuPod("gated", "held", 8) // more GPUs than any node has
	pod.UID, pod.Spec.Priority, pod.Status = "", nil, corev1.PodStatus{}
	pod.Spec.Containers[0].Image = "example.com/x:1"
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/admission"}}
	if _, err := env.Client.CoreV1().Pods("gated").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var obs Observation
	var err error
	waitFor(t, ctx, "the gated pod to be reported", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		_, ok := findPod(obs, "gated", "held")
		return ok, err
	})
	// Give the scheduler time to (not) act on it: it must stay uncounted.
	time.Sleep(time.Second)
	obs, err = observeTenants(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := findPod(obs, "gated", "held"); r.Counted || r.Reason != ReasonGated {
		t.Fatalf("gated pod = %+v, want not counted, reason %s", r, ReasonGated)
	}
	for _, d := range obs.Demand {
		if d.Queue == "gated" {
			t.Fatalf("gated pod counted as demand: %+v", d)
		}
	}

	p, err := env.Client.CoreV1().Pods("gated").Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.SchedulingGates = nil
	if _, err := env.Client.CoreV1().Pods("gated").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the ungated pod to become demand", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		r, _ := findPod(obs, "gated", "held")
		return r.Counted, err
	})
}

func readyPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "serve", Image: "example.com/serve:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: resource.MustParse("1")}},
			}},
		},
	}
}

// TestDrainHonoursPDB drains a node whose pod is covered by a PDB with
// minAvailable 1: the drain reports "blocked by PDB" naming it, and
// succeeds once a second replica lets the budget allow a disruption. The
// DaemonSet pod on the node is left in place.
func TestDrainHonoursPDB(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "drain")
	o := startObserver(t, ctx, env)
	a, err := NewActuator(env.Client, integrationConfig, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"drain-1", "drain-2"} {
		if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: name, GPUs: 4, Model: "NVIDIA-A100-SXM4-80GB", Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "serve"}
	if _, err := env.Client.CoreV1().Pods("drain").Create(ctx, readyPod("drain", "serve-a", "drain-1", labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets("drain").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "serve-pdb", Namespace: "drain"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dsLabels := map[string]string{"app": "gpu-agent"}
	if _, err := env.Client.AppsV1().DaemonSets("drain").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent", Namespace: "drain"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: dsLabels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": "drain-1"},
					Containers:   []corev1.Container{{Name: "agent", Image: "example.com/agent:1"}},
				},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var obs Observation
	waitFor(t, ctx, "the PDB to allow no disruption with the DaemonSet pod running", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		n, _ := findNode(obs, "drain-1")
		i := slices.IndexFunc(obs.PDBs, func(p PDBReport) bool { return p.Name == "serve-pdb" })
		return i >= 0 && obs.PDBs[i].CurrentHealthy == 1 && obs.PDBs[i].DisruptionsAllowed == 0 && len(n.Work) == 2, err
	})
	if i := slices.IndexFunc(obs.PDBs, func(p PDBReport) bool { return p.Name == "serve-pdb" }); !slices.Equal(obs.PDBs[i].Pods, []string{"drain/serve-a"}) {
		t.Errorf("PDB protects %v, want [drain/serve-a]", obs.PDBs[i].Pods)
	}
	n, _ := findNode(obs, "drain-1")
	if n.GPUsAllocated != 1 || n.Phase != broker.PhaseActive {
		t.Errorf("node before drain = phase %s allocated %d", n.Phase, n.GPUsAllocated)
	}

	res, err := a.Drain(ctx, "drain-1", DrainOptions{Timeout: 3 * time.Second, RetryInitial: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first drain: %+v", res)
	if res.Outcome != DrainBlockedByPDB || !slices.Equal(res.PDBs, []string{"drain/serve-pdb"}) || !slices.Equal(res.PodsLeft, []string{"drain/serve-a"}) {
		t.Fatalf("drain under a PDB = %+v, want blocked by drain/serve-pdb with serve-a left", res)
	}

	// A second replica on another node lets the budget allow one disruption.
	if _, err := env.Client.CoreV1().Pods("drain").Create(ctx, readyPod("drain", "serve-b", "drain-2", labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = a.Drain(ctx, "drain-1", DrainOptions{Timeout: time.Minute, RetryInitial: 200 * time.Millisecond, RetryMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second drain: %+v", res)
	if res.Outcome != DrainDrained || !slices.Equal(res.Evicted, []string{"drain/serve-a"}) || len(res.Skipped) != 1 || len(res.PodsLeft) != 0 {
		t.Fatalf("drain once the budget allows = %+v, want drained with serve-a evicted and the DaemonSet pod skipped", res)
	}
	if _, err := env.Client.CoreV1().Pods("drain").Get(ctx, "serve-a", metav1.GetOptions{}); err == nil {
		t.Error("serve-a still exists after the drain")
	}

	// The node is cordoned; hand it to YARN, then give it back.
	if err := a.Cordon(ctx, "drain-1", string(broker.OwnerYARN)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the observer to see the node drained and owned by YARN", func() (bool, error) {
		obs, err = observeTenants(ctx, o)
		n, _ := findNode(obs, "drain-1")
		return n.Phase == broker.PhaseDrained && n.Owner == broker.OwnerYARN, err
	})
	if err := a.Uncordon(ctx, "drain-1"); err != nil {
		t.Fatal(err)
	}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, "drain-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OwnerTaintKey }) {
		t.Errorf("node after uncordon: unschedulable %v taints %v", node.Spec.Unschedulable, node.Spec.Taints)
	}

	evs, err := env.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "drain-1").String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		if e.Source.Component == "gpubroker" {
			reasons = append(reasons, e.Reason)
		}
	}
	if !slices.Contains(reasons, EventDrainBlocked) || !slices.Contains(reasons, EventDrained) {
		t.Errorf("node events = %v, want %s and %s", reasons, EventDrainBlocked, EventDrained)
	}
}

// TestPodEvents writes TriggeredScaleUp and NotTriggerScaleUp on a pod.
func TestPodEvents(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "events")
	a, err := NewActuator(env.Client, integrationConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := readyPod("events", "p", "", nil)
	if _, err := env.Client.CoreV1().Pods("events").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.PodEvent(ctx, "events", "p", corev1.EventTypeNormal, EventTriggeredScaleUp, "pod triggered scale-up: gpu-training-group 0->1"); err != nil {
		t.Fatal(err)
	}
	if err := a.PodEvent(ctx, "events", "p", corev1.EventTypeNormal, EventNotTriggerScaleUp, "pod didn't trigger scale-up: over-quota"); err != nil {
		t.Fatal(err)
	}
	if err := a.PodEvent(ctx, "events", "missing", corev1.EventTypeNormal, EventTriggeredScaleUp, "x"); !errorsIsNotFound(err) {
		t.Errorf("event on a missing pod: err = %v, want ErrNotFound", err)
	}
	evs, err := env.Client.CoreV1().Events("events").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs.Items {
		if e.Source.Component == "gpubroker" && e.InvolvedObject.Name == "p" && e.InvolvedObject.UID != "" {
			got = append(got, e.Reason)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{EventNotTriggerScaleUp, EventTriggeredScaleUp}) {
		t.Errorf("pod events = %v", got)
	}
}
