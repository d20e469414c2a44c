package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
)

// a100 is the CEL selector of NVIDIA's A100, the pool's GPU model.
const a100 = `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100"`

// callsNow copies the SetDesired calls made so far.
func (w *world) callsNow() []desiredCall {
	w.calls.mu.Lock()
	defer w.calls.mu.Unlock()
	return append([]desiredCall(nil), w.calls.calls...)
}

// terminationsNow copies the Terminate calls made so far.
func (w *world) terminationsNow() []terminated {
	w.termMu.Lock()
	defer w.termMu.Unlock()
	return append([]terminated(nil), w.terminations...)
}

// storeGPUsAllocated is what the broker's store says node holds, and
// whether the store knows the node.
func (w *world) storeGPUsAllocated(node string) (int, bool) {
	n, ok := w.storedNode(node)
	return n.GPUsAllocated, ok
}

// storedNode is node as the broker's store holds it.
func (w *world) storedNode(node string) (broker.Node, bool) {
	nodes, err := w.st.ListNodes(w.ctx)
	if err != nil {
		return broker.Node{}, false
	}
	for _, n := range nodes {
		if n.Name == node {
			return n, true
		}
	}
	return broker.Node{}, false
}

// runningWith waits for pod name to run and the broker to count gpus
// allocated on its node, and returns the node.
func (w *world) runningWith(name string, gpus int) string {
	w.t.Helper()
	var node string
	w.eventually(90*time.Second, "pod "+name+" to run", func() bool {
		n, ok := w.runningOn(name)
		node = n
		return ok
	})
	w.eventually(30*time.Second, fmt.Sprintf("the broker to count %d GPUs on %s", gpus, node), func() bool {
		g, ok := w.storeGPUsAllocated(node)
		return ok && g == gpus
	})
	return node
}

// createClaim creates a claim of count A100s in the world's namespace.
func (w *world) createClaim(name string, count int64) {
	w.t.Helper()
	if _, err := kubeEnv.Client.ResourceV1().ResourceClaims(w.ns).Create(w.ctx, gpuClaim(w.ns, name, count, a100), metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// createDRAPod creates p in the world's namespace.
func (w *world) createDRAPod(p *corev1.Pod) {
	w.t.Helper()
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// runningOn reports the node pod name runs on, once it is bound and Running.
func (w *world) runningOn(name string) (string, bool) {
	p, ok := w.pod(name)
	if !ok || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
		return "", false
	}
	return p.Spec.NodeName, true
}

// tempPriorityClass creates a PriorityClass of value under a name unique
// to this run and deletes it when the test ends.
func tempPriorityClass(t *testing.T, base string, value int32) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
	pcs := kubeEnv.Client.SchedulingV1().PriorityClasses()
	if _, err := pcs.Create(context.Background(), &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pcs.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete PriorityClass %s: %v", name, err)
		}
	})
	return name
}

