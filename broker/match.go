package broker

import (
	"slices"
	"strconv"
)

// Keys the planner reads or manages.
const (
	// TaintOwner is the NoSchedule taint the broker puts on a node that
	// Kubernetes must not use. The planner ignores it when matching: who may
	// use a node is decided by Node.Owner, and a transfer removes the taint.
	TaintOwner = "gpubroker.io/owner"
	// TaintUnschedulable is the taint Kubernetes puts on a cordoned node.
	// The planner ignores it when matching as it does TaintOwner: a node
	// released from Kubernetes is cordoned, and handing it back (or over
	// from YARN) uncordons it.
	TaintUnschedulable = "node.kubernetes.io/unschedulable"
)

// target is what constraints are matched against: an existing node, or the
// nodes a pool would add.
type target struct {
	labels map[string]string
	taints []Taint
	model  string
	// partition is the YARN partition (node label) the node is in or
	// would join; empty for the default partition.
	partition string
	// mig is the MIG profile the node offers slices of; empty for whole
	// GPUs. memMiB is each GPU's memory, 0 when unknown.
	mig    string
	memMiB int
}

// poolTarget is what a node a pool adds would offer: its NodeManager joins
// the pool's partition.
func poolTarget(p *Pool) target {
	return target{labels: p.Labels, taints: p.Taints, model: p.GPUModel, partition: p.Partition,
		mig: p.MIGProfile, memMiB: p.GPUMemoryMiB}
}

// nodeTargetOf is what node n offers to constraints, model being its GPU
// model as the planner resolved it; a GPU memory the node does not report
// is its pool's.
func nodeTargetOf(n *Node, model string, pool *Pool) target {
	t := target{labels: n.Labels, taints: n.Taints, model: model, partition: nodePartition(n, pool),
		mig: n.MIGProfile, memMiB: n.GPUMemoryMiB}
	if t.memMiB == 0 && pool != nil {
		t.memMiB = pool.GPUMemoryMiB
	}
	return t
}

// nodePartition is the YARN partition a node is in or would join: what the
// RM reports while YARN owns it (the RM is the truth), otherwise its pool's
// partition, which its NodeManager joins when the node is handed to YARN.
// A node in no pool keeps what it last reported.
func nodePartition(n *Node, pool *Pool) string {
	if n.Owner == OwnerYARN || pool == nil {
		return n.Partition
	}
	return pool.Partition
}

// Matches reports whether demand from src with these constraints may run on
// a node of the default YARN partition with the given labels, taints and GPU
// model. Taints are Kubernetes taints and only keep Kubernetes demand off a
// node; the partition is only checked for YARN demand.
func (c *Constraints) Matches(src Source, labels map[string]string, taints []Taint, model string) bool {
	return c.MatchesIn(src, labels, taints, model, "")
}

// MatchesIn is Matches for a node in YARN partition partition (empty for
// the default partition).
func (c *Constraints) MatchesIn(src Source, labels map[string]string, taints []Taint, model, partition string) bool {
	return c.matches(src, target{labels: labels, taints: taints, model: model, partition: partition})
}

func (c *Constraints) matches(src Source, t target) bool {
	if len(c.GPUModels) > 0 && !slices.Contains(c.GPUModels, t.model) {
		return false
	}
	// Whole GPUs and MIG slices are different capacity: a node offers one
	// kind, in the units its demand counts.
	if c.MIGProfile != t.mig {
		return false
	}
	if c.MinGPUMemoryMiB > 0 && t.memMiB < c.MinGPUMemoryMiB {
		return false
	}
	for k, v := range c.NodeSelector {
		if got, ok := t.labels[k]; !ok || got != v {
			return false
		}
	}
	if len(c.Affinity) > 0 {
		any := false
		for i := range c.Affinity {
			if termMatches(&c.Affinity[i], t.labels) {
				any = true
				break
			}
		}
		if !any {
			return false
		}
	}
	switch src {
	case SourceK8s:
		for _, taint := range t.taints {
			if taint.Key == TaintOwner || taint.Key == TaintUnschedulable || (taint.Effect != "NoSchedule" && taint.Effect != "NoExecute") {
				continue
			}
			if !tolerated(c.Tolerations, taint) {
				return false
			}
		}
	case SourceYARN:
		// Exclusive partitions, as YARN's node labels are by default:
		// labelled demand runs only in its partition, demand without a
		// label expression only in the default one.
		if t.partition != c.NodeLabel {
			return false
		}
	}
	return true
}

