package k8s

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
)

func volume(v corev1.Volume) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, v) }
}

func emptyDir(name string, medium corev1.StorageMedium) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// TestLocalStorage: an emptyDir on disk or a hostPath keeps data on the
// node (not movable), as the cluster autoscaler reads it, unless the pod
// declares it safe to evict; a memory-backed emptyDir does not.
func TestLocalStorage(t *testing.T) {
	cases := []struct {
		name string
		opts []func(*corev1.Pod)
		want string // a phrase; "" for none
	}{
		{"no volumes", nil, ""},
		{"an emptyDir on disk", []func(*corev1.Pod){volume(emptyDir("scratch", ""))}, "emptyDir scratch"},
		{"a hostPath", []func(*corev1.Pod){volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}})}, "hostPath data"},
		{"a memory-backed emptyDir", []func(*corev1.Pod){volume(emptyDir("shm", corev1.StorageMediumMemory))}, ""},
		{"safe-to-evict true", []func(*corev1.Pod){volume(emptyDir("scratch", "")), annotated(SafeToEvictAnnotation, "true")}, ""},
		{"safe-to-evict-local-volumes naming it", []func(*corev1.Pod){volume(emptyDir("scratch", "")), volume(emptyDir("cache", "")),
			annotated(SafeToEvictLocalVolumesAnnotation, "cache, scratch")}, ""},
		{"naming another", []func(*corev1.Pod){volume(emptyDir("scratch", "")), annotated(SafeToEvictLocalVolumesAnnotation, "cache")}, "emptyDir scratch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := gpuPod("ml", "p", 1, append([]func(*corev1.Pod){ownedBy("ReplicaSet", "web")}, tc.opts...)...)
			// What the informer keeps is what decides.
			obj, _ := stripManagedFields(pod)
			got := localStorage(obj.(*corev1.Pod))
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("localStorage = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFatalEviction: a Job's pod is Fatal when one more failure reaches
// its backoffLimit and no podFailurePolicy ignores DisruptionTarget; a
// pod on a local PersistentVolume is Fatal; unknown is Fatal too.
func TestFatalEviction(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	start := metav1.NewTime(now.Add(-2 * time.Hour))
	i32 := func(v int32) *int32 { return &v }
	job := func(limit *int32, failed int32, pfp *batchv1.PodFailurePolicy) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train"},
			Spec:   batchv1.JobSpec{BackoffLimit: limit, PodFailurePolicy: pfp},
			Status: batchv1.JobStatus{Failed: failed, StartTime: &start}}
	}
	ignore := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}}}
	exitFirst := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{137}}},
		ignore.Rules[0]}}
	localPV := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-local"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disk"}}}}
	ebsPV := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-ebs"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-1"}}}}
	claims := map[string]*corev1.PersistentVolumeClaim{
		"ml/data-db-0": {Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-local"}},
		"ml/data-web":  {Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-ebs"}},
		"ml/pending":   {},
	}
	cases := []struct {
		name  string
		job   *batchv1.Job // nil: not in the cache
		opts  []func(*corev1.Pod)
		want  string // a phrase of Fatal; "" for none
		since bool   // FatalSince is the Job's start
	}{
		{"a Job with backoffLimit 0", job(i32(0), 0, nil), []func(*corev1.Pod){ownedBy("Job", "train")}, "failed 0 times of its backoffLimit 0", true},
		{"a Job that has used its retries", job(i32(2), 2, nil), []func(*corev1.Pod){ownedBy("Job", "train")}, "failed 2 times of its backoffLimit 2", true},
		{"a Job with retries left", job(i32(2), 1, nil), []func(*corev1.Pod){ownedBy("Job", "train")}, "", false},
		{"the default backoffLimit is 6", job(nil, 5, nil), []func(*corev1.Pod){ownedBy("Job", "train")}, "", false},
		{"a podFailurePolicy that ignores DisruptionTarget", job(i32(0), 0, ignore), []func(*corev1.Pod){ownedBy("Job", "train")}, "", false},
		{"unless an exit-code rule comes first", job(i32(0), 0, exitFirst), []func(*corev1.Pod){ownedBy("Job", "train")}, "backoffLimit 0", true},
		{"a Job not in the cache", nil, []func(*corev1.Pod){ownedBy("Job", "train")}, "is not observed", false},
		{"a StatefulSet pod on a local volume", nil, []func(*corev1.Pod){ownedBy("StatefulSet", "db"), volume(claimVolume("data", "data-db-0"))}, "PersistentVolume pv-local (claim ml/data-db-0) is local to node n1", false},
		{"on a network volume", nil, []func(*corev1.Pod){ownedBy("StatefulSet", "db"), volume(claimVolume("data", "data-web"))}, "", false},
		{"on an unbound claim", nil, []func(*corev1.Pod){ownedBy("StatefulSet", "db"), volume(claimVolume("data", "pending"))}, "not observed bound", false},
		{"a Deployment's pod", nil, []func(*corev1.Pod){ownedBy("ReplicaSet", "web")}, "", false},
	}
	cfg := Config{}.Defaults()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &classifier{cfg: &cfg, now: func() time.Time { return now }, objs: objects{
				job: func(ns, name string) (*batchv1.Job, bool) { return tc.job, tc.job != nil && ns+"/"+name == "ml/train" },
				claim: func(ns, name string) (*corev1.PersistentVolumeClaim, bool) {
					pvc, ok := claims[ns+"/"+name]
					return pvc, ok
				},
				volume: func(name string) (*corev1.PersistentVolume, bool) {
					for _, pv := range []*corev1.PersistentVolume{localPV, ebsPV} {
						if pv.Name == name {
							return pv, true
						}
					}
					return nil, false
				},
			}}
			opts := append([]func(*corev1.Pod){onNode("n1", corev1.PodRunning)}, tc.opts...)
			n, _ := c.buildNode(gpuNode("n1", 4, "A100"), []*corev1.Pod{gpuPod("ml", "p", 1, opts...)})
			w := n.Work[0]
			if tc.want == "" && w.Fatal != "" || !strings.Contains(w.Fatal, tc.want) {
				t.Fatalf("Fatal = %q, want %q", w.Fatal, tc.want)
			}
			if got := w.FatalSince.Equal(start.Time); got != tc.since {
				t.Fatalf("FatalSince = %s, want the Job's start: %v", w.FatalSince, tc.since)
			}
		})
	}
}

// TestBudgetsReachThePlanner: each workload carries the budgets that
// select it, with what they allow now.
func TestBudgetsReachThePlanner(t *testing.T) {
	nodes := []broker.Node{{Name: "n1", Work: []broker.Workload{{Name: "ml/web-1"}, {Name: "ml/train"}}}}
	attachBudgets(nodes, []PDBReport{{Namespace: "ml", Name: "web", DisruptionsAllowed: 0, Pods: []string{"ml/web-0", "ml/web-1"}}})
	if got := nodes[0].Work[0].Budgets; len(got) != 1 || got[0] != (broker.Budget{Name: "ml/web", Allowed: 0}) {
		t.Fatalf("budgets of ml/web-1 = %+v, want ml/web allowing 0", got)
	}
	if got := nodes[0].Work[1].Budgets; got != nil {
		t.Fatalf("budgets of ml/train = %+v, want none", got)
	}
}
