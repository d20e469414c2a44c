package cloud

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
)

// Tags on an autoscaling group that describe its pool. gpubroker's own tags
// win over the Cluster Autoscaler's node-template tags, and configuration
// wins over both.
const (
	// TagPool names the pool; discovery finds groups by this tag's key.
	TagPool = "gpubroker.io/pool"
	// TagGPUsPerNode is the number of GPUs on each node.
	TagGPUsPerNode = "gpubroker.io/gpus-per-node"
	// TagGPUModel is the GPU product, e.g. "H100".
	TagGPUModel = "gpubroker.io/gpu-model"
	// TagSides is "yarn", "k8s" or "shared".
	TagSides = "gpubroker.io/sides"
	// TagPrice is the price of one node per hour.
	TagPrice = "gpubroker.io/price-per-hour"
	// TagPriority is the priority expander's rank.
	TagPriority = "gpubroker.io/expander-priority"

	// TagCAPrefix starts the Cluster Autoscaler's node-template tags.
	TagCAPrefix = "k8s.io/cluster-autoscaler/node-template/"
	// TagCAGPU is the Cluster Autoscaler's GPU count for scale from zero.
	TagCAGPU = TagCAPrefix + "resources/nvidia.com/gpu"
	// TagCALabel prefixes node-template labels: .../label/<key>=<value>.
	TagCALabel = TagCAPrefix + "label/"
	// TagCATaint prefixes node-template taints: .../taint/<key>=<value>:<effect>.
	TagCATaint = TagCAPrefix + "taint/"
)

// GPU model labels the Cluster Autoscaler and the NVIDIA GPU feature
// discovery use; a node-template label with one of these keys names the
// GPU model when gpubroker.io/gpu-model is absent.
var gpuModelLabels = [...]string{"nvidia.com/gpu.product", "gpu.model", "accelerator"}

// poolFromTags builds the pool of one group: tags first, then the
// configuration on top. Problems with single tags are returned as warnings
// so one bad tag does not hide the pool.
func poolFromTags(name, group string, tags map[string]string, pc *PoolConfig) (broker.Pool, []string) {
	var warn []string
	p := broker.Pool{
		Name:     name,
		Provider: "aws",
		Group:    group,
		Sides:    broker.PoolShared,
		Labels:   map[string]string{},
	}
	atoi := func(key string) (int, bool) {
		v, ok := tags[key]
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			warn = append(warn, "tag "+key+"="+strconv.Quote(v)+" is not a non-negative integer")
			return 0, false
		}
		return n, true
	}

	// Cluster Autoscaler node-template tags, in key order for determinism.
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := tags[k]
		switch {
		case strings.HasPrefix(k, TagCALabel):
			p.Labels[strings.TrimPrefix(k, TagCALabel)] = v
		case strings.HasPrefix(k, TagCATaint):
			t, ok := parseTaint(strings.TrimPrefix(k, TagCATaint), v)
			if !ok {
				warn = append(warn, "tag "+k+"="+strconv.Quote(v)+" is not <value>:<effect>")
				continue
			}
			p.Taints = append(p.Taints, t)
		}
	}
	if n, ok := atoi(TagCAGPU); ok {
		p.GPUsPerNode = n
	}
	for _, l := range gpuModelLabels {
		if m, ok := p.Labels[l]; ok && p.GPUModel == "" {
			p.GPUModel = m
		}
	}

	// gpubroker's own tags.
	if n, ok := atoi(TagGPUsPerNode); ok {
		p.GPUsPerNode = n
	}
	if m := tags[TagGPUModel]; m != "" {
		p.GPUModel = m
	}
	if s, ok := tags[TagSides]; ok {
		if broker.PoolSides(s).Valid() {
			p.Sides = broker.PoolSides(s)
		} else {
			warn = append(warn, "tag "+TagSides+"="+strconv.Quote(s)+" is not yarn, k8s or shared")
		}
	}
	if v, ok := tags[TagPrice]; ok {
		f, err := strconv.ParseFloat(v, 64)
		// NaN and Inf parse, but would poison the cost expander's sums.
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			warn = append(warn, "tag "+TagPrice+"="+strconv.Quote(v)+" is not a non-negative number")
		} else {
			p.PricePerHour = f
		}
	}
	if v, ok := tags[TagPriority]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			warn = append(warn, "tag "+TagPriority+"="+strconv.Quote(v)+" is not an integer")
		} else {
			p.ExpanderPriority = n
		}
	}

	// Configuration wins.
	if pc != nil {
		if pc.GPUModel != "" {
			p.GPUModel = pc.GPUModel
		}
		if pc.GPUsPerNode != 0 {
			p.GPUsPerNode = pc.GPUsPerNode
		}
		if pc.Sides != "" {
			p.Sides = pc.Sides
		}
		if pc.PricePerHour != 0 {
			p.PricePerHour = pc.PricePerHour
		}
		if pc.ExpanderPriority != 0 {
			p.ExpanderPriority = pc.ExpanderPriority
		}
		for k, v := range pc.Labels {
			p.Labels[k] = v
		}
		if len(pc.Taints) > 0 {
			p.Taints = mergeTaints(p.Taints, pc.Taints)
		}
	}
	if len(p.Labels) == 0 {
		p.Labels = nil
	}
	return p, warn
}

// parseTaint reads the Cluster Autoscaler's taint tag value
// "<value>:<effect>" (the value may be empty: ":NoSchedule").
func parseTaint(key, v string) (broker.Taint, bool) {
	i := strings.LastIndex(v, ":")
	if key == "" || i < 0 {
		return broker.Taint{}, false
	}
	effect := v[i+1:]
	switch effect {
	case "NoSchedule", "PreferNoSchedule", "NoExecute":
	default:
		return broker.Taint{}, false
	}
	return broker.Taint{Key: key, Value: v[:i], Effect: effect}, true
}

// mergeTaints returns base with each taint of over replacing the one with
// the same key and effect, or appended.
func mergeTaints(base, over []broker.Taint) []broker.Taint {
	out := append([]broker.Taint(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if out[i].Key == o.Key && out[i].Effect == o.Effect {
				out[i] = o
				replaced = true
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}
