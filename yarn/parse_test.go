package yarn_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpubroker/gpubroker/yarn"
)

// summary is what the parsing tests compare: the observation without
// timestamps and health details.
type appSummary struct {
	ID, Queue, QueuePath, State string
	Priority                    int64
	Pending, PendingGPUs        int
	Requests                    []yarn.Request
}

type nodeSummary struct {
	Host, ID, State          string
	Total, Used, Avail, Cont int
	Labels                   []string
}

func summarise(o *yarn.Observation) ([]appSummary, []nodeSummary) {
	var as []appSummary
	for _, a := range o.Apps {
		as = append(as, appSummary{a.ID, a.Queue, a.QueuePath, a.State, a.Priority, a.PendingContainers(), a.PendingGPUs(), a.Requests})
	}
	var ns []nodeSummary
	for _, n := range o.Nodes {
		ns = append(ns, nodeSummary{n.Host, n.ID, n.State, n.GPUsTotal, n.GPUsUsed, n.GPUsAvailable, n.Containers, n.Labels})
	}
	return as, ns
}

// TestParseRealHadoop decodes answers captured from real Hadoop 3.3.6 and
// 3.5.0 RMs: app A asked for 5 containers of 4 GPUs preferring
// 127.0.0.11, got 3; app B asks for 2 of 2 GPUs. The host request (4) and
// rack request (2) of app A must not be counted on top of its ANY request.
func TestParseRealHadoop(t *testing.T) {
	for _, tc := range []struct {
		version, ts, queueA, queueB string
	}{
		{"3.3.6", "1796014188880", "a", "b"},
		{"3.5.0", "1796014234552", "root.a", "root.b"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			dir := "hadoop-" + tc.version + "/"
			srv := fileRM(t, dir+"apps.json", dir+"nodes.json", dir+"scheduler.json")
			obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			req := func(n, g int) []yarn.Request {
				return []yarn.Request{{Priority: 1, Containers: n, GPUsPerContainer: g, MemoryMB: 1024, VCores: 1, RelaxLocality: true, ExecutionType: "GUARANTEED"}}
			}
			wantApps := []appSummary{
				{"application_" + tc.ts + "_0001", tc.queueA, "root.a", "RUNNING", 3, 2, 8, req(2, 4)},
				{"application_" + tc.ts + "_0002", tc.queueB, "root.b", "RUNNING", 1, 2, 4, req(2, 2)},
			}
			apps, nodes := summarise(obs)
			if d := cmp.Diff(wantApps, apps); d != "" {
				t.Errorf("apps (-want +got):\n%s", d)
			}
			if len(nodes) != 3 {
				t.Fatalf("nodes = %+v", nodes)
			}
			for i, n := range nodes {
				host := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}[i]
				if n.Host != host || n.State != "RUNNING" || n.Total != 4 || n.Used != 4 || n.Avail != 0 || n.Cont != 1 || !contains(n.ID, host+":") {
					t.Errorf("node %d = %+v, want %s RUNNING 4 GPUs all used", i, n, host)
				}
			}
			if obs.Scheduler != "capacityScheduler" {
				t.Errorf("scheduler = %q", obs.Scheduler)
			}
			var qs []string
			for _, q := range obs.Queues {
				qs = append(qs, q.Path)
			}
			if d := cmp.Diff([]string{"root", "root.a", "root.b"}, qs); d != "" {
				t.Errorf("queues (-want +got):\n%s", d)
			}
			qa, _ := obs.Queue("root.a")
			qb, _ := obs.Queue("b")
			if qa.PendingContainers != 2 || qa.PendingGPUs != 8 || !qa.Leaf || qb.PendingContainers != 2 || qb.PendingGPUs != 4 {
				t.Errorf("queue a = %+v, b = %+v", qa, qb)
			}
			if obs.PendingGPUs() != 12 {
				t.Errorf("pending GPUs = %d, want 12", obs.PendingGPUs())
			}
		})
	}
}

