package k8ssim_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
)

// waitFor polls cond until it holds or 5 s pass (informers deliver
// asynchronously).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSimulatorDrivesTheAdapter runs the real k8s adapter's informers on
// the simulated cluster through the reference scenario: the pod is
// unschedulable and counted as demand, a 4-GPU node joins, the pod runs
// and leaves the demand, it finishes after its run time.
func TestSimulatorDrivesTheAdapter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	c := k8ssim.New(k8ssim.Config{Now: clock})
	if err := c.EnsurePriorityClass(ctx, "high-priority-training", 1000000); err != nil {
		t.Fatal(err)
	}
	obs, err := k8s.NewObserver(c.Client(), k8s.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	gpuSel := map[string]string{"infra-type": "gpu"}
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: "elastic-gpu-training", GPUs: 2,
		PriorityClassName: "high-priority-training", Priority: 1000000, NodeSelector: gpuSel, Tolerations: tol,
		Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to count as demand", func() bool {
		o, err := obs.Observe(ctx)
		return err == nil && len(o.Demand) == 1 && o.Demand[0].GPUsPerUnit == 2 && o.Demand[0].Priority == 1000000
	})

	// A CPU node does not help; a tainted 4-GPU node does.
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "cpu-1", GPUs: 0}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "gpu-1", GPUs: 4, Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to run on gpu-1", func() bool {
		o, err := obs.Observe(ctx)
		if err != nil || len(o.Demand) != 0 {
			return false
		}
		for _, n := range o.Nodes {
			if n.Name == "gpu-1" && n.GPUsAllocated == 2 && n.GPUsTotal == 4 {
				return true
			}
		}
		return false
	})

	// Evicting it (a drain) leaves a replacement that waits again.
	if err := c.Client().PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "elastic-gpu-training"}}); err != nil {
		t.Fatal(err)
	}
	if c.Evictions() != 1 {
		t.Fatalf("evictions: %d", c.Evictions())
	}
	pods, _ := c.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "elastic-gpu-training-r" || pods.Items[0].Spec.NodeName != "" {
		t.Fatalf("after eviction: %+v", pods.Items)
	}
	// The replacement runs, then finishes after its run time.
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	pods, _ = c.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Fatalf("finished pods must go: %d left", len(pods.Items))
	}
}
