package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// safetyOptions shape the world for the safety scenarios.
type safetyOptions struct {
	// startupTaints are added to the adapter's default startup taints, as
	// kubernetes.startup_taints does.
	startupTaints []string
	// bootTaints are put on every node that boots, besides the GPU taint.
	bootTaints []corev1.Taint
	// unhealthyTimeout is the policy's unhealthy_node_timeout.
	unhealthyTimeout time.Duration
	// pools are more configured pools, for other labels than the pods'.
	pools []extraPool
}

// extraPool is a configured pool whose autoscaling group exists (with
// desired nodes) or not.
type extraPool struct {
	name    string
	create  bool
	desired int
	// mig makes it a Kubernetes pool of A100s partitioned into seven
	// 1g.10gb MIG devices each, whose nodes carry the GPU pods' labels.
	mig bool
}

// The MIG layout of an extra pool with mig set.
const (
	e2eMIGProfile = "1g.10gb"
	e2eMIGPerGPU  = 7
)

// extraPools creates the extra pools' groups, stores the pools and returns
// them for the cloud provider. Their nodes carry infra-type=other, so no
// pod of the tests fits them.
func (w *world) extraPools(o safetyOptions) []cloud.PoolConfig {
	var out []cloud.PoolConfig
	for _, p := range o.pools {
		if p.create {
			if err := w.aws.CreateGroup(awssim.GroupSpec{Name: p.name, Min: 0, Max: 3, Desired: p.desired, InstanceType: "g5.12xlarge"}); err != nil {
				w.t.Fatal(err)
			}
		}
		minN, maxN := 0, 3
		pool := broker.Pool{Name: p.name, Provider: "aws", Group: p.name, GPUModel: "A10G",
			GPUsPerNode: 4, MaxNodes: maxN, Sides: broker.PoolShared, Labels: map[string]string{"infra-type": "other"}}
		if p.mig {
			pool.GPUModel, pool.MIGProfile, pool.MIGPerGPU, pool.Sides, pool.Labels = "A100", e2eMIGProfile, e2eMIGPerGPU, broker.PoolK8s, gpuLabels
			pool.Taints = []broker.Taint{{Key: gpuTaint.Key, Value: gpuTaint.Value, Effect: string(gpuTaint.Effect)}}
		}
		if _, err := w.st.UpsertPool(w.ctx, pool); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, cloud.PoolConfig{Name: p.name, GPUsPerNode: 4, GPUModel: pool.GPUModel, MinNodes: &minN, MaxNodes: &maxN,
			Labels: pool.Labels, Taints: pool.Taints})
	}
	return out
}

func (w *world) createPod(name string, gpus int64) {
	w.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: gpuPodSpec(gpus, "")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) running(name string) (string, bool) {
	p, ok := w.pod(name)
	if !ok || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
		return "", false
	}
	return p.Spec.NodeName, true
}

// waitTicks waits until the runtime has finished n more ticks.
func (w *world) waitTicks(n int64, what string) {
	w.t.Helper()
	from := w.rt.Status().Tick
	w.eventually(time.Duration(n)*10*time.Second, what, func() bool { return w.rt.Status().Tick >= from+n })
}

func (w *world) maxTarget() int {
	w.calls.mu.Lock()
	defer w.calls.mu.Unlock()
	m := 0
	for _, c := range w.calls.calls {
		if c.Pool == poolName {
			m = max(m, c.Target)
		}
	}
	return m
}

// TestStartupTaintFromConfigBuysOnce: nodes of the pool boot with a taint
// the built-in list does not know (a site's GPU agent that lifts it once
// the node is set up), listed in kubernetes.startup_taints. While the new
// node carries it, the pod it was bought for cannot land, yet no second
// node is bought: the node is capacity in flight, not a ready node that
// does not fit. Once the agent lifts the taint, the pod runs there.
func TestStartupTaintFromConfigBuysOnce(t *testing.T) {
	const taint = "example.com/gpu-agent-not-ready"
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Minute, namespace: "startup-taint", bootDelay: time.Second,
		extra: safetyOptions{startupTaints: []string{taint},
			bootTaints: []corev1.Taint{{Key: taint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}})
	w.createPod("train", 2)
	w.eventually(30*time.Second, "one node bought", func() bool { return w.desired() == 1 })
	var node string
	w.eventually(60*time.Second, "the node to join with the startup taint, Ready", func() bool {
		nodes, err := kubeEnv.Client.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "infra-type=gpu"})
		if err != nil || len(nodes.Items) != 1 {
			return false
		}
		n := nodes.Items[0]
		node = n.Name
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	// Several ticks see the Ready node with the taint and the pod pending.
	w.waitTicks(4, "ticks with the tainted node")
	if _, ok := w.running("train"); ok {
		t.Fatal("the pod runs despite the startup taint; the scenario is void")
	}
	if d, m := w.desired(), w.maxTarget(); d != 1 || m != 1 {
		t.Fatalf("desired %d (highest target %d) while the new node carries %s: a second node was bought", d, m, taint)
	}
	// The agent finishes and lifts the taint.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint })
		_, err = kubeEnv.Client.CoreV1().Nodes().Update(w.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the pod to run on the node bought for it", func() bool {
		n, ok := w.running("train")
		return ok && n == node
	})
	if d, m := w.desired(), w.maxTarget(); d != 1 || m != 1 {
		t.Fatalf("desired %d (highest target %d), want exactly one node bought", d, m)
	}
}

