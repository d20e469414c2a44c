package cloud

import (
	"math"
	"strings"
	"testing"
)

// FuzzPoolFromTags reads a group's tags ("key=value" lines, as DescribeAutoScalingGroups
// returns them) into a pool. Properties: no panic; the pool's name, group
// and provider are kept; GPUs per node and the price are finite and not
// negative and the sides valid; every taint has a key and a known effect;
// each warning names a tag given; and a tag that was refused (warned
// about) does not change the pool.
func FuzzPoolFromTags(f *testing.F) {
	for _, s := range []string{
		TagCAGPU + "=4\n" + TagCALabel + "infra-type=gpu\n" + TagCALabel + "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n" +
			TagCATaint + "nvidia.com/gpu=present:NoSchedule\n" + TagCATaint + "dedicated=:NoExecute",
		TagPool + "=gpu\n" + TagGPUsPerNode + "=8\n" + TagGPUModel + "=H100\n" + TagSides + "=yarn\n" + TagPrice + "=32.77\n" + TagPriority + "=10",
		TagGPUsPerNode + "=-1\n" + TagSides + "=both\n" + TagPrice + "=free\n" + TagPriority + "=high",
		TagPrice + "=NaN",
		TagPrice + "=+Inf",
		TagCATaint + "=x:NoSchedule\n" + TagCATaint + "k=NoSchedule",
		"aws:autoscaling:groupName=gpu-training-group\nk8s.io/cluster-autoscaler/enabled=true",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tags := map[string]string{}
		for _, line := range strings.Split(s, "\n") {
			k, v, _ := strings.Cut(line, "=")
			tags[k] = v
		}
		p, warn := poolFromTags("p", "g", tags, nil)
		if p.Name != "p" || p.Group != "g" || p.Provider != "aws" {
			t.Fatalf("pool identity changed: %+v", p)
		}
		if p.GPUsPerNode < 0 {
			t.Errorf("GPUs per node %d", p.GPUsPerNode)
		}
		if p.PricePerHour < 0 || math.IsNaN(p.PricePerHour) || math.IsInf(p.PricePerHour, 0) {
			t.Errorf("price per hour %v from %q", p.PricePerHour, tags[TagPrice])
		}
		if !p.Sides.Valid() {
			t.Errorf("sides %q", p.Sides)
		}
		for _, tn := range p.Taints {
			if tn.Key == "" || (tn.Effect != "NoSchedule" && tn.Effect != "PreferNoSchedule" && tn.Effect != "NoExecute") {
				t.Errorf("taint %+v", tn)
			}
		}
		for _, w := range warn {
			named := false
			for k := range tags {
				named = named || strings.HasPrefix(w, "tag "+k+"=")
			}
			if !named {
				t.Errorf("warning %q names no tag given", w)
			}
		}
		// A refused tag leaves the pool as if it were absent.
		for _, k := range []string{TagSides, TagPrice, TagPriority} {
			refused := false
			for _, w := range warn {
				refused = refused || strings.HasPrefix(w, "tag "+k+"=")
			}
			if !refused {
				continue
			}
			without := make(map[string]string, len(tags))
			for kk, v := range tags {
				if kk != k {
					without[kk] = v
				}
			}
			q, _ := poolFromTags("p", "g", without, nil)
			if p.Sides != q.Sides || p.PricePerHour != q.PricePerHour || p.ExpanderPriority != q.ExpanderPriority {
				t.Errorf("refused tag %s=%q changed the pool: %+v, without it %+v", k, tags[k], p, q)
			}
		}
	})
}
