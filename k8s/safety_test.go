package k8s

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpubroker/gpubroker/broker"
)

func readyCond(status corev1.ConditionStatus, reason, msg string, at time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
			Message: msg, LastTransitionTime: metav1.NewTime(at)}}
	}
}

func withTaints(keys ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		for _, k := range keys {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
	}
}

// TestNodeThatWasReadyAndStoppedIsDownNotInFlight: a node whose kubelet
// stopped (Ready=Unknown, the unreachable taint) or that turned NotReady
// after being Ready is down since its Ready transition, never a registered
// node on its way; a new node that has not been Ready yet is in flight.
func TestNodeThatWasReadyAndStoppedIsDownNotInFlight(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	cfg := Config{}.Defaults()
	running := []*corev1.Pod{gpuPod("ml", "train", 4, onNode("n", corev1.PodRunning))}
	for _, tc := range []struct {
		name      string
		seenReady bool
		node      *corev1.Node
		pods      []*corev1.Pod
		wantDown  bool
		wantPhase broker.Phase
	}{
		{name: "kubelet stopped posting status", wantDown: true, wantPhase: broker.PhaseActive,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", at),
				withTaints("node.kubernetes.io/unreachable"))},
		{name: "was seen Ready, now NotReady", seenReady: true, wantDown: true, wantPhase: broker.PhaseActive,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionFalse, "KubeletNotReady", "container runtime is down", at),
				withTaints("node.kubernetes.io/not-ready"))},
		{name: "NotReady with its pods still running (observer restarted)", pods: running, wantDown: true, wantPhase: broker.PhaseActive,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionFalse, "KubeletNotReady", "PLEG is not healthy", at))},
		{name: "cordoned and unreachable", wantDown: true, wantPhase: broker.PhaseDrained,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", at),
				func(n *corev1.Node) { n.Spec.Unschedulable = true })},
		{name: "new node, kubelet not Ready yet", wantPhase: broker.PhaseRegistered,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionFalse, "KubeletNotReady", "network plugin not ready", at),
				withTaints("node.kubernetes.io/not-ready"))},
		{name: "new node whose kubelet never posted status", wantPhase: broker.PhaseRegistered,
			node: gpuNode("n", 4, "H100", readyCond(corev1.ConditionUnknown, nodeStatusNeverUpdated, "Kubelet never posted node status.", at))},
		{name: "new node without conditions", wantPhase: broker.PhaseRegistered,
			node: gpuNode("n", 4, "H100", func(n *corev1.Node) { n.Status.Conditions = nil })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &classifier{cfg: &cfg}
			if tc.seenReady {
				up := tc.node.DeepCopy()
				up.Spec.Taints = nil
				readyCond(corev1.ConditionTrue, "KubeletReady", "", at.Add(-time.Hour))(up)
				if n, _ := c.buildNode(up, nil); n.Phase != broker.PhaseActive || n.Down != "" {
					t.Fatalf("while Ready: phase %s down %q", n.Phase, n.Down)
				}
			}
			n, d := c.buildNode(tc.node, tc.pods)
			if n.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", n.Phase, tc.wantPhase)
			}
			if tc.wantDown {
				if n.Down == "" || d.Reason != NodeDown || !n.DownSince.Equal(at) {
					t.Errorf("down %q since %s reason %q; want down since %s (the Ready transition)", n.Down, n.DownSince, d.Reason, at)
				}
				return
			}
			if n.Down != "" || !n.DownSince.IsZero() {
				t.Errorf("down %q since %s; a node never Ready is in flight, not down", n.Down, n.DownSince)
			}
		})
	}
}

// TestObserverForgetsDeletedNodes: the memory of nodes seen Ready is
// dropped with the node, so a new node reusing the name is in flight.
func TestObserverForgetsDeletedNodes(t *testing.T) {
	cfg := Config{}.Defaults()
	c := &classifier{cfg: &cfg}
	c.buildNode(gpuNode("n", 4, "H100"), nil)
	c.forgetNodes(map[types.UID]bool{})
	n, _ := c.buildNode(gpuNode("n", 4, "H100", readyCond(corev1.ConditionFalse, "KubeletNotReady", "", time.Now())), nil)
	if n.Down != "" || n.Phase != broker.PhaseRegistered {
		t.Fatalf("phase %s down %q, want a registered node in flight", n.Phase, n.Down)
	}
}

