package store

import (
	"reflect"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// encodeRow must see every attribute ApplyObservation writes: a field it
// ignored would let a changed row pass as unchanged. The field counts fail
// this test when the types grow, and each mutation must change the encoding.
func TestEncodeRowKnowsEveryField(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeOf(broker.Constraints{}):      7,
		reflect.TypeOf(broker.AffinityTerm{}):     1,
		reflect.TypeOf(broker.LabelRequirement{}): 3,
		reflect.TypeOf(broker.Toleration{}):       4,
	} {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields, encodeRow knows %d: encode the new one", typ, typ.NumField(), n)
		}
	}
	base := func() broker.Demand {
		return broker.Demand{Name: "n", Tenant: "t", Queue: "q", Priority: 1, GPUsPerUnit: 1, Units: 1,
			Constraints: broker.Constraints{
				GPUModels:    []string{"a100"},
				NodeSelector: map[string]string{"k": "v", "k2": "v2"},
				Affinity:     []broker.AffinityTerm{{Requirements: []broker.LabelRequirement{{Key: "z", Operator: "In", Values: []string{"1"}}}}},
				Tolerations:  []broker.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}},
				NodeLabel:    "gpu",
			}}
	}
	mutations := map[string]func(*broker.Demand){
		"name":        func(d *broker.Demand) { d.Name = "n2" },
		"tenant":      func(d *broker.Demand) { d.Tenant = "t2" },
		"queue":       func(d *broker.Demand) { d.Queue = "q2" },
		"priority":    func(d *broker.Demand) { d.Priority = 2 },
		"gpus":        func(d *broker.Demand) { d.GPUsPerUnit = 2 },
		"units":       func(d *broker.Demand) { d.Units = 2 },
		"gang":        func(d *broker.Demand) { d.Gang = true },
		"preemptible": func(d *broker.Demand) { d.Preemptible = true },
		"gpu models":  func(d *broker.Demand) { d.Constraints.GPUModels = []string{"h100"} },
		"selector":    func(d *broker.Demand) { d.Constraints.NodeSelector = map[string]string{"k": "v", "k2": "v3"} },
		"affinity":    func(d *broker.Demand) { d.Constraints.Affinity[0].Requirements[0].Values = []string{"2"} },
		"operator":    func(d *broker.Demand) { d.Constraints.Affinity[0].Requirements[0].Operator = "NotIn" },
		"toleration":  func(d *broker.Demand) { d.Constraints.Tolerations[0].Value = "x" },
		"effect":      func(d *broker.Demand) { d.Constraints.Tolerations[0].Effect = "NoExecute" },
		"node label":  func(d *broker.Demand) { d.Constraints.NodeLabel = "cpu" },
		"mig profile": func(d *broker.Demand) { d.Constraints.MIGProfile = "1g.10gb" },
		"gpu memory":  func(d *broker.Demand) { d.Constraints.MinGPUMemoryMiB = 40960 },
		// Moving a byte between adjacent strings must not collide.
		"boundary": func(d *broker.Demand) { d.Name, d.Tenant = "nt", "" },
	}
	b := base()
	want := encodeRow(&b)
	for i := 0; i < 3; i++ { // map order must not matter
		if again := encodeRow(&b); again != want {
			t.Fatalf("encoding is not stable: %q vs %q", want, again)
		}
	}
	for name, mutate := range mutations {
		d := base()
		mutate(&d)
		if encodeRow(&d) == want {
			t.Errorf("changing %s does not change the encoding", name)
		}
	}
}
