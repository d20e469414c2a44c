package store

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// constraintsJSON must write exactly what encoding/json writes, for every
// field: the field counts fail this test when the types grow, and the
// cases cover each field set and unset, nil and empty slices, map order and
// the strings that must take the encoding/json path.
func TestConstraintsJSONMatchesMarshal(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeOf(broker.Constraints{}):      7,
		reflect.TypeOf(broker.AffinityTerm{}):     1,
		reflect.TypeOf(broker.LabelRequirement{}): 3,
		reflect.TypeOf(broker.Toleration{}):       4,
	} {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields, constraintsJSON knows %d: encode the new one", typ, typ.NumField(), n)
		}
	}
	full := broker.Constraints{
		GPUModels:    []string{"a100", "h100"},
		NodeSelector: map[string]string{"k": "v", "a": "b", "infra-type": "gpu", "zz": ""},
		Affinity: []broker.AffinityTerm{
			{Requirements: []broker.LabelRequirement{{Key: "z", Operator: "In", Values: []string{"1", "2"}}, {Key: "y", Operator: "Exists"}}},
			{Requirements: []broker.LabelRequirement{}},
			{},
		},
		Tolerations: []broker.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}, {Value: "v"}, {}},
		NodeLabel:   "gpu",
		MIGProfile:  "1g.10gb", MinGPUMemoryMiB: 40960,
	}
	cases := map[string]broker.Constraints{
		"empty":          {},
		"empty slices":   {GPUModels: []string{}, NodeSelector: map[string]string{}, Affinity: []broker.AffinityTerm{}, Tolerations: []broker.Toleration{}},
		"full":           full,
		"models":         {GPUModels: []string{""}},
		"selector":       {NodeSelector: map[string]string{"infra-type": "gpu"}},
		"node label":     {NodeLabel: "x"},
		"tolerations":    {Tolerations: full.Tolerations},
		"affinity":       {Affinity: full.Affinity},
		"quote":          {NodeSelector: map[string]string{`a"b`: `c\d`}},
		"html":           {GPUModels: []string{"<a&b>"}},
		"control":        {NodeLabel: "a\nb\tc\x01"},
		"unicode":        {NodeSelector: map[string]string{"zone": "zürich", "x": "\u2028"}},
		"invalid utf-8":  {GPUModels: []string{"a\xffb"}},
		"deep escape":    {Affinity: []broker.AffinityTerm{{Requirements: []broker.LabelRequirement{{Key: "k", Operator: "In", Values: []string{`"`}}}}}},
		"toleration esc": {Tolerations: []broker.Toleration{{Effect: "\\"}}},
	}
	for name, c := range cases {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := constraintsJSON(&c); got != string(want) {
			t.Errorf("%s: constraintsJSON = %s, encoding/json = %s", name, got, want)
		}
		prefix := []byte("xyz")
		if got := appendConstraintsJSON(prefix, &c); string(got) != "xyz"+string(want) {
			t.Errorf("%s: appendConstraintsJSON after a prefix = %s, want xyz%s", name, got, want)
		}
	}
}