// TestStartupTaintFromConfigIsInFlight: a Ready node carrying a startup
// taint is capacity in flight, not a ready node the pod does not fit. The
// defaults cover Cilium's agent-not-ready taint and the cluster
// autoscaler's startup-taint prefix; a taint unknown to the defaults is in
// flight once configured in StartupTaints.
func TestStartupTaintFromConfigIsInFlight(t *testing.T) {
	defaults := Config{}.Defaults()
	custom := Config{StartupTaints: []string{"example.com/gpu-agent-not-ready", "boot.example.com/"}}.Defaults()
	for _, tc := range []struct {
		name     string
		cfg      Config
		taint    string
		inFlight bool
	}{
		{"cilium by default", defaults, "node.cilium.io/agent-not-ready", true},
		{"unreachable by default", defaults, "node.kubernetes.io/unreachable", true},
		{"cluster autoscaler prefix by default", defaults, "startup-taint.cluster-autoscaler.kubernetes.io/disk", true},
		{"unknown taint with defaults", defaults, "example.com/gpu-agent-not-ready", false},
		{"configured taint", custom, "example.com/gpu-agent-not-ready", true},
		{"configured prefix", custom, "boot.example.com/images", true},
		{"configured list replaces defaults", custom, "node.cilium.io/agent-not-ready", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &classifier{cfg: &tc.cfg}
			n, d := c.buildNode(gpuNode("n1", 4, "H100", withTaints(tc.taint)), nil)
			if tc.inFlight {
				if n.Phase != broker.PhaseRegistered || d.Reason != NodeNotReady || len(n.Taints) != 0 {
					t.Fatalf("phase %s reason %q taints %+v; want registered, not ready, taint dropped", n.Phase, d.Reason, n.Taints)
				}
				return
			}
			if n.Phase != broker.PhaseActive || len(n.Taints) != 1 {
				t.Fatalf("phase %s taints %+v; want an active node keeping the taint", n.Phase, n.Taints)
			}
		})
	}
	bad := Config{StartupTaints: []string{"has space"}}.Defaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "startup_taints[0]") {
		t.Fatalf("Validate = %v, want a startup_taints error", err)
	}
}

// TestDemandCarriesNoPreemptAndSchedulerReason: preemptionPolicy: Never
// becomes Demand.NoPreempt and the PodScheduled message the scheduler's
// reason.
func TestDemandCarriesNoPreemptAndSchedulerReason(t *testing.T) {
	c := testClassifier(Config{})
	never := corev1.PreemptNever
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{gpuPod("ml", "never", 2, func(p *corev1.Pod) { p.Spec.PreemptionPolicy = &never }), true},
		{gpuPod("ml", "default", 2), false},
	} {
		r := c.classify(tc.pod, PodGPURequest(tc.pod))
		d := c.demand(tc.pod, r, time.Now())
		if d.NoPreempt != tc.want {
			t.Errorf("%s: NoPreempt %v, want %v", tc.pod.Name, d.NoPreempt, tc.want)
		}
		if d.SchedulerReason != "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." {
			t.Errorf("%s: SchedulerReason %q", tc.pod.Name, d.SchedulerReason)
		}
	}
}

func newTestSide(t *testing.T, ctx context.Context, client *fake.Clientset, cfg Config) *Side {
	t.Helper()
	o, err := NewObserver(client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := NewActuator(client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return NewSide(client, o, a, time.Second)
}

// TestRunningPodsChargedToNamespaceTenant: running pods are charged to the
// tenant their namespace maps to, as pending demand is, not to a tenant
// named after the namespace.
func TestRunningPodsChargedToNamespaceTenant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := fake.NewClientset(gpuNode("n1", 8, "H100"),
		gpuPod("ml-team", "train", 4, onNode("n1", corev1.PodRunning)),
		gpuPod("scratch", "notebook", 1, onNode("n1", corev1.PodRunning)),
		gpuPod("ml-team", "pending", 2))
	s := newTestSide(t, ctx, client, Config{})
	idx := broker.TenantIndex{Namespaces: map[string]string{"ml-team": "research"}}
	obs, err := s.Observe(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Demand) != 1 || obs.Demand[0].Tenant != "research" {
		t.Fatalf("demand %+v, want ml-team/pending of research", obs.Demand)
	}
	got := map[string]string{}
	for _, w := range obs.Nodes[0].Work {
		got[w.Name] = w.Tenant
	}
	if got["ml-team/train"] != "research" || got["scratch/notebook"] != "" {
		t.Fatalf("work tenants %v; want ml-team/train charged to research and the unmapped namespace to none", got)
	}
}

// TestSideSaysWhyDemandLeft: the side keeps no previous demand set; it says
// why a key that left did from what it observes now (running: scheduled,
// else deleted), and the ledger decides which keys left.
func TestSideSaysWhyDemandLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := fake.NewClientset(gpuNode("n1", 8, "H100"), gpuPod("ml-team", "train", 4, onNode("n1", corev1.PodRunning)))
	s := newTestSide(t, ctx, client, Config{})
	obs, err := s.Observe(ctx, broker.TenantIndex{Namespaces: map[string]string{"ml-team": "research"}})
	if err != nil {
		t.Fatal(err)
	}
	if obs.Departed == nil || obs.Departed("uid-ml-team-train") != "scheduled" || obs.Departed("uid-ml-team-gone") != "deleted" {
		t.Fatalf("departure reasons: want scheduled for the running pod and deleted for one that is not there")
	}
}

