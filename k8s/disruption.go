package k8s

import (
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
)

// What an eviction costs beyond the pod's own work: the data it keeps on
// the node, and whether its controller survives it. The planner reads the
// result (broker.Workload's LocalStorage, Fatal and Budgets) so that it
// never chooses for consolidation a node whose drain would throw data away,
// fail a Job for good or only wait on a PodDisruptionBudget.

// SafeToEvictLocalVolumesAnnotation lists (comma-separated) the pod's
// local volumes whose data may be thrown away, as the cluster autoscaler
// reads it; SafeToEvictAnnotation "true" declares them all safe.
const SafeToEvictLocalVolumesAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"

// localStorage names the pod's node-local volumes whose data an eviction
// throws away, as the cluster autoscaler decides it (a hostPath, an
// emptyDir not backed by memory), unless the pod declares them safe to
// evict; "" when none.
func localStorage(pod *corev1.Pod) string {
	if strings.EqualFold(pod.Annotations[SafeToEvictAnnotation], "true") {
		return ""
	}
	var safe []string
	if v := pod.Annotations[SafeToEvictLocalVolumesAnnotation]; v != "" {
		for _, s := range strings.Split(v, ",") {
			safe = append(safe, strings.TrimSpace(s))
		}
	}
	var local []string
	for _, v := range pod.Spec.Volumes {
		if slices.Contains(safe, v.Name) {
			continue
		}
		switch {
		case v.HostPath != nil:
			local = append(local, "hostPath "+v.Name)
		case v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory:
			local = append(local, "emptyDir "+v.Name)
		}
	}
	if len(local) == 0 {
		return ""
	}
	return strings.Join(local, ", ") + "; annotate " + SafeToEvictAnnotation + `: "true" if it may be lost`
}