// TestParseQuirks decodes the renderings that differ between versions.
func TestParseQuirks(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		srv := fileRM(t, "quirks/apps-null.json", "quirks/nodes-null.json", "quirks/scheduler-fair.json")
		obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(obs.Apps) != 0 || len(obs.Nodes) != 0 {
			t.Errorf("apps %+v nodes %+v, want none", obs.Apps, obs.Nodes)
		}
		var qs []string
		for _, q := range obs.Queues {
			qs = append(qs, q.Path+"/"+q.Name)
		}
		if d := cmp.Diff([]string{"root/root", "root.default/default", "root.ml/ml", "root.ml.train/train"}, qs); d != "" {
			t.Errorf("fair scheduler queues (-want +got):\n%s", d)
		}
		if obs.Scheduler != "fairScheduler" {
			t.Errorf("scheduler = %q", obs.Scheduler)
		}
	})
	t.Run("single objects", func(t *testing.T) {
		srv := fileRM(t, "quirks/apps-single.json", "quirks/nodes-old.json", "quirks/scheduler-capacity-single.json")
		obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		apps, nodes := summarise(obs)
		wantApps := []appSummary{{
			"application_1700000000000_0007", "root.ml.train", "root.ml.train", "ACCEPTED", 5, 4, 32,
			[]yarn.Request{{Priority: 2, AllocationRequestID: -1, Containers: 4, GPUsPerContainer: 8, MemoryMB: 8192, VCores: 4, NodeLabel: "a100", RelaxLocality: true, ExecutionType: "GUARANTEED"}},
		}}
		if d := cmp.Diff(wantApps, apps); d != "" {
			t.Errorf("apps (-want +got):\n%s", d)
		}
		if a := obs.Apps[0]; !a.HasTag("gpubroker.io/gang=true") || a.Started.UnixMilli() != 1700000100000 {
			t.Errorf("app tags %v started %v", a.Tags, a.Started)
		}
		wantNodes := []nodeSummary{
			// No totalResource before Hadoop 3.2: total = used + available.
			{"gpu-1.example", "gpu-1.example:45454", "RUNNING", 8, 3, 5, 2, []string{"a100"}},
			// The LOST entry of a restarted NodeManager gives way to the live one.
			{"gpu-2.example", "gpu-2.example:41234", "RUNNING", 8, 0, 8, 0, nil},
		}
		if d := cmp.Diff(wantNodes, nodes); d != "" {
			t.Errorf("nodes (-want +got):\n%s", d)
		}
		q, ok := obs.Queue("train")
		if !ok || q.Path != "root.ml.train" || q.PendingGPUs != 32 || q.PendingContainers != 4 || !q.Leaf {
			t.Errorf("queue train = %+v (found %v)", q, ok)
		}
	})
	t.Run("mixed requests", func(t *testing.T) {
		srv := fileRM(t, "quirks/apps-mixed.json", "quirks/nodes-null.json", "quirks/scheduler-capacity-single.json")
		obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		apps, _ := summarise(obs)
		// The CPU-only app has no GPU requests; the FINISHED app is dropped
		// even though the RM listed it; host and rack requests and the
		// request with no containers left are not counted.
		want := []appSummary{
			{"application_1700000000000_0002", "default", "default", "RUNNING", 0, 0, 0, nil},
			{"application_1700000000000_0003", "default", "default", "RUNNING", 2, 7, 8, []yarn.Request{
				{Priority: 1, Containers: 1, GPUsPerContainer: 2, MemoryMB: 1024, VCores: 1, RelaxLocality: true},
				{Priority: 3, AllocationRequestID: 7, Containers: 6, GPUsPerContainer: 1, MemoryMB: 1024, VCores: 1, RelaxLocality: true},
			}},
		}
		if d := cmp.Diff(want, apps); d != "" {
			t.Errorf("apps (-want +got):\n%s", d)
		}
	})
}
