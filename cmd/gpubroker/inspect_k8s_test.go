package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/test/k8senv"
)

// TestInspectK8s runs "gpubroker inspect k8s" against a real control plane
// with one unschedulable GPU pod and one GPU node.
func TestInspectK8s(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute) // includes a cold build
	defer cancel()
	env, err := k8senv.Start(ctx, k8senv.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := env.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: "gpu-a", GPUs: 4, Model: "H100", Labels: map[string]string{"infra-type": "gpu-inference"}}); err != nil {
		t.Fatal(err)
	}
	prio := int32(0)
	two := resource.MustParse("2")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
		Spec: corev1.PodSpec{
			Priority:     &prio,
			NodeSelector: map[string]string{"infra-type": "gpu"},
			Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": two},
			}}},
		},
	}
	if _, err := c.CoreV1().Pods("ml").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := c.CoreV1().Pods("ml").Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Status.Conditions) > 0 && p.Status.Conditions[0].Reason == corev1.PodReasonUnschedulable {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("pod never marked unschedulable")
		case <-time.After(50 * time.Millisecond):
		}
	}

	code, out, errOut := runCLI(t, nil, "inspect", "k8s", "--kubeconfig", env.Kubeconfig, "--tenant", "ml=research", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Pods []struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Priority  int64  `json:"priority"`
			GPUs      int    `json:"gpus"`
			Counted   bool   `json:"counted"`
			Reason    string `json:"reason"`
			Tenant    string `json:"tenant"`
		} `json:"pods"`
		Nodes []struct {
			Name            string `json:"name"`
			GPUsAllocatable int    `json:"gpus_allocatable"`
			GPUsAllocated   int    `json:"gpus_allocated"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(got.Pods) != 1 || got.Pods[0].Namespace != "ml" || got.Pods[0].Name != "train" || got.Pods[0].GPUs != 2 ||
		!got.Pods[0].Counted || got.Pods[0].Reason != "unschedulable" || got.Pods[0].Tenant != "research" || got.Pods[0].Priority != 0 {
		t.Errorf("pods = %+v", got.Pods)
	}
	if len(got.Nodes) != 1 || got.Nodes[0].Name != "gpu-a" || got.Nodes[0].GPUsAllocatable != 4 || got.Nodes[0].GPUsAllocated != 0 {
		t.Errorf("nodes = %+v", got.Nodes)
	}

	code, out, errOut = runCLI(t, nil, "inspect", "k8s", "--kubeconfig", env.Kubeconfig)
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	t.Logf("inspect k8s:\n%s", out)
	for _, want := range []string{"PENDING GPU PODS: 1, 0 counted", "train", "unmapped", "infra-type=gpu", "gpu-a", "H100"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectK8sUsage(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "k8s", "--kubeconfig", "/nonexistent/kubeconfig"},
		{"inspect", "k8s", "--tenant", "no-equals-sign", "--kubeconfig", "/nonexistent"},
		{"inspect", "k8s", "extra"},
		{"inspect", "k8s", "--no-such-flag"},
	} {
		if code, _, errOut := runCLI(t, nil, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
