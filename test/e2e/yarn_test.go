package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestYARNHandOverAndReclaim runs a node's whole YARN life through the
// real decommission path: a YARN app buys a node, which boots on the
// Kubernetes side with its host excluded from YARN; the broker hands it to
// YARN (exclude file, refreshNodes over the admin RPC, the restart hook
// brings the stopped NodeManager back) and the app runs there; idle again,
// it is decommissioned and terminated only once the RM lists it
// DECOMMISSIONED, and its host leaves the exclude file.
func TestYARNHandOverAndReclaim(t *testing.T) {
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 5 * time.Second, namespace: "yarn-life", bootDelay: time.Second})
	app, err := w.ysim.Submit(yarnsim.AppSpec{Name: "spark-train", Queue: "root.training",
		Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the YARN app to run on a handed-over node", func() bool {
		obs, err := w.yclient.Observe(w.ctx)
		if err != nil {
			return false
		}
		a, ok := obs.App(app)
		return ok && a.RunningContainers == 1
	})
	nodes, err := kubeEnv.Client.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "infra-type=gpu"})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("GPU nodes: %d, %v", len(nodes.Items), err)
	}
	host := nodes.Items[0].Name
	if !nodes.Items[0].Spec.Unschedulable {
		t.Errorf("node %s schedulable by Kubernetes while YARN runs on it", host)
	}
	if s := w.ysim.NodeState(host); s != "RUNNING" {
		t.Fatalf("NodeManager of %s is %s, want RUNNING (restarted by the hook)", host, s)
	}
	if ok, _ := w.yexclude.Contains(host); ok {
		t.Fatalf("%s still excluded from YARN after the hand-over", host)
	}

	// Idle past the unneeded time: decommissioned, then terminated.
	if err := w.ysim.Finish(app); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the idle YARN node to be reclaimed", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 0 && len(g.Instances) == 0
	})
	w.termMu.Lock()
	terms := append([]terminated(nil), w.terminations...)
	w.termMu.Unlock()
	if len(terms) != 1 || terms[0].Host != host || terms[0].YARNState != "DECOMMISSIONED" {
		t.Fatalf("terminations %+v, want %s terminated once, while the RM listed it DECOMMISSIONED", terms, host)
	}
	w.eventually(30*time.Second, "the terminated host to leave the exclude file", func() bool {
		ok, err := w.yexclude.Contains(host)
		return err == nil && !ok
	})
}
