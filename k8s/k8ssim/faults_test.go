package k8ssim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/k8s/k8ssim"
)

// TestFaultyClient: while the API server is unavailable to a faulty
// client, its requests fail and its watches end, and the cluster's own
// client still works; afterwards it reads and evicts on the same objects,
// and the eviction is listed with its node.
func TestFaultyClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: "p", GPUs: 1, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	f := c.NewFaultyClient()
	w, err := f.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-w.ResultChan() // the node, as ADDED
	f.SetUnavailable(true)
	if _, ok := <-w.ResultChan(); ok {
		t.Error("a watch outlived the outage")
	}
	if _, err := f.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !errors.Is(err, k8ssim.ErrUnavailable) {
		t.Errorf("list during the outage: %v, want ErrUnavailable", err)
	}
	if _, err := f.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{}); !errors.Is(err, k8ssim.ErrUnavailable) {
		t.Errorf("watch during the outage: %v, want ErrUnavailable", err)
	}
	if nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 1 {
		t.Errorf("the cluster's own client during the outage: %v", err)
	}
	if f.Refused() != 2 {
		t.Errorf("refused %d requests, want 2", f.Refused())
	}
	f.SetUnavailable(false)
	pods, err := f.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("list after the outage: %v", err)
	}
	if err := f.Client().PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	ev := c.EvictedPods(0)
	if len(ev) != 1 || ev[0].Name != "p" || ev[0].Node != "gpu-1" || ev[0].GPUs != 1 || ev[0].UID != pods.Items[0].UID {
		t.Errorf("evicted pods %+v, want p on gpu-1 with 1 GPU", ev)
	}
	if got := c.EvictedPods(1); len(got) != 0 {
		t.Errorf("evicted pods from 1: %+v", got)
	}
}

// TestStepAndEvictionsThroughAFaultyClientDoNotDeadlock: the cluster's
// Step clears every faulty client's recorded actions while evictions run
// through one of them; the fake clientset holds its lock while the
// eviction reactor takes the cluster's, so Step must not hold the
// cluster's lock while it clears (the chaos soak hung on exactly that).
func TestStepAndEvictionsThroughAFaultyClientDoNotDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "gpu-1", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	f := c.NewFaultyClient()
	const n = 200
	for i := range n {
		if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: fmt.Sprintf("p%d", i), GPUs: 0, Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			select {
			case <-done:
				return
			default:
			}
			c.Step(ctx)
		}
	}()
	evicted := make(chan error, 1)
	go func() {
		for i := range n {
			err := f.Client().PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p%d", i)}})
			if err != nil {
				evicted <- err
				return
			}
		}
		evicted <- nil
	}()
	select {
	case err := <-evicted:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("evictions through a faulty client did not finish while Step ran: deadlock")
	}
	cancel()
	<-done
}
