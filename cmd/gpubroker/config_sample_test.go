package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/gpubroker/gpubroker/broker"
)

// TestSampleConfigReproducesTheReferenceScenario loads deploy/gpubroker.yaml
// the way "gpubroker plan --config" does and checks the reference setup of
// DESIGN.md: the Cluster Autoscaler's node groups, limits and scale-down
// settings, and the training tenant at PriorityClass 1000000.
func TestSampleConfigReproducesTheReferenceScenario(t *testing.T) {
	c, err := loadConfig("../../deploy/gpubroker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.policy
	if p.ClusterMinGPUs != 0 || p.ClusterMaxGPUs != 50 || p.ScaleDownUnneeded.D() != 5*time.Minute ||
		p.ScaleDownUtilisation != 0.5 || p.Expander != broker.ExpanderMostPods {
		t.Fatalf("policy: %+v", p)
	}
	type pool struct {
		name           string
		gpus, min, max int
	}
	var pools []pool
	for _, pl := range c.pools {
		pools = append(pools, pool{pl.Name, pl.GPUsPerNode, pl.MinNodes, pl.MaxNodes})
	}
	want := []pool{{"cpu-node-group", 0, 1, 10}, {"gpu-training-group", 4, 0, 5}}
	if d := cmp.Diff(want, pools, cmp.AllowUnexported(pool{})); d != "" {
		t.Fatalf("pools (-want +got):\n%s", d)
	}
	gpuPool := c.pools[1]
	if gpuPool.Labels["infra-type"] != "gpu" || gpuPool.Labels["gpu.vendor"] != "nvidia" || len(gpuPool.Taints) != 1 ||
		gpuPool.Taints[0].Effect != "NoSchedule" || gpuPool.Sides != broker.PoolShared || c.pools[0].Sides != broker.PoolK8s {
		t.Fatalf("GPU pool labels, taints or sides: %+v", gpuPool)
	}
	if len(c.tenants) != 1 || c.tenants[0].Name != "training" || c.tenants[0].BasePriority != 1000000 {
		t.Fatalf("tenants: %+v", c.tenants)
	}
	// No secret in the sample: the URL comes from GPUBROKER_DATABASE_URL.
	if c.file.Database.URL != "" {
		t.Fatalf("the sample holds a database URL: %q", c.file.Database.URL)
	}
}

// TestConfigMapEmbedsTheSampleConfig keeps the Kubernetes ConfigMap and
// deploy/gpubroker.yaml identical, so the deployed broker runs the
// configuration the test above checked.
func TestConfigMapEmbedsTheSampleConfig(t *testing.T) {
	sample, err := os.ReadFile("../../deploy/gpubroker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/kubernetes/30-broker-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var embedded string
	for {
		var cm struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		err := dec.Decode(&cm)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if cm.Kind == "ConfigMap" {
			embedded = cm.Data["gpubroker.yaml"]
		}
	}
	if d := cmp.Diff(string(sample), embedded); d != "" {
		t.Fatalf("the ConfigMap's gpubroker.yaml differs from deploy/gpubroker.yaml; regenerate it with\n"+
			"  sed 's/^/    /; s/^ *$//' deploy/gpubroker.yaml  (under data.gpubroker.yaml)\n(-file +configmap):\n%s", d)
	}
	if _, err := parseConfig("configmap", []byte(embedded)); err != nil {
		t.Fatal(err)
	}
}
