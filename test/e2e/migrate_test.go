package e2e

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
)

// migrationWaiting sets up consolidationWorld with a Job's pod on x whose
// newest checkpoint is 30 min old, turns migration on (window 2 min), and
// returns once the migration of x is planned, x is cordoned and, several
// ticks later, the pod (first) still runs there unstopped.
func migrationWaiting(t *testing.T, ns string) (w *world, x, y string, first *corev1.Pod) {
	t.Helper()
	old := time.Now().Add(-30 * time.Minute).UTC().Format(time.RFC3339)
	w, x, y = consolidationWorld(t, ns, 3*time.Second, 0, jobWork,
		map[string]string{k8s.LastCheckpointAnnotation: old})
	first, ok := w.workPod()
	if !ok || first.Spec.NodeName != x {
		t.Fatalf("the Job's pod does not run on %s", x)
	}
	pol, err := w.st.GetPolicy(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.Migrate = broker.MigrateCheckpointed
	pol.MigrateWindow = broker.Duration(2 * time.Minute)
	if _, err := w.st.UpdatePolicy(w.ctx, pol); err != nil {
		t.Fatal(err)
	}

	// The migration is planned and cordons x; the pod, whose checkpoint
	// is older than the window, is not stopped: it waits for the next.
	var reason string
	w.eventually(60*time.Second, "a migrate decision for node "+x, func() bool {
		if ds := w.decisions(string(broker.ActMigrate), x); len(ds) > 0 {
			reason = ds[0].Reason
			return true
		}
		return false
	})
	t.Logf("migrate: %s", reason)
	w.eventually(30*time.Second, "node "+x+" to be cordoned", func() bool {
		n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, x, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	})
	// Several ticks later the pod still runs on x, unstopped: a stale
	// checkpoint never lets it move.
	time.Sleep(5 * time.Second)
	p, ok := w.workPod()
	if !ok || p.UID != first.UID || p.Spec.NodeName != x {
		t.Fatalf("the Job's pod was stopped before it checkpointed: %+v", p)
	}
	if ds := w.decisions(string(broker.ActScaleDown), x); len(ds) > 0 {
		t.Fatalf("node %s was drained by idle reclaim: %s", x, ds[0].Reason)
	}
	return w, x, y, first
}

// TestMigrationMovesPodAtItsCheckpoint: checkpoint-aligned migration on
// the real control plane (broker/migrate.go). A Job's pod holds 1 of 4
// GPUs on node x, its newest checkpoint 30 min old: a drain would lose
// more than consolidation.max_work_lost (10 min), so idle reclaim keeps
// the node. With consolidation.migrate: checkpointed the planner migrates
// it instead: the op cordons x first, then waits, the pod still running
// there, until a fresh observation shows a checkpoint at most the window
// old; the test then writes one (as the trainer would, through the
// annotation), the op evicts the pod, the Job's replacement lands on the
// fuller node y, and x is terminated: the pool goes from 2 nodes to 1.
func TestMigrationMovesPodAtItsCheckpoint(t *testing.T) {
	w, x, y, first := migrationWaiting(t, "migrate-ckpt")
	if g, _ := w.aws.Group(poolName); g.Desired != 2 {
		t.Fatalf("pool desired %d while the migration waits, want 2", g.Desired)
	}
	// The trainer checkpoints: the op stops the pod right after.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		k8s.LastCheckpointAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Patch(w.ctx, first.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the Job's pod to run again on "+y, func() bool {
		p, ok := w.workPod()
		return ok && p.Spec.NodeName == y && p.UID != first.UID
	})
	assertJobPod(t, w)
	// The moved pod's Event says it migrated, not that it was preempted.
	w.eventually(30*time.Second, "a Migrated event on pod "+first.Name, func() bool {
		evs, err := kubeEnv.Client.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		migrated := false
		for _, e := range evs.Items {
			if e.InvolvedObject.UID != first.UID {
				continue
			}
			switch e.Reason {
			case k8s.EventPreempted:
				t.Fatalf("pod %s got event %s %s: %s; a migration is no preemption", first.Name, e.Type, e.Reason, e.Message)
			case k8s.EventMigrated:
				if e.Type != corev1.EventTypeNormal {
					t.Fatalf("event %s on pod %s is of type %s, want %s", e.Reason, first.Name, e.Type, corev1.EventTypeNormal)
				}
				t.Logf("event on %s: %s %s", first.Name, e.Reason, e.Message)
				migrated = true
			}
		}
		return migrated
	})
	w.eventually(90*time.Second, "node "+x+" to be terminated", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 1 && len(g.Instances) == 1
	})
	n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, y, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		t.Fatalf("the landing node %s was cordoned", y)
	}
	// Nothing else on y was stopped: its 3-GPU pod still runs.
	pods, err := kubeEnv.Client.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, p := range pods.Items {
		if (p.Name == "hold-a" || p.Name == "hold-b") && p.Spec.NodeName == y && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			held = true
		}
	}
	if !held {
		t.Fatalf("the 3-GPU pod on %s did not keep running", y)
	}
}

// TestMigrationYieldsToLSPod: while a migration of x waits for its pod's
// next checkpoint, a pod that may never be preempted (annotated
// gpubroker.io/preemptible: "false") asks 2 GPUs: only x, cordoned with 3
// free, could hold it, and it would fill x past the underused threshold.
// The migration is cancelled rather than a node bought: x is uncordoned,
// the new pod runs on x beside the Job's pod, which was never stopped, and
// the pool stays at 2 nodes.
func TestMigrationYieldsToLSPod(t *testing.T) {
	w, x, _, first := migrationWaiting(t, "migrate-yield")
	ls := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: w.ns,
		Annotations: map[string]string{k8s.PreemptibleAnnotation: "false"}}, Spec: gpuPodSpec(2, "")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, ls, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "a cancel-scale-down decision for node "+x, func() bool {
		ds := w.decisions(string(broker.ActCancelScaleDown), x)
		if len(ds) > 0 {
			t.Logf("cancel: %s", ds[0].Reason)
		}
		return len(ds) > 0
	})
	w.eventually(60*time.Second, "pod serve to run on "+x, func() bool {
		p, ok := w.pod("serve")
		return ok && p.Spec.NodeName == x && p.Status.Phase == corev1.PodRunning
	})
	n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, x, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		t.Fatalf("node %s is still cordoned after the migration yielded", x)
	}
	if p, ok := w.workPod(); !ok || p.UID != first.UID || p.Spec.NodeName != x || p.DeletionTimestamp != nil {
		t.Fatalf("the Job's pod was stopped or moved: %+v", p)
	}
	if g, _ := w.aws.Group(poolName); g.Desired != 2 || len(g.Instances) != 2 {
		t.Fatalf("pool desired %d with %d instances, want 2 and 2: nothing bought, nothing terminated", g.Desired, len(g.Instances))
	}
}