// TestDRASharedClaimBuysOnce: one ResourceClaim of 2 A100s named by three
// pods is one demand of 2 GPUs, not three: with the pool at zero the
// broker makes exactly one scale-up, to one node, and no more after the
// pods run. The scheduler allocates the claim on that node and binds all
// three pods there (a shared claim's pods share its node), and the broker
// counts the claim's 2 GPUs once on it.
func TestDRASharedClaimBuysOnce(t *testing.T) {
	ensureGPUDeviceClass(t)
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Minute, namespace: "dra-shared", bootDelay: time.Second})
	w.draSlices.Store(true)
	w.createClaim("shared-two", 2)
	pods := []string{"shared-a", "shared-b", "shared-c"}
	for _, name := range pods {
		w.createDRAPod(claimPod(w.ns, name, "shared-two"))
	}
	var node string
	w.eventually(90*time.Second, "the three pods of the shared claim to run", func() bool {
		for _, name := range pods {
			if _, ok := w.runningOn(name); !ok {
				return false
			}
		}
		return true
	})
	for _, name := range pods {
		n, _ := w.runningOn(name)
		if node == "" {
			node = n
		}
		if n != node {
			t.Fatalf("pod %s runs on %s, pod %s on %s: a shared claim's pods must share its node", name, n, pods[0], node)
		}
	}
	claim, err := kubeEnv.Client.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, "shared-two", metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
		t.Fatalf("claim status %+v, %v: want 2 devices allocated", claim.Status, err)
	}
	if len(claim.Status.ReservedFor) != 3 {
		t.Fatalf("claim reserved for %+v, want the 3 pods", claim.Status.ReservedFor)
	}
	// The claim's 2 GPUs count once on the node, not once per pod.
	w.eventually(30*time.Second, "the broker to count the shared claim's 2 GPUs on "+node, func() bool {
		g, ok := w.storeGPUsAllocated(node)
		return ok && g == 2
	})
	time.Sleep(4 * time.Second) // a few more ticks: nothing more is bought
	cs := w.callsNow()
	if len(cs) != 1 || cs[0].Target != 1 {
		t.Fatalf("SetDesired calls %+v, want exactly one, to 1 node", cs)
	}
	if d := w.desired(); d != 1 {
		t.Fatalf("desired %d, want 1", d)
	}
	if g, _ := w.storeGPUsAllocated(node); g != 2 {
		t.Fatalf("the broker counts %d GPUs allocated on %s, want the shared claim's 2", g, node)
	}
	t.Logf("one scale-up to 1 node; claim %s allocated %d devices on %s, reserved for %d pods",
		claim.Name, len(claim.Status.Allocation.Devices.Results), node, len(claim.Status.ReservedFor))
}

// TestDRARunningPodKeepsNodeFromIdleReclaim: with scale_down_unneeded at
// 3 s, a pod holding 3 of a node's 4 GPUs through a claim (no
// nvidia.com/gpu in its requests) keeps the node it was bought for: for
// five times the unneeded time the pool stays at one node, nothing is
// drained or terminated, and the broker's store counts the claim's 3 GPUs
// on the node. When the pod and its claim are deleted the same node is
// reclaimed within seconds: only the DRA work kept it.
func TestDRARunningPodKeepsNodeFromIdleReclaim(t *testing.T) {
	ensureGPUDeviceClass(t)
	const unneeded = 3 * time.Second
	w := newWorld(t, worldOptions{maxNodes: 2, unneeded: unneeded, namespace: "dra-keep", bootDelay: time.Second})
	w.draSlices.Store(true)
	w.createClaim("three-a100", 3)
	w.createDRAPod(claimPod(w.ns, "dra-busy", "three-a100"))
	node := w.runningWith("dra-busy", 3)
	// Five times the unneeded time: the node stays.
	watch := 5 * unneeded
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for _, c := range w.callsNow() {
			if c.Target < 1 {
				t.Fatalf("SetDesired to %d at %s while the DRA pod runs on %s", c.Target, c.At.Format(time.RFC3339Nano), node)
			}
		}
		if d := w.desired(); d != 1 {
			t.Fatalf("desired %d while the DRA pod runs, want 1", d)
		}
		if ts := w.terminationsNow(); len(ts) > 0 {
			t.Fatalf("terminations %+v while the DRA pod runs on %s", ts, node)
		}
		n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s of the running DRA pod: %v", node, err)
		}
		if n.Spec.Unschedulable {
			t.Fatalf("node %s cordoned while the DRA pod runs on it", node)
		}
		if on, ok := w.runningOn("dra-busy"); !ok || on != node {
			t.Fatalf("the DRA pod no longer runs on %s", node)
		}
	}
	if g, _ := w.storeGPUsAllocated(node); g != 3 {
		t.Fatalf("the broker counts %d GPUs allocated on %s, want the claim's 3", g, node)
	}
	if ds := w.decisions(string(broker.ActScaleDown), ""); len(ds) > 0 {
		t.Fatalf("scale-down decided while the DRA pod runs: %s", ds[0].Reason)
	}
	t.Logf("node %s kept for %s (%d x unneeded) with 3 GPUs allocated through the claim", node, watch, watch/unneeded)

	// Without the DRA work the node is idle, and reclaimed.
	gone := time.Now()
	if err := kubeEnv.Client.CoreV1().Pods(w.ns).Delete(w.ctx, "dra-busy", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := kubeEnv.Client.ResourceV1().ResourceClaims(w.ns).Delete(w.ctx, "three-a100", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the idle node to be reclaimed", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 0 && len(g.Instances) == 0
	})
	ds := w.decisions(string(broker.ActScaleDown), node)
	if len(ds) == 0 {
		t.Fatalf("node %s reclaimed with no scale-down decision naming it", node)
	}
	t.Logf("reclaimed %s after the pod and claim were deleted: %s; scale-down: %s", node, time.Since(gone).Round(100*time.Millisecond), ds[0].Reason)
}

