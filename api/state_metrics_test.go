package api_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// scrape reads /metrics into series (name{labels} as the text format
// writes them, labels sorted by name) → value.
func scrape(t *testing.T, e *env, url string) map[string]float64 {
	t.Helper()
	if url == "" {
		url = e.srv.URL
	}
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestStateMetricsValues: /metrics exports the state the alert rules and
// the Grafana dashboard use — capacity by side and pool, pool backoff
// (only while it lasts), pending demand by tenant and wait reason with the
// oldest wait (demand no plan has given a reason labelled none), node health and phases from the store; leadership, source
// and pool staleness, the last tick and claim conflicts from the runtime,
// the loop's series on the leader only.
func TestStateMetricsValues(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	if err := e.st.UpsertNodes(ctx, []broker.Node{{Name: "ip-10-0-0-2", InstanceID: "i-2", Pool: "gpu-training-group",
		Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 1,
		Utilisation: 0.2, Healthy: false, HealthReason: "XID 79: GPU fell off the bus"}}, e.now); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetPoolBackoff(ctx, "gpu-training-group", time.Now().Add(10*time.Minute), "InsufficientInstanceCapacity"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetPoolBackoff(ctx, "cpu-node-group", time.Now().Add(-time.Minute), "an old backoff, over"); err != nil {
		t.Fatal(err)
	}
	tick := time.Unix(1_780_000_000, 500_000_000)
	e.rt.set(func(f *fakeRuntime) {
		f.status = engine.RuntimeStatus{Leader: true, LastTick: tick,
			Stale:          map[broker.Source]string{broker.SourceYARN: "RM unreachable for 45s"},
			StalePools:     map[string]string{"gpu-training-group": "group not returned by DescribeAutoScalingGroups"},
			ClaimConflicts: 3}
	})

	m := scrape(t, e, "")
	for series, v := range map[string]float64{
		`gpubroker_leader`:                                                        1,
		`gpubroker_last_tick_timestamp_seconds`:                                   1_780_000_000.5,
		`gpubroker_source_stale{source="yarn"}`:                                   1,
		`gpubroker_source_stale{source="k8s"}`:                                    0,
		`gpubroker_pool_stale{pool="gpu-training-group"}`:                         1,
		`gpubroker_pool_stale{pool="cpu-node-group"}`:                             0,
		`gpubroker_claim_conflicts_total`:                                         3,
		`gpubroker_side_gpus{side="k8s",state="total"}`:                           4,
		`gpubroker_side_gpus{side="k8s",state="busy"}`:                            3,
		`gpubroker_side_gpus{side="k8s",state="idle"}`:                            1,
		`gpubroker_side_gpus{side="yarn",state="busy"}`:                           1,
		`gpubroker_side_gpus{side="yarn",state="idle"}`:                           3,
		`gpubroker_side_gpus{side="none",state="in_flight"}`:                      4,
		`gpubroker_side_gpus{side="none",state="total"}`:                          4,
		`gpubroker_side_nodes{side="none"}`:                                       1,
		`gpubroker_side_nodes{side="k8s"}`:                                        1,
		`gpubroker_pool_gpus{pool="gpu-training-group",state="total"}`:            12,
		`gpubroker_pool_gpus{pool="gpu-training-group",state="busy"}`:             4,
		`gpubroker_pool_gpus{pool="gpu-training-group",state="in_flight"}`:        4,
		`gpubroker_pool_nodes{pool="gpu-training-group"}`:                         3,
		`gpubroker_pool_max_nodes{pool="gpu-training-group"}`:                     5,
		`gpubroker_pool_min_nodes{pool="cpu-node-group"}`:                         1,
		`gpubroker_pool_backoff{pool="gpu-training-group"}`:                       1,
		`gpubroker_pool_backoff{pool="cpu-node-group"}`:                           0,
		`gpubroker_demand_pending_gpus{tenant="ml",wait_reason="in-flight"}`:      2,
		`gpubroker_demand_pending_gpus{tenant="ml",wait_reason="none"}`:           1,
		`gpubroker_demand_pending_gpus{tenant="vision",wait_reason="over-quota"}`: 4,
		`gpubroker_demand_pending{tenant="vision",wait_reason="over-quota"}`:      1,
		`gpubroker_node_unhealthy{node="ip-10-0-0-2",pool="gpu-training-group"}`:  1,
		`gpubroker_node_unhealthy{node="ip-10-0-0-1",pool="gpu-training-group"}`:  0,
		`gpubroker_nodes{owner="k8s",phase="active",pool="gpu-training-group"}`:   1,
		`gpubroker_nodes{owner="none",phase="booting",pool="gpu-training-group"}`: 1,
	} {
		got, ok := m[series]
		if !ok {
			t.Errorf("/metrics lacks %s", series)
		} else if got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	// The oldest pending demand was first seen 10 minutes ago.
	for series, lo := range map[string]float64{
		`gpubroker_demand_oldest_wait_seconds{tenant="ml",wait_reason="in-flight"}`:      590,
		`gpubroker_demand_oldest_wait_seconds{tenant="vision",wait_reason="over-quota"}`: 590,
		`gpubroker_demand_oldest_wait_seconds{tenant="ml",wait_reason="none"}`:           50,
	} {
		if got := m[series]; got < lo || got > lo+120 {
			t.Errorf("%s = %v, want about %v", series, got, lo+10)
		}
	}

	// A follower reports that it does not lead and nothing of the loop.
	e.rt.set(func(f *fakeRuntime) {
		f.status.Leader = false
	})
	m = scrape(t, e, "")
	if m[`gpubroker_leader`] != 0 {
		t.Errorf("follower: gpubroker_leader = %v, want 0", m[`gpubroker_leader`])
	}
	for series := range m {
		for _, name := range []string{"gpubroker_source_stale", "gpubroker_pool_stale", "gpubroker_claim_conflicts_total", "gpubroker_last_tick_timestamp_seconds"} {
			if strings.HasPrefix(series, name) {
				t.Errorf("a follower exports %s", series)
			}
		}
	}
	if m[`gpubroker_pool_backoff{pool="gpu-training-group"}`] != 1 {
		t.Errorf("a follower exports the store's state too; got %v", m)
	}

	// The backoff ends: the pool's series drops to 0.
	if err := e.st.SetPoolBackoff(ctx, "gpu-training-group", time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, e, ""); m[`gpubroker_pool_backoff{pool="gpu-training-group"}`] != 0 {
		t.Errorf("backoff cleared: gpubroker_pool_backoff = %v, want 0", m[`gpubroker_pool_backoff{pool="gpu-training-group"}`])
	}

	// Without a runtime (reads only) there is no leadership series.
	h, err := api.New(api.Config{Store: e.st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	m = scrape(t, e, srv.URL)
	if _, ok := m[`gpubroker_leader`]; ok {
		t.Errorf("a server without a tick loop exports gpubroker_leader")
	}
	if m[`gpubroker_side_gpus{side="k8s",state="busy"}`] != 3 {
		t.Errorf("a server without a tick loop still exports capacity; got %v", m)
	}
}

// TestMigrationMetrics: /metrics exports the tasks migrations restarted in
// the last hour and the hourly budget, 0 while consolidation.migrate is off.
func TestMigrationMetrics(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := scrape(t, e, "")
	if m[`gpubroker_migration_budget_per_hour`] != 0 || m[`gpubroker_migrated_tasks_last_hour`] != 0 {
		t.Fatalf("migration off: budget %v, migrated %v, want 0 and 0",
			m[`gpubroker_migration_budget_per_hour`], m[`gpubroker_migrated_tasks_last_hour`])
	}
	pol, err := e.st.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.Migrate, pol.MaxMigrationsPerHour = broker.MigrateCheckpointed, 7
	if _, err := e.st.UpdatePolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	data, err := broker.EncodeOpData(broker.OpData{Victims: []broker.Workload{{Key: "a"}}, Stopped: []string{"b stopped"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActMigrate, Pool: "gpu", Node: "m1", State: broker.OpRunning,
		Step: broker.StepEvict, Reason: "test", Data: data}); err != nil {
		t.Fatal(err)
	}
	m = scrape(t, e, "")
	if got := m[`gpubroker_migration_budget_per_hour`]; got != 7 {
		t.Errorf("gpubroker_migration_budget_per_hour = %v, want 7", got)
	}
	if got := m[`gpubroker_migrated_tasks_last_hour`]; got != 2 {
		t.Errorf("gpubroker_migrated_tasks_last_hour = %v, want 2", got)
	}
}