// evictionRecorder records the evictions a fake clientset receives and
// answers them as the API server does: a UID precondition that does not
// match the pod is a 409 Conflict; otherwise the pod is deleted.
func evictionRecorder(client *fake.Clientset) (*[]*policyv1.Eviction, *sync.Mutex) {
	var mu sync.Mutex
	var got []*policyv1.Eviction
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		mu.Lock()
		got = append(got, ev.DeepCopy())
		mu.Unlock()
		obj, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod)
		if p := ev.DeleteOptions; p != nil && p.Preconditions != nil && p.Preconditions.UID != nil && *p.Preconditions.UID != pod.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, ev.Name, errors.New("precondition failed: UID"))
		}
		return true, nil, client.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
	})
	return &got, &mu
}

// TestEvictSparesPodRecreatedUnderSameName: a preemption evicts the pod the
// plan chose, guarded by its UID; a pod recreated under the same name since
// is never evicted, and neither is one that finished.
func TestEvictSparesPodRecreatedUnderSameName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	victim := gpuPod("ml", "train", 4, onNode("n1", corev1.PodRunning))
	client := fake.NewClientset(gpuNode("n1", 8, "H100"), victim)
	evictions, mu := evictionRecorder(client)
	s := newTestSide(t, ctx, client, Config{})
	w := broker.Workload{Key: string(victim.UID), Name: "ml/train"}

	// Recreated under the same name (a Job's replacement): not the victim.
	if err := client.CoreV1().Pods("ml").Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	successor := victim.DeepCopy()
	successor.UID = "uid-successor"
	if _, err := client.CoreV1().Pods("ml").Create(ctx, successor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Evict(ctx, "n1", w); err != nil {
		t.Fatalf("evict a victim that is gone: %v", err)
	}
	mu.Lock()
	n := len(*evictions)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d evictions sent; the successor must not be evicted", n)
	}
	if _, err := client.CoreV1().Pods("ml").Get(ctx, "train", metav1.GetOptions{}); err != nil {
		t.Fatalf("successor: %v", err)
	}

	// The successor as the victim: evicted with its UID as precondition.
	if err := s.Evict(ctx, "n1", broker.Workload{Key: "uid-successor", Name: "ml/train"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*evictions) != 1 {
		t.Fatalf("%d evictions, want 1", len(*evictions))
	}
	ev := (*evictions)[0]
	if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || ev.DeleteOptions.Preconditions.UID == nil ||
		*ev.DeleteOptions.Preconditions.UID != "uid-successor" {
		t.Fatalf("eviction %+v carries no UID precondition", ev.DeleteOptions)
	}
}

// TestObserveStaleWhenProbesFail: when calls to the API server fail
// (unreachable, RBAC revoked), Observe fails with ErrStale once no call has
// succeeded for StaleAfter, and recovers when one does.
func TestObserveStaleWhenProbesFail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := fake.NewClientset(gpuNode("n1", 4, "H100"))
	var down atomic.Bool
	client.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("RBAC: access denied"))
		}
		return false, nil, nil
	})
	o, err := NewObserver(client, Config{StaleAfter: 150 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	o.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Observe(ctx); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	down.Store(true)
	waitFor(t, ctx, "a failed probe", func() (bool, error) {
		o.health.mu.Lock()
		defer o.health.mu.Unlock()
		return o.health.probeErr != "", nil
	})
	if _, err := o.Observe(ctx); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	advance(200 * time.Millisecond)
	_, err = o.Observe(ctx)
	if !errors.Is(err, broker.ErrStale) || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("past the bound: %v, want ErrStale naming the failure", err)
	}
	down.Store(false)
	waitFor(t, ctx, "fresh again", func() (bool, error) {
		_, err := o.Observe(ctx)
		return err == nil, nil
	})
}

// TestObserveStaleWhileWatchFails: a watch error marks the side stale at
// once, until the informer has synced again.
func TestObserveStaleWhileWatchFails(t *testing.T) {
	h := &health{staleAfter: time.Minute, failing: map[string]watchFailure{}}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	h.now = func() time.Time { return now }
	h.synced()
	h.failing["pods"] = watchFailure{at: now, rv: "", err: "watch pods: 403 forbidden"}
	if why := h.stale(nil); !strings.Contains(why, "pods watch failing") {
		t.Fatalf("stale = %q, want the failing pods watch", why)
	}
	// Quiet for longer than the bound while probes succeed: recovered.
	now = now.Add(2 * time.Minute)
	h.synced()
	if why := h.stale(nil); why != "" {
		t.Fatalf("stale = %q after the watch recovered", why)
	}
}
