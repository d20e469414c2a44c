package k8s

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

func TestObserverFake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := fake.NewClientset(
		gpuNode("n1", 4, "H100"),
		gpuNode("n2", 0, "H100"), // device plugin not reported yet
		gpuPod("ml", "running", 3, onNode("n1", corev1.PodRunning)),
		gpuPod("ml", "pending", 2),
		gpuPod("other", "unmapped", 1),
	)
	o, err := NewObserver(client, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Observe(ctx); !errors.Is(err, broker.ErrStale) {
		t.Fatalf("Observe before Start = %v, want ErrStale", err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The pending pod arrived with the initial list: one wake-up is queued.
	select {
	case <-o.Unschedulable():
	case <-ctx.Done():
		t.Fatal("no wake-up for the initial unschedulable pod")
	}
	idx := broker.NewTenantIndex([]broker.Tenant{{Name: "research", Namespaces: []string{"ml"}}})
	obs, err := o.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	obs = MapTenants(obs, idx)
	if len(obs.Demand) != 1 || obs.Demand[0].Name != "ml/pending" || obs.Demand[0].GPUs() != 2 || obs.Demand[0].Tenant != "research" {
		t.Fatalf("demand = %+v, want ml/pending with 2 GPUs", obs.Demand)
	}
	if len(obs.Pods) != 2 || obs.Pods[1].Reason != ReasonNoTenant {
		t.Fatalf("pods = %+v, want ml/pending and other/unmapped (no tenant)", obs.Pods)
	}
	if len(obs.Nodes) != 2 || obs.Nodes[0].GPUsAllocated != 3 || obs.Nodes[1].Phase != broker.PhaseRegistered {
		t.Fatalf("nodes = %+v", obs.Nodes)
	}

	// A new unschedulable pod wakes the tick loop; a gated one does not.
	gated := gpuPod("ml", "gated", 1, func(p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "x"}}
	})
	if _, err := client.CoreV1().Pods("ml").Create(ctx, gated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("ml").Create(ctx, gpuPod("ml", "second", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Unschedulable():
	case <-ctx.Done():
		t.Fatal("no wake-up for a new unschedulable pod")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		obs, err = o.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		obs = MapTenants(obs, idx)
		if len(obs.Demand) == 2 && len(obs.Pods) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demand %d pods %d, want 2 and 4", len(obs.Demand), len(obs.Pods))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range obs.Pods {
		if p.Name == "gated" && (p.Counted || p.Reason != ReasonGated) {
			t.Errorf("gated pod = %+v", p)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	var ve *broker.ValidationError
	if _, err := NewObserver(fake.NewClientset(), Config{ResyncPeriod: -time.Second}, nil); !errors.As(err, &ve) || ve.Field != "resync_period" {
		t.Errorf("negative resync period: err = %v, want a validation error", err)
	}
	if _, err := NewActuator(nil, Config{}, nil); !errors.As(err, &ve) {
		t.Errorf("nil client: err = %v, want a validation error", err)
	}
}
