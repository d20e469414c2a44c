package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestSampleConfigReproducesTheReferenceScenario loads deploy/gpubroker.yaml
// the way "gpubroker plan --config" does and checks the reference setup of
// docs/design.md: the Cluster Autoscaler's node groups, limits and scale-down
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

// TestPlanLoadsTheSampleConfig runs "gpubroker plan --config" on
// deploy/gpubroker.yaml with only its addresses swapped for loopback ones
// (a real database, the YARN and AWS simulators): the full wiring accepts
// the sample and plans the reference story's first step, a GPU node for a
// pending training job, over the pools, tenant and policy serve would seed;
// plan itself neither migrates nor seeds the database.
func TestPlanLoadsTheSampleConfig(t *testing.T) {
	sample, err := os.ReadFile("../../deploy/gpubroker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ysim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	yrm := httptest.NewServer(ysim.Handler())
	t.Cleanup(yrm.Close)
	aws := awssim.New(awssim.Config{})
	awsURL, err := aws.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { aws.Close(context.Background()) })
	for _, g := range []awssim.GroupSpec{
		{Name: "cpu-node-group", Min: 1, Max: 10, Desired: 1, InstanceType: "m5.2xlarge"},
		{Name: "gpu-training-group", Min: 0, Max: 5, InstanceType: "g5.12xlarge"},
	} {
		if err := aws.CreateGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	// The reference story: a training job asks for 2 GPUs and waits.
	if _, err := ysim.Submit(yarnsim.AppSpec{Name: "elastic-gpu-training", Queue: "root.training",
		Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}}); err != nil {
		t.Fatal(err)
	}
	// Static credentials from the environment: no instance metadata lookups.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	url := pg.NewDatabase(t, nil)
	cfg := string(sample)
	for _, r := range []struct{ old, new string }{
		{"database:\n", "database:\n  url: " + url + "\n"},
		{"    - http://rm1.hadoop.internal:8088\n    - http://rm2.hadoop.internal:8088\n", "    - " + yrm.URL + "\n"},
		{"  region: us-east-1\n", "  region: us-east-1\n  endpoint: " + awsURL + "\n"},
	} {
		if strings.Count(cfg, r.old) != 1 {
			t.Fatalf("the sample no longer holds %q; update this test's address swap", r.old)
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	path := filepath.Join(t.TempDir(), "gpubroker.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// plan never migrates: on a fresh database it says what to run.
	code, out, errOut := runCLI(t, nil, "plan", "--config", path, "--json")
	if code != 2 || !strings.Contains(errOut, "gpubroker migrate") {
		t.Fatalf("plan on an unmigrated database: exit %d, want 2 naming gpubroker migrate\nstdout %s\nstderr %s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, nil, "migrate", "--config", path); code != 0 {
		t.Fatalf("migrate: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// plan never seeds: it plans over the store as serve's seeding would
	// leave it, and leaves the store as it was.
	code, out, errOut = runCLI(t, nil, "plan", "--config", path, "--json")
	if code != 0 {
		t.Fatalf("plan: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if pools, err := st.ListPools(ctx); err != nil || len(pools) != 0 {
		t.Fatalf("plan wrote pools %+v (%v); it must leave the configuration to serve", pools, err)
	}
	if ts, err := st.ListTenants(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("plan wrote tenants %+v (%v)", ts, err)
	}
	if pol, err := st.GetPolicy(ctx); err != nil || pol.Version != 0 {
		t.Fatalf("plan wrote the policy %+v (%v)", pol, err)
	}
	var plan broker.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan output is not a plan: %v\n%s", err, out)
	}
	// The GPU pool grows by one node for the job, for tenant training.
	if len(plan.Actions) != 1 || plan.Actions[0].Kind != broker.ActScaleUp || plan.Actions[0].Pool != "gpu-training-group" ||
		plan.Actions[0].Target != 1 {
		t.Fatalf("plan %s, want one scale-up of gpu-training-group to 1 node", out)
	}

	// The configuration serve seeds at start: the sample's pools, tenant
	// and policy.
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := seed(ctx, st, c, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	pools, err := st.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type limits struct {
		Name           string
		GPUs, Min, Max int
	}
	var got []limits
	for _, p := range pools {
		got = append(got, limits{p.Name, p.GPUsPerNode, p.MinNodes, p.MaxNodes})
	}
	want := []limits{{"cpu-node-group", 0, 1, 10}, {"gpu-training-group", 4, 0, 5}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("seeded pools (-want +got):\n%s", d)
	}
	tn, err := st.GetTenant(ctx, "training")
	if err != nil || tn.BasePriority != 1000000 {
		t.Fatalf("seeded tenant %+v, %v", tn, err)
	}
	pol, err := st.GetPolicy(ctx)
	if err != nil || pol.ClusterMaxGPUs != 50 || pol.ScaleDownUnneeded.D() != 5*time.Minute || pol.ScaleDownUtilisation != 0.5 {
		t.Fatalf("seeded policy %+v, %v", pol, err)
	}
}
