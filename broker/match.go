package broker

import (
	"slices"
	"strconv"
	"strings"
)

// Label keys the planner reads or manages.
const (
	// LabelYARNNodeLabel carries a node's YARN node label (partition). A YARN
	// demand's NodeLabel must equal it; demand without a label expression
	// runs only on nodes of the default partition (no such label), as with
	// YARN's exclusive partitions.
	LabelYARNNodeLabel = "gpubroker.io/yarn-node-label"
	// TaintOwner is the NoSchedule taint the broker puts on a node that
	// Kubernetes must not use. The planner ignores it when matching: who may
	// use a node is decided by Node.Owner, and a transfer removes the taint.
	TaintOwner = "gpubroker.io/owner"
)

// target is what constraints are matched against: an existing node, or the
// nodes a pool would add.
type target struct {
	labels map[string]string
	taints []Taint
	model  string
}

// Matches reports whether demand from src with these constraints may run on
// a node with the given labels, taints and GPU model. Taints are Kubernetes
// taints and only keep Kubernetes demand off a node; the YARN node label is
// only checked for YARN demand.
func (c *Constraints) Matches(src Source, labels map[string]string, taints []Taint, model string) bool {
	return c.matches(src, target{labels: labels, taints: taints, model: model})
}

func (c *Constraints) matches(src Source, t target) bool {
	if len(c.GPUModels) > 0 && !slices.Contains(c.GPUModels, t.model) {
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
			if taint.Key == TaintOwner || (taint.Effect != "NoSchedule" && taint.Effect != "NoExecute") {
				continue
			}
			if !tolerated(c.Tolerations, taint) {
				return false
			}
		}
	case SourceYARN:
		if t.labels[LabelYARNNodeLabel] != c.NodeLabel {
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

// classKey returns a canonical string for a source and its constraints:
// demand with equal keys matches exactly the same nodes and pools, so the
// planner matches each class once instead of each demand.
func classKey(src Source, c *Constraints) string {
	if len(c.GPUModels) == 0 && len(c.NodeSelector) == 0 && len(c.Affinity) == 0 &&
		len(c.Tolerations) == 0 && c.NodeLabel == "" {
		return string(src)
	}
	var b strings.Builder
	b.WriteString(string(src))
	b.WriteString("|m")
	models := slices.Clone(c.GPUModels)
	slices.Sort(models)
	for _, m := range models {
		writeQuoted(&b, m)
	}
	b.WriteString("|s")
	keys := make([]string, 0, len(c.NodeSelector))
	for k := range c.NodeSelector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeQuoted(&b, k)
		writeQuoted(&b, c.NodeSelector[k])
	}
	b.WriteString("|a")
	terms := make([]string, 0, len(c.Affinity))
	for _, t := range c.Affinity {
		reqs := make([]string, 0, len(t.Requirements))
		for _, r := range t.Requirements {
			var rb strings.Builder
			writeQuoted(&rb, r.Key)
			writeQuoted(&rb, r.Operator)
			vals := slices.Clone(r.Values)
			slices.Sort(vals)
			for _, v := range vals {
				writeQuoted(&rb, v)
			}
			reqs = append(reqs, rb.String())
		}
		slices.Sort(reqs)
		terms = append(terms, "("+strings.Join(reqs, ",")+")")
	}
	slices.Sort(terms)
	for _, t := range terms {
		b.WriteString(t)
	}
	b.WriteString("|t")
	tols := make([]string, 0, len(c.Tolerations))
	for _, t := range c.Tolerations {
		var tb strings.Builder
		writeQuoted(&tb, t.Key)
		writeQuoted(&tb, t.Operator)
		writeQuoted(&tb, t.Value)
		writeQuoted(&tb, t.Effect)
		tols = append(tols, tb.String())
	}
	slices.Sort(tols)
	for _, t := range tols {
		b.WriteString(t)
	}
	b.WriteString("|l")
	writeQuoted(&b, c.NodeLabel)
	return b.String()
}

func writeQuoted(b *strings.Builder, s string) {
	b.WriteString(strconv.Quote(s))
}
