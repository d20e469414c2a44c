package yarn_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

func TestQueueMap(t *testing.T) {
	m := yarn.NewQueueMap(map[string]broker.Tenant{
		"ml":      {Name: "ml", YARNQueues: []string{"root.ml"}},
		"train":   {Name: "train", YARNQueues: []string{"root.ml.train"}},
		"adhoc":   {Name: "adhoc", YARNQueues: []string{"adhoc"}},
		"default": {Name: "default", YARNQueues: []string{"root.default"}},
	})
	for path, want := range map[string]string{
		"root.ml.train":       "train",   // exact path
		"root.ml.eval":        "ml",      // nearest listed ancestor
		"root.ml.train.night": "train",   // deeper descendant
		"root.x.adhoc":        "adhoc",   // leaf name
		"adhoc":               "adhoc",   // leaf name as Hadoop 3.3 reports it
		"root.default":        "default", //
		"root.other":          "",        // nobody's
	} {
		got, ok := m.Tenant(path)
		if got.Name != want || ok != (want != "") {
			t.Errorf("Tenant(%q) = %q, %v; want %q", path, got.Name, ok, want)
		}
	}
}

func TestMapDemand(t *testing.T) {
	at := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	started := at.Add(-10 * time.Minute)
	obs := &yarn.Observation{
		At: at,
		Apps: []yarn.App{
			{ID: "application_1_0001", Name: "gang", Queue: "train", QueuePath: "root.ml.train", Priority: 5, Started: started,
				Tags: []string{"gpubroker.io/gang=true", "gpubroker.io/preemptible=false"},
				Requests: []yarn.Request{
					{Priority: 1, Containers: 4, GPUsPerContainer: 8, NodeLabel: "a100"},
					{Priority: 2, AllocationRequestID: 3, Containers: 1, GPUsPerContainer: 1, NodeLabel: "t4"},
				}},
			{ID: "application_1_0002", Name: "plain", Queue: "root.default", QueuePath: "root.default", Priority: 0,
				Requests: []yarn.Request{{Priority: 7, Containers: 2, GPUsPerContainer: 2}}},
			{ID: "application_1_0003", Name: "orphan", Queue: "root.other", QueuePath: "root.other",
				Requests: []yarn.Request{{Priority: 1, Containers: 3, GPUsPerContainer: 2}}},
			{ID: "application_1_0004", Name: "cpu", Queue: "root.default", QueuePath: "root.default"},
		},
	}
	tenants := map[string]broker.Tenant{
		"ml":      {Name: "ml", BasePriority: 1000, YARNQueues: []string{"root.ml"}},
		"default": {Name: "default", BasePriority: 10, YARNQueues: []string{"default"}},
	}
	ds, unmapped := yarn.MapDemand(obs, yarn.NewQueueMap(tenants), yarn.MapOptions{})
	want := []broker.Demand{
		{Source: broker.SourceYARN, Key: "application_1_0001/1", Name: "gang", Tenant: "ml", Queue: "root.ml.train", Priority: 1005,
			GPUsPerUnit: 8, Units: 4, Gang: true, Preemptible: false, LastSeen: at,
			Constraints: broker.Constraints{NodeLabel: "a100"}},
		{Source: broker.SourceYARN, Key: "application_1_0001/2#3", Name: "gang", Tenant: "ml", Queue: "root.ml.train", Priority: 1005,
			GPUsPerUnit: 1, Units: 1, Gang: true, Preemptible: false, LastSeen: at,
			Constraints: broker.Constraints{NodeLabel: "t4"}},
		{Source: broker.SourceYARN, Key: "application_1_0002/7", Name: "plain", Tenant: "default", Queue: "root.default", Priority: 10,
			GPUsPerUnit: 2, Units: 2, Preemptible: true, LastSeen: at},
	}
	if d := cmp.Diff(want, ds); d != "" {
		t.Errorf("demand (-want +got):\n%s", d)
	}
	for _, d := range ds {
		if err := d.Validate(); err != nil {
			t.Errorf("%s: %v", d.Key, err)
		}
	}
	if d := cmp.Diff([]yarn.Unmapped{{AppID: "application_1_0003", Queue: "root.other", GPUs: 6}}, unmapped); d != "" {
		t.Errorf("unmapped (-want +got):\n%s", d)
	}
}