// TestMissingAndFailingGroupsLeaveOtherPoolsActing: one configured pool's
// autoscaling group does not exist and another's describe keeps failing;
// both are reported stale, and the pool the pod needs still scales up for
// it: one bad group does not stop the tick.
func TestMissingAndFailingGroupsLeaveOtherPoolsActing(t *testing.T) {
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Minute, namespace: "stale-groups", bootDelay: time.Second,
		extra: safetyOptions{pools: []extraPool{{name: "gpu-missing"}, {name: "gpu-flaky", create: true, desired: 1}}}})
	w.eventually(30*time.Second, "the flaky group's instance", func() bool {
		g, ok := w.aws.Group("gpu-flaky")
		return ok && len(g.Instances) == 1
	})
	w.waitTicks(2, "ticks that observe every group")
	w.aws.FailDescribe("gpu-flaky", -1)
	w.waitTicks(2, "ticks with the flaky group failing")
	w.createPod("train", 2)
	defer func() {
		if t.Failed() {
			ds, _ := w.st.ListDecisions(w.ctx, storeDecisions(""))
			for _, d := range ds {
				t.Logf("decision %s %s %s: %s", d.Kind, d.Pool, d.Demand, d.Reason)
			}
		}
	}()
	w.eventually(30*time.Second, "the healthy pool to grow by one", func() bool { return w.desired() == 1 })
	w.eventually(60*time.Second, "the pod to run", func() bool { _, ok := w.running("train"); return ok })
	states, err := w.app.Pools().Pools(w.ctx)
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	got := map[string]broker.PoolState{}
	for _, s := range states {
		got[s.Pool.Name] = s
	}
	if s := got["gpu-missing"]; !strings.Contains(s.Stale, "not found") {
		t.Errorf("gpu-missing: stale %q, want the missing group", s.Stale)
	}
	if s := got["gpu-flaky"]; !strings.Contains(s.Stale, "describe group") || s.Desired != 1 || len(s.Instances) != 1 {
		t.Errorf("gpu-flaky: %+v; want stale with its last-known instance", s)
	}
	if s := got[poolName]; s.Stale != "" {
		t.Errorf("%s stale %q", poolName, s.Stale)
	}
	if g, _ := w.aws.Group("gpu-flaky"); g.Desired != 1 || len(g.Instances) != 1 {
		t.Errorf("the stale pool was acted on: desired %d, %d instances", g.Desired, len(g.Instances))
	}
}

// TestKubeletStopsNodeIsReplacedNotCountedInFlight: a node whose kubelet
// stops keeps 2 free GPUs on paper, but it is down, not capacity on its
// way: a pod that needs 2 GPUs gets a new node instead of waiting for the
// dead one, and after unhealthy_node_timeout the dead node is replaced.
//
// It needs both halves of the rule: the adapter reports the node Down
// (k8s) and the planner neither counts a down node nor leaves it in place.
func TestKubeletStopsNodeIsReplacedNotCountedInFlight(t *testing.T) {
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Minute, namespace: "kubelet-stops", bootDelay: time.Second,
		extra: safetyOptions{unhealthyTimeout: 90 * time.Second}})
	w.createPod("first", 2)
	var dead string
	w.eventually(60*time.Second, "the first pod to run", func() bool {
		n, ok := w.running("first")
		dead = n
		return ok
	})
	deadID := strings.TrimPrefix(mustProviderID(t, w, dead), "aws:///us-east-1a/")
	if err := kubeEnv.StopKubelet(w.ctx, dead); err != nil {
		t.Fatal(err)
	}
	w.eventually(3*time.Minute, "the node lifecycle controller to mark the node Ready=Unknown", func() bool {
		n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, dead, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionUnknown
			}
		}
		return false
	})
	w.createPod("second", 2)
	w.eventually(60*time.Second, "a new node for the second pod", func() bool { return w.desired() == 2 })
	w.eventually(90*time.Second, "the second pod to run on the new node", func() bool {
		n, ok := w.running("second")
		return ok && n != dead
	})
	w.eventually(4*time.Minute, "the dead node to be replaced", func() bool {
		g, _ := w.aws.Group(poolName)
		return !slices.Contains(g.Instances, deadID)
	})
	ds, err := w.st.ListDecisions(w.ctx, storeDecisions(string(broker.ActReplace)))
	if err != nil || len(ds) == 0 {
		t.Fatalf("no replace decision recorded: %v", err)
	}
	t.Logf("replace reason: %s", ds[0].Reason)
}

func mustProviderID(t *testing.T, w *world, node string) string {
	t.Helper()
	n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.ProviderID
}
