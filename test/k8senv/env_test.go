package k8senv

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
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

	checkKeepRunning(ctx, t, e)

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

// checkKeepRunning: a Job's pod annotated KeepRunningAnnotation stays
// Running, while a Job without it, started after that pod ran, completes.
func checkKeepRunning(ctx context.Context, t *testing.T, e *Env) {
	t.Helper()
	job := func(name string, annotations map[string]string) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": name}, Annotations: annotations},
				Spec: corev1.PodSpec{NodeName: "n1", RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		if _, err := e.Client.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	keepPod := func() corev1.Pod {
		pods, err := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job=keep"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			return corev1.Pod{}
		}
		return pods.Items[0]
	}
	job("keep", map[string]string{KeepRunningAnnotation: "true"})
	wait("the keep-running Job's pod to run", func() bool {
		switch p := keepPod(); p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			t.Fatalf("keep-running pod %q is %s, want Running", p.Name, p.Status.Phase)
		case corev1.PodRunning:
			return true
		}
		return false
	})
	job("done", nil)
	wait("the plain Job to complete", func() bool {
		j, err := e.Client.BatchV1().Jobs("default").Get(ctx, "done", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return j.Status.Succeeded == 1
	})
	if p := keepPod(); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("keep-running pod %q is %s, want Running", p.Name, p.Status.Phase)
	}
	j, err := e.Client.BatchV1().Jobs("default").Get(ctx, "keep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Succeeded != 0 {
		t.Fatalf("keep-running Job succeeded: %+v", j.Status)
	}
}
