package broker

import "testing"

func TestLabelRequirement(t *testing.T) {
	labels := map[string]string{"zone": "a", "gpus": "8", "word": "x"}
	cases := []struct {
		r    LabelRequirement
		want bool
	}{
		{LabelRequirement{Key: "zone", Operator: "In", Values: []string{"a", "b"}}, true},
		{LabelRequirement{Key: "zone", Operator: "In", Values: []string{"b"}}, false},
		{LabelRequirement{Key: "missing", Operator: "In", Values: []string{""}}, false},
		{LabelRequirement{Key: "zone", Operator: "NotIn", Values: []string{"b"}}, true},
		{LabelRequirement{Key: "zone", Operator: "NotIn", Values: []string{"a"}}, false},
		{LabelRequirement{Key: "missing", Operator: "NotIn", Values: []string{"a"}}, true},
		{LabelRequirement{Key: "zone", Operator: "Exists"}, true},
		{LabelRequirement{Key: "missing", Operator: "Exists"}, false},
		{LabelRequirement{Key: "missing", Operator: "DoesNotExist"}, true},
		{LabelRequirement{Key: "zone", Operator: "DoesNotExist"}, false},
		{LabelRequirement{Key: "gpus", Operator: "Gt", Values: []string{"4"}}, true},
		{LabelRequirement{Key: "gpus", Operator: "Gt", Values: []string{"8"}}, false},
		{LabelRequirement{Key: "gpus", Operator: "Lt", Values: []string{"9"}}, true},
		{LabelRequirement{Key: "gpus", Operator: "Lt", Values: []string{"8"}}, false},
		{LabelRequirement{Key: "word", Operator: "Gt", Values: []string{"1"}}, false},
		{LabelRequirement{Key: "gpus", Operator: "Gt", Values: []string{"1", "2"}}, false},
		{LabelRequirement{Key: "missing", Operator: "Lt", Values: []string{"1"}}, false},
		{LabelRequirement{Key: "zone", Operator: "Like", Values: []string{"a"}}, false},
	}
	for _, tc := range cases {
		if got := tc.r.Matches(labels); got != tc.want {
			t.Errorf("%+v on %v = %v, want %v", tc.r, labels, got, tc.want)
		}
	}
}

