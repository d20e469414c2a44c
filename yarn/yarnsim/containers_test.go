package yarnsim_test

import (
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestContainersThroughTheClient: the simulator's live containers reach
// the real client with their nodes and sizes; a managed AM's container is
// named by its attempt; a LOST node loses its containers (the asks become
// pending again) and a lost AM starts attempt 2, which keeps the app's
// other containers; a completed container frees its GPUs.
func TestContainersThroughTheClient(t *testing.T) {
	for _, f := range []yarnsim.Flavor{yarnsim.Flavor33, yarnsim.Flavor35} {
		t.Run(string(f), func(t *testing.T) {
			sim, _, c := start(t, yarnsim.Config{Flavor: f})
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
			id, err := sim.Submit(yarnsim.AppSpec{Queue: "a", ManagedAM: true, Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}})
			must(t, err)
			obs := observe(t, c)
			a, _ := obs.App(id)
			if a.AllocatedGPUs != 6 || len(a.Containers) != 4 || a.AMContainer == "" || a.Attempt != "appattempt_1700000000000_0001_000001" {
				t.Fatalf("app = %+v, want 6 GPUs in 3 containers plus the AM's, attempt 1", a)
			}
			byHost := map[string]int{}
			for _, ct := range a.Containers {
				byHost[ct.Host] += ct.GPUs
				if ct.AM != (ct.ID == a.AMContainer) || (ct.AM && (ct.GPUs != 0 || ct.Host != "n1" || ct.Priority != 0)) {
					t.Errorf("container %+v (AM %s)", ct, a.AMContainer)
				}
			}
			if byHost["n1"] != 4 || byHost["n2"] != 2 {
				t.Errorf("GPUs by host = %v, want n1 4, n2 2", byHost)
			}
			ids, am, err := sim.AppContainers(id)
			must(t, err)
			if len(ids) != 4 || am != a.AMContainer {
				t.Errorf("AppContainers = %v, %q", ids, am)
			}

			// n1 is LOST: its containers, the AM's among them, are gone;
			// the asks are pending again and attempt 2 runs its AM on n2.
			must(t, sim.SetNodeState("n1", "LOST"))
			obs = observe(t, c)
			a, _ = obs.App(id)
			if a.Attempt != "appattempt_1700000000000_0001_000002" || a.AMContainer == "" || a.PendingContainers() != 1 {
				t.Errorf("after n1 LOST: attempt %q AM %q pending %d, want attempt 2 with an AM, 1 pending", a.Attempt, a.AMContainer, a.PendingContainers())
			}
			for _, ct := range a.Containers {
				if ct.Host != "n2" {
					t.Errorf("container %+v on a LOST node", ct)
				}
			}
			if n, _ := obs.Node("n1"); n.State != "LOST" || n.Containers != 0 {
				t.Errorf("n1 = %+v, want LOST without containers", n)
			}

			// A container ends: its GPUs are free and the app is smaller.
			var gpuC string
			for _, ct := range a.Containers {
				if !ct.AM {
					gpuC = ct.ID
				}
			}
			must(t, sim.CompleteContainer(gpuC))
			obs = observe(t, c)
			a, _ = obs.App(id)
			for _, ct := range a.Containers {
				if ct.ID == gpuC {
					t.Errorf("completed container %s still listed", gpuC)
				}
			}
			n2, _ := obs.Node("n2")
			sum := 0
			for _, ct := range a.Containers {
				sum += ct.GPUs
			}
			if n2.GPUsUsed != sum || a.AllocatedGPUs != sum {
				t.Errorf("n2 uses %d GPUs, app holds %d, containers %d", n2.GPUsUsed, a.AllocatedGPUs, sum)
			}
			if err := sim.CompleteContainer(gpuC); err == nil {
				t.Errorf("completing a container twice succeeded")
			}
		})
	}
}

// TestPartitionsThroughTheClient: node labels and label expressions reach
// the broker's nodes and demand as partitions.
func TestPartitionsThroughTheClient(t *testing.T) {
	sim, _, c := start(t, yarnsim.Config{})
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "plain", GPUs: 4}))
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "fancy", GPUs: 2, Labels: []string{"fast"}}))
	_, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 2, NodeLabel: "fast"}}})
	must(t, err)
	obs := observe(t, c)
	qm := yarn.NewQueueMap(map[string]broker.Tenant{"t": {Name: "t", YARNQueues: []string{"root.a"}}})
	ds, _ := yarn.MapDemand(obs, qm, yarn.MapOptions{})
	if len(ds) != 1 || ds[0].Constraints.NodeLabel != "fast" || len(ds[0].Constraints.GPUModels) != 0 || ds[0].Units != 1 {
		t.Errorf("demand = %+v, want one unit in partition fast, no GPU model", ds)
	}
	a := obs.Apps[0]
	if len(a.Requests) != 1 || a.Requests[0].NodeLabel != "fast" || len(a.Containers) != 1 || a.Containers[0].Host != "fancy" {
		t.Errorf("app = %+v, want one container on fancy and one pending in partition fast", a)
	}
	for _, n := range yarn.BrokerNodes(obs, qm) {
		want := map[string]string{"plain": "", "fancy": "fast"}[n.Name]
		if n.Partition != want {
			t.Errorf("node %s partition %q, want %q", n.Name, n.Partition, want)
		}
	}
}
