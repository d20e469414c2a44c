package k8senv

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStartAddNodeStop starts a control plane, adds a KWOK node that
// becomes Ready, advertises its GPUs, and checks that Stop leaves no
// process behind.
func TestStartAddNodeStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute) // includes a cold build
	defer cancel()
	e, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]int, 0, len(e.procs))
	for _, p := range e.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	dir := e.Dir
	stopped := false
	defer func() {
		if !stopped {
			_ = e.Stop()
		}
	}()
	if len(pids) != 5 {
		t.Fatalf("started %d processes, want etcd, apiserver, scheduler, controller-manager and kwok", len(pids))
	}

	if _, err := e.AddNode(ctx, NodeSpec{Name: "n1", GPUs: 8, Model: "H100", WithholdGPUs: true}); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if ready {
			if q, ok := n.Status.Allocatable[GPUResource]; ok && !q.IsZero() {
				t.Fatalf("withheld GPUs are advertised: %v", q)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("KWOK never made the node Ready")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := e.AdvertiseGPUs(ctx, "n1", 8); err != nil {
		t.Fatal(err)
	}
	n, err := e.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Allocatable[GPUResource]; q.Value() != 8 || n.Labels["nvidia.com/gpu.product"] != "H100" || n.Annotations[KWOKAnnotation] != "fake" {
		t.Errorf("node = allocatable %v labels %v annotations %v", n.Status.Allocatable, n.Labels, n.Annotations)
	}

	stopped = true
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster directory %s not removed: %v", dir, err)
	}
}
