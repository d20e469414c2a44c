package k8ssim

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// filterFields keeps the list items that match a field selector, as the
// API server does and the fake clientset does not: it ignores field
// selectors, so a drain's "pods with spec.nodeName=N" got every pod of the
// cluster, and evicted them all, their replacements too, every poll. The
// fields are those the API server supports for pods and nodes, plus
// metadata.name and metadata.namespace for every kind; any other is
// refused with 400, as "field label not supported".
func filterFields(list runtime.Object, selector string) error {
	if selector == "" {
		return nil
	}
	sel, err := fields.ParseSelector(selector)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid field selector %q: %s", selector, err))
	}
	if sel.Empty() {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	kept := items[:0]
	for _, it := range items {
		set, err := fieldSet(it)
		if err != nil {
			return err
		}
		for _, req := range sel.Requirements() {
			if _, ok := set[req.Field]; !ok {
				return apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
			}
		}
		if sel.Matches(set) {
			kept = append(kept, it)
		}
	}
	return meta.SetList(list, kept)
}

// fieldSet is the object's selectable fields.
func fieldSet(obj runtime.Object) (fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	set := fields.Set{"metadata.name": m.GetName()}
	if m.GetNamespace() != "" {
		set["metadata.namespace"] = m.GetNamespace()
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["metadata.namespace"] = o.Namespace
		set["spec.nodeName"] = o.Spec.NodeName
		set["spec.restartPolicy"] = string(o.Spec.RestartPolicy)
		set["spec.schedulerName"] = o.Spec.SchedulerName
		set["spec.serviceAccountName"] = o.Spec.ServiceAccountName
		set["spec.hostNetwork"] = strconv.FormatBool(o.Spec.HostNetwork)
		set["status.phase"] = string(o.Status.Phase)
		set["status.podIP"] = o.Status.PodIP
		set["status.nominatedNodeName"] = o.Status.NominatedNodeName
	case *corev1.Node:
		set["spec.unschedulable"] = strconv.FormatBool(o.Spec.Unschedulable)
	}
	return set, nil
}