// keepVolumes trims a pod's volumes, in the informer's transform, to what
// localStorage and fatal read: local and claim-backed volumes, without
// their templates.
func keepVolumes(vs []corev1.Volume) []corev1.Volume {
	out := vs[:0]
	for _, v := range vs {
		switch {
		case v.HostPath != nil, v.EmptyDir != nil, v.PersistentVolumeClaim != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				HostPath: v.HostPath, EmptyDir: v.EmptyDir, PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Ephemeral != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}
	}
	clear(vs[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}

// objects are the look-ups fatal needs, from the observer's caches; a nil
// function leaves that check out (unit tests of other rules).
type objects struct {
	job    func(namespace, name string) (*batchv1.Job, bool)
	claim  func(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	volume func(name string) (*corev1.PersistentVolume, bool)
	// resourceClaim looks up DRA claims, and sliceDevices counts the GPU
	// devices the ResourceSlices publish on a node and their least memory
	// in MiB; nil while DRA is off.
	resourceClaim func(namespace, name string) (*resourcev1.ResourceClaim, bool)
	sliceDevices  func(node string) (GPURequest, int)
}

// fatal fills in w.Fatal (and FatalSince) when evicting running pod fails
// its controller for good:
//   - a Job's pod whose Job has as many failures as its backoffLimit
//     (the eviction is one more) and no podFailurePolicy rule that ignores
//     the DisruptionTarget condition an eviction sets, or whose Job is not
//     in the cache (unknown is never safe);
//   - a pod on a PersistentVolume local to its node (spec.local or
//     hostPath): its replacement could run nowhere else, and the node is
//     what the drain removes; or whose claim or volume is not in the cache.
//
// A bare pod needs no check here: its class already says nothing recreates it.
func (c *classifier) fatal(pod *corev1.Pod, w *broker.Workload) {
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Job" && c.objs.job != nil {
		j, ok := c.objs.job(pod.Namespace, ref.Name)
		switch {
		case !ok:
			w.Fatal = fmt.Sprintf("its Job %s/%s is not observed, so whether an eviction fails it is unknown", pod.Namespace, ref.Name)
		default:
			if why := jobAtLimit(j); why != "" {
				w.Fatal = why
				if j.Status.StartTime != nil {
					w.FatalSince = j.Status.StartTime.Time
				}
			}
		}
		if w.Fatal != "" {
			return
		}
	}
	if c.objs.claim == nil || c.objs.volume == nil {
		return
	}
	for _, v := range pod.Spec.Volumes {
		var claim string
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name // the generic ephemeral volume's claim
		default:
			continue
		}
		pvc, ok := c.objs.claim(pod.Namespace, claim)
		if !ok || pvc.Spec.VolumeName == "" {
			w.Fatal = fmt.Sprintf("its PersistentVolumeClaim %s/%s is not observed bound, so whether its volume is local is unknown", pod.Namespace, claim)
			return
		}
		pv, ok := c.objs.volume(pvc.Spec.VolumeName)
		if !ok {
			w.Fatal = fmt.Sprintf("its PersistentVolume %s is not observed, so whether it is local is unknown", pvc.Spec.VolumeName)
			return
		}
		if pv.Spec.Local != nil || pv.Spec.HostPath != nil {
			w.Fatal = fmt.Sprintf("its PersistentVolume %s (claim %s/%s) is local to node %s: a replacement could run nowhere else",
				pv.Name, pod.Namespace, claim, pod.Spec.NodeName)
			return
		}
	}
}

// jobAtLimit says why one more failed pod fails Job j for good, or "".
// An eviction marks the pod failed with the DisruptionTarget condition,
// which counts against backoffLimit unless a podFailurePolicy rule ignores
// it; a Job with a per-index limit counts it against its index.
func jobAtLimit(j *batchv1.Job) string {
	if ignoresDisruption(j.Spec.PodFailurePolicy) {
		return ""
	}
	name := j.Namespace + "/" + j.Name
	if l := j.Spec.BackoffLimitPerIndex; l != nil && *l == 0 {
		return fmt.Sprintf("Job %s has backoffLimitPerIndex 0 and no podFailurePolicy rule that ignores DisruptionTarget: an eviction fails its index for good", name)
	}
	limit := int32(6) // the API's default
	if j.Spec.BackoffLimit != nil {
		limit = *j.Spec.BackoffLimit
	}
	if j.Status.Failed < limit {
		return ""
	}
	return fmt.Sprintf("Job %s has failed %d times of its backoffLimit %d and no podFailurePolicy rule ignores DisruptionTarget: an eviction fails it for good",
		name, j.Status.Failed, limit)
}

// ignoresDisruption reports whether a podFailurePolicy has a rule whose
// action is Ignore for pods with the DisruptionTarget condition (the Job
// controller applies the first rule that matches; a condition rule matches
// any failed pod with that condition true).
func ignoresDisruption(p *batchv1.PodFailurePolicy) bool {
	if p == nil {
		return false
	}
	for _, r := range p.Rules {
		for _, pc := range r.OnPodConditions {
			if pc.Type == corev1.DisruptionTarget && (pc.Status == "" || pc.Status == corev1.ConditionTrue) {
				return r.Action == batchv1.PodFailurePolicyActionIgnore
			}
		}
		if r.OnExitCodes != nil {
			// An exit-code rule can match an evicted pod's exit code first;
			// without knowing it, the eviction is not known to be ignored.
			return false
		}
	}
	return false
}

// budgetsOf lists, per pod ("namespace/name"), the budgets that select it
// with the disruptions each allows now.
func budgetsOf(pdbs []PDBReport) map[string][]broker.Budget {
	var m map[string][]broker.Budget
	for _, b := range pdbs {
		for _, p := range b.Pods {
			if m == nil {
				m = map[string][]broker.Budget{}
			}
			m[p] = append(m[p], broker.Budget{Name: b.Namespace + "/" + b.Name, Allowed: int(b.DisruptionsAllowed)})
		}
	}
	return m
}

// attachBudgets gives every workload on the nodes the budgets that select it.
func attachBudgets(nodes []broker.Node, pdbs []PDBReport) {
	m := budgetsOf(pdbs)
	if m == nil {
		return
	}
	for i := range nodes {
		for j := range nodes[i].Work {
			if bs, ok := m[nodes[i].Work[j].Name]; ok {
				nodes[i].Work[j].Budgets = bs
			}
		}
	}
}