func tolerated(tols []Toleration, t Taint) bool {
	for _, tol := range tols {
		if tol.Tolerates(t) {
			return true
		}
	}
	return false
}

// termMatches reports whether every requirement of the term holds. A term
// without requirements matches nothing, as in Kubernetes.
func termMatches(term *AffinityTerm, labels map[string]string) bool {
	if len(term.Requirements) == 0 {
		return false
	}
	for _, r := range term.Requirements {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Matches reports whether the requirement holds for a node with labels.
// Unknown operators match nothing; Gt and Lt compare integers and fail when
// either side is not one.
func (r LabelRequirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case "In":
		return ok && slices.Contains(r.Values, v)
	case "NotIn":
		return !ok || !slices.Contains(r.Values, v)
	case "Exists":
		return ok
	case "DoesNotExist":
		return !ok
	case "Gt", "Lt":
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == "Gt" {
			return have > want
		}
		return have < want
	}
	return false
}

// appendClassKey appends a canonical encoding of a source and its
// constraints to buf: demand with equal keys matches exactly the same nodes
// and pools, so the planner matches each class once instead of each demand.
// Strings are length-prefixed, so no value can imitate a separator.
func appendClassKey(buf []byte, src Source, c *Constraints) []byte {
	buf = appendField(buf, string(src))
	if len(c.GPUModels) == 0 && len(c.NodeSelector) == 0 && len(c.Affinity) == 0 &&
		len(c.Tolerations) == 0 && c.NodeLabel == "" && c.MIGProfile == "" && c.MinGPUMemoryMiB == 0 {
		return buf
	}
	buf = append(buf, 'm')
	buf = appendSorted(buf, c.GPUModels)
	buf = append(buf, 's')
	if len(c.NodeSelector) == 1 {
		for k, v := range c.NodeSelector {
			buf = appendField(appendField(buf, k), v)
		}
	} else {
		keys := make([]string, 0, len(c.NodeSelector))
		for k := range c.NodeSelector {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			buf = appendField(appendField(buf, k), c.NodeSelector[k])
		}
	}
	buf = append(buf, 'a')
	if len(c.Affinity) == 1 && len(c.Affinity[0].Requirements) == 1 {
		r := &c.Affinity[0].Requirements[0]
		buf = append(buf, '1', '[', '1', '[')
		buf = appendSorted(appendField(appendField(buf, r.Key), r.Operator), r.Values)
	} else if len(c.Affinity) > 0 {
		terms := make([]string, 0, len(c.Affinity))
		for _, t := range c.Affinity {
			reqs := make([]string, 0, len(t.Requirements))
			for _, r := range t.Requirements {
				rb := appendField(appendField(nil, r.Key), r.Operator)
				reqs = append(reqs, string(appendSorted(rb, r.Values)))
			}
			terms = append(terms, string(appendSorted(nil, reqs)))
		}
		buf = appendSorted(buf, terms)
	}
	buf = append(buf, 't')
	if len(c.Tolerations) == 1 {
		t := &c.Tolerations[0]
		buf = append(buf, '1', '[')
		buf = appendField(appendField(appendField(appendField(buf, t.Key), t.Operator), t.Value), t.Effect)
	} else if len(c.Tolerations) > 0 {
		tols := make([]string, 0, len(c.Tolerations))
		for _, t := range c.Tolerations {
			tols = append(tols, string(appendField(appendField(appendField(appendField(nil, t.Key), t.Operator), t.Value), t.Effect)))
		}
		buf = appendSorted(buf, tols)
	}
	buf = append(buf, 'l')
	buf = appendField(buf, c.NodeLabel)
	if c.MIGProfile != "" || c.MinGPUMemoryMiB != 0 {
		buf = append(buf, 'g')
		buf = appendField(appendField(buf, c.MIGProfile), strconv.Itoa(c.MinGPUMemoryMiB))
	}
	return buf
}

// classKey is appendClassKey as a string.
func classKey(src Source, c *Constraints) string { return string(appendClassKey(nil, src, c)) }

func appendField(buf []byte, s string) []byte {
	buf = strconv.AppendInt(buf, int64(len(s)), 10)
	buf = append(buf, ':')
	return append(buf, s...)
}

// appendSorted appends the strings in sorted order, with their count.
func appendSorted(buf []byte, ss []string) []byte {
	buf = strconv.AppendInt(buf, int64(len(ss)), 10)
	buf = append(buf, '[')
	if !slices.IsSorted(ss) {
		ss = slices.Sorted(slices.Values(ss))
	}
	for _, s := range ss {
		buf = appendField(buf, s)
	}
	return buf
}