// TestDRAPodIsAPreemptionVictim: with preemption on and the pool at its
// maximum of one node, a low-priority pod holds all 4 GPUs of the node
// through a claim (the node's slice devices). A high-priority pod whose
// claim asks for those 4 GPUs arrives: it fits nowhere else, and
// kube-scheduler does not preempt for devices (its DRA plugin has no
// preemption extensions), so the broker must. It records a preemption
// naming the DRA pod, evicts it, the claim controller frees its devices,
// and the high-priority pod's claim is allocated there and it runs, with
// the pool still at one node.
func TestDRAPodIsAPreemptionVictim(t *testing.T) {
	ensureGPUDeviceClass(t)
	low := tempPriorityClass(t, "dra-e2e-low", 10)
	high := tempPriorityClass(t, "dra-e2e-high", 1000000)
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 10 * time.Minute, namespace: "dra-preempt", bootDelay: time.Second, preemption: true})
	w.draSlices.Store(true)

	w.createClaim("low-four", 4)
	victim := claimPod(w.ns, "dra-low", "low-four")
	victim.Spec.PriorityClassName = low
	w.createDRAPod(victim)
	node := w.runningWith("dra-low", 4)
	lowPod, _ := w.pod("dra-low")

	w.createClaim("high-four", 4)
	preemptor := claimPod(w.ns, "dra-high", "high-four")
	preemptor.Spec.PriorityClassName = high
	w.createDRAPod(preemptor)
	highPod, _ := w.pod("dra-high")
	w.eventually(90*time.Second, "the high-priority DRA pod to run in the low one's place", func() bool {
		n, ok := w.runningOn("dra-high")
		_, lowLeft := w.pod("dra-low")
		return ok && n == node && !lowLeft
	})
	if p, _ := w.pod("dra-high"); p.Spec.Priority == nil || *p.Spec.Priority != 1000000 {
		t.Fatalf("preemptor priority %v, want 1000000", p.Spec.Priority)
	}
	claim, err := kubeEnv.Client.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, "high-four", metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 4 {
		t.Fatalf("preemptor's claim status %+v, %v: want 4 devices allocated", claim.Status, err)
	}
	if lc, err := kubeEnv.Client.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, "low-four", metav1.GetOptions{}); err != nil || lc.Status.Allocation != nil {
		t.Fatalf("victim's claim %v, %v: want it deallocated", lc, err)
	}
	var found *broker.Decision
	for _, d := range w.decisions(string(broker.ActPreempt), node) {
		var a broker.Action
		if err := json.Unmarshal(d.Detail, &a); err != nil {
			t.Fatal(err)
		}
		for _, v := range a.Victims {
			if v.Source == broker.SourceK8s && v.Key == string(lowPod.UID) && v.Name == w.ns+"/dra-low" {
				if v.GPUs != 4 {
					t.Fatalf("victim %+v holds %d GPUs in the decision, want the claim's 4", v, v.GPUs)
				}
				if !slices.ContainsFunc(a.Serves, func(s string) bool { return strings.Contains(s, string(highPod.UID)) }) {
					t.Fatalf("the preemption serves %v, want the high-priority pod %s", a.Serves, highPod.UID)
				}
				found = &d
			}
		}
	}
	if found == nil {
		t.Fatalf("no preempt decision names the DRA pod dra-low on %s", node)
	}
	cs := w.callsNow()
	if len(cs) != 1 || cs[0].Target != 1 || w.desired() != 1 {
		t.Fatalf("SetDesired calls %+v, desired %d: preemption must not grow a pool at max", cs, w.desired())
	}
	t.Logf("preemption: %s", found.Reason)
}
