package broker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNodeReportHealth(t *testing.T) {
	r := NodeReport{Node: "n1", At: time.Unix(1, 0), GPUs: []GPUReport{
		{Index: 0, UUID: "GPU-a", Utilisation: 0.2},
		{Index: 1, UUID: "GPU-b", Utilisation: 0.6, XIDs: []uint64{13}}, // 13: graphics engine exception, an app fault
	}}
	u, ok, why := r.Health()
	if u != 0.4 || !ok || why != "" {
		t.Fatalf("healthy node: %g %v %q", u, ok, why)
	}
	r.GPUs[1].XIDs = append(r.GPUs[1].XIDs, 79)
	if _, ok, why = r.Health(); ok || !strings.Contains(why, "XID 79") || !strings.Contains(why, "GPU-b") {
		t.Fatalf("XID 79: %v %q", ok, why)
	}
	r.GPUs[1].XIDs = nil
	r.GPUs[0].ECCUncorrected = 2
	if _, ok, why = r.Health(); ok || !strings.Contains(why, "uncorrectable ECC") {
		t.Fatalf("ECC: %v %q", ok, why)
	}
	var ve *ValidationError
	r.GPUs[0].Utilisation = 1.5
	if err := r.Validate(); !errors.As(err, &ve) || ve.Field != "gpus[0].utilisation" {
		t.Fatalf("validate: %v", err)
	}
	if err := (NodeReport{At: time.Unix(1, 0)}).Validate(); !errors.As(err, &ve) || ve.Field != "node" {
		t.Fatalf("validate node: %v", err)
	}
}
