package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/test/k8senv"
)

const backgroundNS = "background"

// background fills the control plane with nodes KWOK runs (CPU only, not
// GPU nodes of any pool) and pods bound to them round-robin (spec.nodeName
// set, as after scheduling; KWOK reports them Running), and waits until
// every pod runs. Cleanup removes both.
func background(t *testing.T, nodes, pods int) {
	t.Helper()
	ctx := context.Background()
	c := kubeEnv.Client
	t0 := time.Now()
	t.Cleanup(func() {
		zero := int64(0)
		c.CoreV1().Pods(backgroundNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		c.CoreV1().Namespaces().Delete(ctx, backgroundNS, metav1.DeleteOptions{})
		c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "gpubroker-e2e=background"})
	})
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: backgroundNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parallel(t, nodes, func(i int) error {
		_, err := kubeEnv.AddNode(ctx, k8senv.NodeSpec{Name: fmt.Sprintf("bg-%04d", i), Labels: map[string]string{"gpubroker-e2e": "background"}})
		return err
	})
	t.Logf("background: %d nodes in %s", nodes, time.Since(t0).Round(time.Millisecond))
	cpu := resource.MustParse("100m")
	parallel(t, pods, func(i int) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bg-%05d", i), Namespace: backgroundNS},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("bg-%04d", i%nodes), Containers: []corev1.Container{{Name: "work", Image: "work:latest",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu}}}}}}
		_, err := c.CoreV1().Pods(backgroundNS).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	t.Logf("background: %d pods created in %s", pods, time.Since(t0).Round(time.Millisecond))
	deadline := time.Now().Add(10 * time.Minute)
	for {
		list, err := c.CoreV1().Pods(backgroundNS).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running", ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == pods {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background: %d of %d pods running after 10m", len(list.Items), pods)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("background: %d nodes and %d running pods in %s", nodes, pods, time.Since(t0).Round(time.Millisecond))
	// IMPORTANT: KWOK runs pods bound by name on a node that is still
	// tainted not-ready, so running pods do not mean a settled control
	// plane: wait until the controller manager has lifted the taint of
	// every background node, or the bursts' GPU nodes queue behind that
	// backlog and the measurement times the setup, not the broker.
	for {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "gpubroker-e2e=background", ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		settled := 0
		for i := range list.Items {
			if nodeSchedulable(&list.Items[i]) {
				settled++
			}
		}
		if settled == nodes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background: %d of %d nodes Ready without the not-ready taint after 10m", settled, nodes)
		}
		time.Sleep(time.Second)
	}
	t.Logf("background: every node Ready and schedulable in %s", time.Since(t0).Round(time.Millisecond))
}

// nodeSchedulable reports whether n is Ready and carries none of the
// node lifecycle controller's not-ready or unreachable taints.
func nodeSchedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// parallel runs f(0..n-1) on 16 goroutines and fails t on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
