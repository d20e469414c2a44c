package broker

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestTenantValidate(t *testing.T) {
	ok := Tenant{Name: "training", MaxGPUs: 8, GuaranteedGPUs: 2, Weight: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid tenant: %v", err)
	}
	cases := []struct {
		name  string
		edit  func(*Tenant)
		field string
	}{
		{"bad name", func(t *Tenant) { t.Name = "Bad_Name" }, "name"},
		{"negative guaranteed", func(t *Tenant) { t.GuaranteedGPUs = -1 }, "guaranteed_gpus"},
		{"negative max", func(t *Tenant) { t.MaxGPUs = -1; t.GuaranteedGPUs = -2 }, "guaranteed_gpus"},
		{"max below guaranteed", func(t *Tenant) { t.MaxGPUs = 1 }, "max_gpus"},
		{"zero weight", func(t *Tenant) { t.Weight = 0 }, "weight"},
		{"duplicate queue", func(t *Tenant) { t.YARNQueues = []string{"root.a", "root.a"} }, "yarn_queues[1]"},
		{"bad namespace", func(t *Tenant) { t.Namespaces = []string{"Team A"} }, "namespaces[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := ok
			tc.edit(&tn)
			var ve *ValidationError
			if err := tn.Validate(); !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("Validate() = %v, want a validation error on %q", err, tc.field)
			}
		})
	}
}

func TestPoolAndPolicyValidate(t *testing.T) {
	p := Pool{Name: "gpu-training-group", GPUsPerNode: 4, MinNodes: 0, MaxNodes: 5, Sides: PoolShared}
	if err := p.Validate(); err != nil {
		t.Fatalf("valid pool: %v", err)
	}
	p.MinNodes = 6
	var ve *ValidationError
	if err := p.Validate(); !errors.As(err, &ve) || ve.Field != "max_nodes" {
		t.Fatalf("min > max: got %v", err)
	}
	pol := DefaultPolicy()
	if err := pol.Validate(); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	pol.ScaleDownUtilisation = 1.5
	if err := pol.Validate(); !errors.As(err, &ve) || ve.Field != "scale_down_utilisation" {
		t.Fatalf("threshold 1.5: got %v", err)
	}
}

func TestWithPrefix(t *testing.T) {
	err := WithPrefix("tenants[2]", Invalid("max_gpus", "bad"))
	if err.Error() != "tenants[2].max_gpus: bad" {
		t.Fatalf("got %q", err)
	}
	if WithPrefix("x", nil) != nil {
		t.Fatal("nil error must stay nil")
	}
	plain := errors.New("plain")
	if WithPrefix("x", plain) != plain {
		t.Fatal("non-validation errors must pass through")
	}
}

func TestDurationJSON(t *testing.T) {
	var p struct{ D Duration }
	if err := json.Unmarshal([]byte(`{"D":"5m"}`), &p); err != nil || p.D.D() != 5*time.Minute {
		t.Fatalf("string: %v %v", p.D, err)
	}
	if err := json.Unmarshal([]byte(`{"D":90}`), &p); err != nil || p.D.D() != 90*time.Second {
		t.Fatalf("seconds: %v %v", p.D, err)
	}
	if err := json.Unmarshal([]byte(`{"D":"soon"}`), &p); err == nil {
		t.Fatal("want error for a bad duration")
	}
	b, _ := json.Marshal(Duration(90 * time.Second))
	if string(b) != `"1m30s"` {
		t.Fatalf("marshal: %s", b)
	}
}

func TestWorkAtRisk(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := Workload{StartedAt: now.Add(-time.Hour), CheckpointAge: -1}
	if got := w.WorkAtRisk(now); got != time.Hour {
		t.Fatalf("unknown checkpoint: got %s, want the whole run", got)
	}
	w.CheckpointAge = 10 * time.Minute
	if got := w.WorkAtRisk(now); got != 10*time.Minute {
		t.Fatalf("checkpoint: got %s", got)
	}
	if got := (Workload{CheckpointAge: -1}).WorkAtRisk(now); got < 1000*time.Hour {
		t.Fatalf("unknown start and checkpoint must be the worst case, got %s", got)
	}
}

func TestTolerations(t *testing.T) {
	taint := Taint{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}
	cases := []struct {
		tol  Toleration
		want bool
	}{
		{Toleration{Key: "nvidia.com/gpu", Operator: "Exists"}, true},
		{Toleration{Operator: "Exists"}, true},
		{Toleration{Key: "nvidia.com/gpu", Value: "present"}, true},
		{Toleration{Key: "nvidia.com/gpu", Value: "other"}, false},
		{Toleration{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoExecute"}, false},
	}
	for _, tc := range cases {
		if got := tc.tol.Tolerates(taint); got != tc.want {
			t.Errorf("%+v tolerates %v = %v, want %v", tc.tol, taint, got, tc.want)
		}
	}
}
