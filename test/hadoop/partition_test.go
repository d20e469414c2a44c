package hadoop_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// partitionTarget is an RM with node labels enabled and one exclusive
// partition, "fast", that queue root.a may use: yarnsim or a real Hadoop
// RM, with three NodeManagers of four GPUs.
type partitionTarget struct {
	url   string
	hosts []string
	// label puts a host into partition fast.
	label func(ctx context.Context, host string) error
	// submit asks in the default partition, submitFast in fast.
	submit, submitFast func(ctx context.Context, queue string, prio, containers, gpus int) (string, error)
	logs               func() string
}

// TestContractPartitions: a node's label is its partition; labelled asks
// are served only there and carry their partition into the broker's
// demand, default asks only on default nodes.
func TestContractPartitions(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) { runPartitions(t, simPartitionTarget(t)) })
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) { runPartitions(t, hadoopPartitionTarget(t, v)) })
	}
}

func simPartitionTarget(t *testing.T) partitionTarget {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg := partitionTarget{logs: func() string { return "" }}
	for i := range 3 {
		h := fmt.Sprintf("127.0.0.%d", 11+i)
		tg.hosts = append(tg.hosts, h)
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4, MemoryMB: 16384, VCores: 16}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	tg.url = srv.URL
	tg.label = func(_ context.Context, host string) error { return sim.SetNodeLabels(host, []string{"fast"}) }
	submit := func(label string) func(context.Context, string, int, int, int) (string, error) {
		return func(_ context.Context, queue string, prio, containers, gpus int) (string, error) {
			return sim.Submit(yarnsim.AppSpec{Queue: queue, Priority: int64(prio),
				Requests: []yarnsim.RequestSpec{{Containers: containers, GPUs: gpus, NodeLabel: label}}})
		}
	}
	tg.submit, tg.submitFast = submit(""), submit("fast")
	return tg
}

func hadoopPartitionTarget(t *testing.T, version string) partitionTarget {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := hadoop.Start(ctx, hadoop.Config{Version: version, Dir: t.TempDir(), Nodes: 3, GPUsPerNode: 4, Label: "fast"})
	if err != nil {
		t.Fatalf("start hadoop %s with node labels: %v", version, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return partitionTarget{
		url: c.Ready.RMWeb, hosts: c.Ready.Nodes, label: c.Label,
		submit: func(ctx context.Context, queue string, prio, containers, gpus int) (string, error) {
			return c.Submit(ctx, queue, prio, containers, gpus, "")
		},
		submitFast: c.SubmitLabelled,
		logs:       func() string { return c.LogTail(3000) },
	}
}

func runPartitions(t *testing.T, tg partitionTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("RM log tail:\n%s", tg.logs())
		}
	}()
	c, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	fast := tg.hosts[2]
	if err := tg.label(ctx, fast); err != nil {
		t.Fatalf("label %s: %v", fast, err)
	}
	eventually(t, ctx, c, "the labelled node", func(o *yarn.Observation) error {
		for _, n := range o.Nodes {
			want := ""
			if n.Host == fast {
				want = "fast"
			}
			if n.Partition() != want || n.State != "RUNNING" {
				return fmt.Errorf("node %s %s in partition %q, want RUNNING in %q", n.Host, n.State, n.Partition(), want)
			}
		}
		return nil
	})

	// Labelled: 2 x 4 GPUs, one fits the fast node. Default: 3 x 4 GPUs,
	// two fit the default nodes; none may use the fast node.
	idL, err := tg.submitFast(ctx, "a", 1, 2, 4)
	if err != nil {
		t.Fatalf("submit labelled: %v", err)
	}
	idD, err := tg.submit(ctx, "a", 1, 3, 4)
	if err != nil {
		t.Fatalf("submit default: %v", err)
	}
	obs := eventually(t, ctx, c, "both apps partly allocated", func(o *yarn.Observation) error {
		l, okL := o.App(idL)
		d, okD := o.App(idD)
		if !okL || !okD || l.PendingContainers() != 1 || d.PendingContainers() != 1 || len(l.Containers) != 1 || len(d.Containers) != 2 {
			return fmt.Errorf("labelled %+v, default %+v: want 1 of 2 and 2 of 3 allocated", l, d)
		}
		return nil
	})
	l, _ := obs.App(idL)
	d, _ := obs.App(idD)
	if l.Containers[0].Host != fast {
		t.Errorf("labelled container on %s, want %s", l.Containers[0].Host, fast)
	}
	for _, ct := range d.Containers {
		if ct.Host == fast {
			t.Errorf("default container %s on the labelled node", ct.ID)
		}
	}
	ds, _ := yarn.MapDemand(obs, yarn.NewQueueMap(map[string]broker.Tenant{"alpha": {Name: "alpha", YARNQueues: []string{"root.a"}}}), yarn.MapOptions{})
	got := map[string]string{}
	for _, dm := range ds {
		got[dm.Key] = fmt.Sprintf("partition=%q units=%d models=%v", dm.Constraints.NodeLabel, dm.Units, dm.Constraints.GPUModels)
	}
	want := map[string]string{
		idL + "/1": `partition="fast" units=1 models=[]`,
		idD + "/1": `partition="" units=1 models=[]`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("demand = %v, want %v", got, want)
	}
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(nil)) {
		if (n.Name == fast) != (n.Partition == "fast") || len(n.Work) != 1 || n.GPUsAllocated != 4 {
			t.Errorf("broker node %s: partition %q, %d GPUs allocated, work %+v", n.Name, n.Partition, n.GPUsAllocated, n.Work)
		}
	}
}