// TestBrokerNodes: node state, partition and down state, and the live
// containers as work on their nodes with the tenant, priority,
// preemptibility, AM flag (and its application's GPUs), start time,
// checkpoint directory and evict grace of their app; GPUs, containers,
// memory or vcores the RM counts beyond the listed containers are unknown
// work, GPUs or not.
func TestBrokerNodes(t *testing.T) {
	at := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	started := at.Add(-time.Hour)
	lost := at.Add(-3 * time.Minute)
	obs := &yarn.Observation{At: at, Nodes: []yarn.Node{
		{Host: "a", State: "RUNNING", GPUsTotal: 8, GPUsUsed: 3, Labels: []string{"a100"}},
		{Host: "b", State: "DECOMMISSIONING", GPUsTotal: 4},
		{Host: "c", State: "UNHEALTHY", GPUsTotal: 4, HealthReport: "disk full"},
		{Host: "d", State: "LOST", GPUsTotal: 4, LastHealth: lost},
		{Host: "e", State: "RUNNING", GPUsTotal: 4, GPUsUsed: 3},
		// The RM counts a container (1 GB, one vcore) on f that nothing
		// lists: unknown work, never idle, though it holds no GPU.
		{Host: "f", State: "RUNNING", GPUsTotal: 4, Containers: 1, UsedMemoryMB: 1024, UsedVCores: 1},
		// g runs a CPU container of an app the list does not show, which
		// explains all the RM counts there.
		{Host: "g", State: "RUNNING", GPUsTotal: 4, Containers: 1, UsedMemoryMB: 2048, UsedVCores: 2},
	}, Others: []yarn.Container{
		{ID: "container_1_0009_01_000002", Host: "g", MemoryMB: 2048, VCores: 2, App: "application_1_0009", Started: started},
	}, Apps: []yarn.App{
		{ID: "application_1_0001", Name: "train", State: "RUNNING", Queue: "train", QueuePath: "root.ml.train", Priority: 5,
			Tags:    []string{"gpubroker.io/checkpoint-dir=hdfs://nn:8020/ckpt/train"},
			Attempt: "appattempt_1_0001_000001", AMContainer: "container_1_0001_01_000001",
			Containers: []yarn.Container{
				{ID: "container_1_0001_01_000001", Host: "e", GPUs: 0, Started: started, AM: true},
				{ID: "container_1_0001_01_000002", Host: "a", GPUs: 2, Started: started.Add(time.Minute)},
				{ID: "container_1_0001_01_000003", Host: "e", GPUs: 1, Started: started.Add(time.Minute)},
			}},
		{ID: "application_1_0002", Name: "pinned", State: "RUNNING", Queue: "root.default", QueuePath: "root.default",
			Tags:       []string{"gpubroker.io/preemptible=false"},
			Containers: []yarn.Container{{ID: "container_1_0002_01_000002", Host: "a", GPUs: 1, Started: started}}},
	}}
	queues := yarn.NewQueueMap(map[string]broker.Tenant{
		"ml":      {Name: "ml", BasePriority: 1000, YARNQueues: []string{"root.ml"}, EvictGrace: broker.Duration(5 * time.Minute)},
		"default": {Name: "default", BasePriority: 10, YARNQueues: []string{"default"}},
	})
	got := yarn.BrokerNodes(obs, queues)
	ml := func(id, host string, gpus int, start time.Time, am bool) broker.Workload {
		w := broker.Workload{Source: broker.SourceYARN, Key: id, Name: "train", Tenant: "ml", Priority: 1005, GPUs: gpus,
			Preemptible: true, StartedAt: start, CheckpointAge: -1, CheckpointDir: "hdfs://nn:8020/ckpt/train",
			App: "application_1_0001", AM: am, Class: broker.WorkBatch, EvictGrace: 5 * time.Minute,
			// it may restart on any node of its node's partition
			Constraints: &broker.Constraints{NodeLabel: map[string]string{"a": "a100"}[host]}}
		if am {
			w.AppGPUs = 3 // the AM ends its whole application: 3 GPUs on a and e
		}
		return w
	}
	want := []broker.Node{
		{Name: "a", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 8, GPUsAllocated: 3, Utilisation: -1, Healthy: true,
			Partition: "a100", Work: []broker.Workload{
				ml("container_1_0001_01_000002", "a", 2, started.Add(time.Minute), false),
				{Source: broker.SourceYARN, Key: "container_1_0002_01_000002", Name: "pinned", Tenant: "default", Priority: 10, GPUs: 1,
					StartedAt: started, CheckpointAge: -1, App: "application_1_0002", Class: broker.WorkBatch,
					Constraints: &broker.Constraints{NodeLabel: "a100"}},
			}},
		{Name: "b", Owner: broker.OwnerNone, Phase: broker.PhaseDraining, GPUsTotal: 4, Utilisation: -1, Healthy: true},
		{Name: "c", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4, Utilisation: -1, HealthReason: "disk full",
			Down: "NodeManager UNHEALTHY: disk full", DownSince: at},
		{Name: "d", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4, Utilisation: -1, Healthy: true,
			Down: "NodeManager LOST", DownSince: lost},
		{Name: "e", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4, GPUsAllocated: 3, Utilisation: -1, Healthy: true,
			Work: []broker.Workload{
				ml("container_1_0001_01_000001", "e", 0, started, true),
				ml("container_1_0001_01_000003", "e", 1, started.Add(time.Minute), false),
				{Source: broker.SourceYARN, Key: "unlisted/e", Name: yarn.KindUnknownWork, GPUs: 2, CheckpointAge: -1, Class: broker.WorkBatch, Unlisted: true},
			}},
		{Name: "f", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4, Utilisation: -1, Healthy: true,
			Work: []broker.Workload{
				{Source: broker.SourceYARN, Key: "unlisted/f", Name: yarn.KindUnknownWork, CheckpointAge: -1, Class: broker.WorkBatch, Unlisted: true},
			}},
		{Name: "g", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4, Utilisation: -1, Healthy: true,
			Work: []broker.Workload{
				{Source: broker.SourceYARN, Key: "container_1_0009_01_000002", Name: "container of application_1_0009", StartedAt: started,
					CheckpointAge: -1, App: "application_1_0009", Class: broker.WorkBatch},
			}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("nodes (-want +got):\n%s", d)
	}
	// Every node's allocation agrees with its work.
	for _, n := range got {
		sum := 0
		for _, w := range n.Work {
			sum += w.GPUs
		}
		if sum != n.GPUsAllocated {
			t.Errorf("node %s: work holds %d GPUs, allocated %d", n.Name, sum, n.GPUsAllocated)
		}
	}
}