func TestConstraintsMatch(t *testing.T) {
	labels := map[string]string{"infra-type": "gpu", "zone": "a"}
	noSched := []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}
	soft := []Taint{{Key: "spot", Value: "true", Effect: "PreferNoSchedule"}}
	owner := []Taint{{Key: TaintOwner, Value: "yarn", Effect: "NoSchedule"}}
	cordoned := []Taint{{Key: TaintUnschedulable, Effect: "NoSchedule"}}
	noExec := []Taint{{Key: "maintenance", Effect: "NoExecute"}}
	tolGPU := []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}
	inZone := func(vals ...string) []AffinityTerm {
		return []AffinityTerm{{Requirements: []LabelRequirement{{Key: "zone", Operator: "In", Values: vals}}}}
	}
	cases := []struct {
		name   string
		c      Constraints
		src    Source
		labels map[string]string
		taints []Taint
		model  string
		part   string
		want   bool
	}{
		{"no constraints, no taints", Constraints{}, SourceK8s, labels, nil, "A100", "", true},
		{"model listed", Constraints{GPUModels: []string{"H100", "A100"}}, SourceK8s, labels, nil, "A100", "", true},
		{"model not listed", Constraints{GPUModels: []string{"H100"}}, SourceK8s, labels, nil, "A100", "", false},
		{"selector matches", Constraints{NodeSelector: map[string]string{"infra-type": "gpu"}}, SourceK8s, labels, nil, "", "", true},
		{"selector value differs", Constraints{NodeSelector: map[string]string{"infra-type": "cpu"}}, SourceK8s, labels, nil, "", "", false},
		{"selector key missing", Constraints{NodeSelector: map[string]string{"rack": "1"}}, SourceK8s, labels, nil, "", "", false},
		{"affinity term holds", Constraints{Affinity: inZone("a")}, SourceK8s, labels, nil, "", "", true},
		{"affinity terms are ORed", Constraints{Affinity: append(inZone("b"), inZone("a")...)}, SourceK8s, labels, nil, "", "", true},
		{"no affinity term holds", Constraints{Affinity: inZone("b")}, SourceK8s, labels, nil, "", "", false},
		{"empty affinity term matches nothing", Constraints{Affinity: []AffinityTerm{{}}}, SourceK8s, labels, nil, "", "", false},
		{"untolerated NoSchedule taint", Constraints{}, SourceK8s, labels, noSched, "", "", false},
		{"tolerated NoSchedule taint", Constraints{Tolerations: tolGPU}, SourceK8s, labels, noSched, "", "", true},
		{"untolerated NoExecute taint", Constraints{Tolerations: tolGPU}, SourceK8s, labels, noExec, "", "", false},
		{"PreferNoSchedule does not keep demand off", Constraints{}, SourceK8s, labels, soft, "", "", true},
		{"the broker's owner taint is ignored", Constraints{}, SourceK8s, labels, owner, "", "", true},
		{"a cordon's taint is ignored", Constraints{}, SourceK8s, labels, cordoned, "", "", true},
		{"YARN ignores Kubernetes taints", Constraints{}, SourceYARN, labels, noSched, "", "", true},
		{"YARN default demand on a labelled node", Constraints{}, SourceYARN, labels, nil, "", "fast", false},
		{"YARN matching partition", Constraints{NodeLabel: "fast"}, SourceYARN, labels, nil, "", "fast", true},
		{"YARN other partition", Constraints{NodeLabel: "fast"}, SourceYARN, labels, nil, "", "slow", false},
		{"YARN default demand on a default node", Constraints{}, SourceYARN, labels, nil, "", "", true},
		{"a Kubernetes label named like a partition is no partition", Constraints{NodeLabel: "fast"}, SourceYARN,
			map[string]string{"yarn.io/node-label": "fast", "gpubroker.io/yarn-node-label": "fast"}, nil, "", "", false},
		{"a label is no GPU model", Constraints{NodeLabel: "a100"}, SourceYARN, labels, nil, "H100", "a100", true},
		{"YARN label on an unlabelled node", Constraints{NodeLabel: "fast"}, SourceYARN, labels, nil, "", "", false},
		{"Kubernetes ignores YARN labels", Constraints{NodeLabel: "fast"}, SourceK8s, labels, nil, "", "", true},
		{"Kubernetes ignores partitions", Constraints{}, SourceK8s, labels, nil, "", "fast", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.MatchesIn(tc.src, tc.labels, tc.taints, tc.model, tc.part); got != tc.want {
				t.Errorf("MatchesIn = %v, want %v", got, tc.want)
			}
			if tc.part == "" {
				if got := tc.c.Matches(tc.src, tc.labels, tc.taints, tc.model); got != tc.want {
					t.Errorf("Matches = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestClassKeyIsCanonical(t *testing.T) {
	a := Constraints{
		GPUModels:    []string{"A100", "H100"},
		NodeSelector: map[string]string{"a": "1", "b": "2"},
		Tolerations:  []Toleration{{Key: "x", Operator: "Exists"}, {Key: "y", Value: "v"}},
		Affinity: []AffinityTerm{
			{Requirements: []LabelRequirement{{Key: "z", Operator: "In", Values: []string{"p", "q"}}}},
			{Requirements: []LabelRequirement{{Key: "w", Operator: "Exists"}}},
		},
	}
	b := Constraints{
		GPUModels:    []string{"H100", "A100"},
		NodeSelector: map[string]string{"b": "2", "a": "1"},
		Tolerations:  []Toleration{{Key: "y", Value: "v"}, {Key: "x", Operator: "Exists"}},
		Affinity: []AffinityTerm{
			{Requirements: []LabelRequirement{{Key: "w", Operator: "Exists"}}},
			{Requirements: []LabelRequirement{{Key: "z", Operator: "In", Values: []string{"q", "p"}}}},
		},
	}
	if classKey(SourceK8s, &a) != classKey(SourceK8s, &b) {
		t.Errorf("equal constraints in another order have different keys:\n%s\n%s", classKey(SourceK8s, &a), classKey(SourceK8s, &b))
	}
	if classKey(SourceK8s, &a) == classKey(SourceYARN, &a) {
		t.Error("the source must be part of the key")
	}
	c := b
	c.NodeSelector = map[string]string{"a": "1", "b": "3"}
	if classKey(SourceK8s, &a) == classKey(SourceK8s, &c) {
		t.Error("different selectors share a key")
	}
	// Separators inside values must not make different constraints collide.
	d1 := Constraints{NodeSelector: map[string]string{"a": `1"|s"b`}}
	d2 := Constraints{NodeSelector: map[string]string{"a": "1", "b": ""}}
	if classKey(SourceK8s, &d1) == classKey(SourceK8s, &d2) {
		t.Error("quoted values collide")
	}
}
