package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// runsOn waits for YARN app id to run its one container and returns the
// container's host.
func (w *world) runsOn(id, what string) string {
	w.t.Helper()
	var host string
	w.eventually(90*time.Second, what, func() bool {
		obs, err := w.yclient.Observe(w.ctx)
		if err != nil {
			return false
		}
		a, ok := obs.App(id)
		if !ok || a.RunningContainers != 1 || len(a.Containers) != 1 {
			return false
		}
		host = a.Containers[0].Host
		return true
	})
	return host
}

// opKinds lists the kinds of every op the broker journaled in the test's
// database.
func (w *world) opKinds() []broker.ActionKind {
	w.t.Helper()
	ops, err := w.st.ListOps(w.ctx, store.OpFilter{Limit: 500})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []broker.ActionKind
	for _, op := range ops {
		out = append(out, op.Kind)
	}
	return out
}

// TestFleetHandOverWithoutCloud: two owned hosts and no cloud at all (no
// endpoint, no cloud pool), the fleet's members named by a Kubernetes node
// label. YARN demand takes the host Kubernetes leaves idle; a
// higher-priority pod that then waits gets it back by preemption across
// the sides. Nothing is bought, scaled down or terminated, and the
// idle-reclaim timer (5 s here) never shrinks the fleet.
func TestFleetHandOverWithoutCloud(t *testing.T) {
	ensurePriorityClass(t, "high-priority-training", 1000000)
	hosts := []string{"fleet-a", "fleet-b"}
	w := newWorld(t, worldOptions{namespace: "fleet", unneeded: 5 * time.Second, preemption: true, fleet: hosts, noCloud: true, fleetBySelector: true})

	// Kubernetes work on one host, at the pod's own high priority: the
	// scheduler cannot preempt it for the later pod.
	base := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "base", Namespace: w.ns}, Spec: gpuPodSpec(4, "high-priority-training")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, base, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var busy string
	w.eventually(60*time.Second, "the base pod to run on a host of the fleet", func() bool {
		p, ok := w.pod("base")
		busy = p.Spec.NodeName
		return ok && busy != "" && p.Status.Phase == corev1.PodRunning
	})
	idle := hosts[0]
	if idle == busy {
		idle = hosts[1]
	}

	// YARN demand: the idle Kubernetes host is handed over.
	app, err := w.ysim.Submit(yarnsim.AppSpec{Name: "etl-train", Queue: "root.training",
		Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if h := w.runsOn(app, "the YARN app to run on the fleet's idle host"); h != idle {
		t.Fatalf("YARN app runs on %s, want the idle host %s", h, idle)
	}
	if n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, idle, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("host %s schedulable by Kubernetes while YARN runs on it (%v)", idle, err)
	}

	// A higher-priority pod waits: the host comes back to Kubernetes.
	urgent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "urgent", Namespace: w.ns}, Spec: gpuPodSpec(4, "high-priority-training")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, urgent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the urgent pod to run on the host given back by YARN", func() bool {
		p, ok := w.pod("urgent")
		return ok && p.Spec.NodeName == idle && p.Status.Phase == corev1.PodRunning
	})
	if ds := w.decisions(string(broker.ActPreempt), idle); len(ds) == 0 {
		t.Fatal("no preemption decision recorded for the host given back")
	}

	// Idle-reclaim time passes: the fleet keeps both hosts; nothing was
	// ever bought, scaled down, replaced or terminated.
	time.Sleep(8 * time.Second)
	for _, k := range w.opKinds() {
		if k == broker.ActScaleUp || k == broker.ActScaleDown || k == broker.ActReplace {
			t.Errorf("op %s journaled on a fleet with no cloud", k)
		}
	}
	states, err := w.app.Pools().Pools(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].Pool.Name != fleetPoolName || states[0].Desired != 2 || states[0].Stale != "" {
		t.Fatalf("pools %+v, want the fleet with its 2 hosts", states)
	}
	for _, h := range hosts {
		if _, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, h, metav1.GetOptions{}); err != nil {
			t.Errorf("host %s gone from Kubernetes: %v", h, err)
		}
		if w.ysim.NodeState(h) == "" {
			t.Errorf("host %s gone from YARN", h)
		}
	}
}

// TestFleetBurstsToCloudOnlyWhenFull: a one-host fleet beside a cloud
// pool. The first YARN application takes the fleet's idle host and
// nothing is bought; the second finds the fleet full, and only then does
// the cloud pool grow.
func TestFleetBurstsToCloudOnlyWhenFull(t *testing.T) {
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 10 * time.Minute, namespace: "fleet-burst", bootDelay: time.Second,
		fleet: []string{"fleet-c"}})
	// The first demand arrives once the broker has seen both sides: while
	// a side is stale (its informers not synced yet at start), no node of
	// it can be handed over, and demand on the other side may burst.
	w.eventually(30*time.Second, "a tick with both sides fresh", func() bool {
		st := w.rt.Status()
		return st.Tick > 0 && len(st.Stale) == 0
	})
	first, err := w.ysim.Submit(yarnsim.AppSpec{Name: "first", Queue: "root.training", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if h := w.runsOn(first, "the first app to run on the fleet's host"); h != "fleet-c" {
		t.Fatalf("first app runs on %s, want fleet-c", h)
	}
	if d := w.desired(); d != 0 || slices.Contains(w.opKinds(), broker.ActScaleUp) {
		t.Fatalf("desired %d, ops %v: a node was bought while the fleet had an idle host", d, w.opKinds())
	}
	second, err := w.ysim.Submit(yarnsim.AppSpec{Name: "second", Queue: "root.training", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if h := w.runsOn(second, "the second app to run on a node bought for it"); h == "fleet-c" {
		t.Fatalf("second app runs on the fleet's host %s", h)
	}
	if d := w.desired(); d != 1 {
		t.Fatalf("desired %d, want the one node the full fleet needed", d)
	}
}
