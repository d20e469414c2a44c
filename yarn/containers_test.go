package yarn_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// TestRunningContainersRealHadoop decodes the app attempts and containers
// that real Hadoop 3.3.6 and 3.5.0 RMs served for a running 1-GPU
// container (app 1, queue a, unmanaged AM) and two 2-GPU containers (app
// 2, queue b, app priority 3), captured together with the app and node
// lists: every container is work on its node, and each node's allocation
// is what its containers hold, with no unknown work.
func TestRunningContainersRealHadoop(t *testing.T) {
	for _, tc := range []struct{ version, ts string }{{"3.3.6", "1796113951078"}, {"3.5.0", "1796113975229"}} {
		t.Run(tc.version, func(t *testing.T) {
			dir := "hadoop-" + tc.version + "/"
			var extra []string
			for _, n := range []string{"0001", "0002"} {
				app := "application_" + tc.ts + "_" + n
				attempt := "appattempt_" + tc.ts + "_" + n + "_000001"
				extra = append(extra,
					"/ws/v1/cluster/apps/"+app+"/appattempts", dir+"appattempts-"+n+".json",
					"/ws/v1/cluster/apps/"+app+"/appattempts/"+attempt+"/containers", dir+"containers-"+n+".json")
			}
			srv := fileRM(t, dir+"apps-running.json", dir+"nodes-running.json", dir+"scheduler.json", extra...)
			obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			a1, _ := obs.App("application_" + tc.ts + "_0001")
			a2, _ := obs.App("application_" + tc.ts + "_0002")
			if a1.AllocatedGPUs != 1 || a2.AllocatedGPUs != 4 || a1.Attempt != "appattempt_"+tc.ts+"_0001_000001" || a1.AMContainer != "" {
				t.Errorf("apps = %+v / %+v, want 1 and 4 GPUs allocated, attempt 1, unmanaged AM", a1, a2)
			}
			if len(a1.Containers) != 1 || a1.Containers[0].GPUs != 1 || a1.Containers[0].Host != "127.0.0.12" ||
				a1.Containers[0].Priority != 1 || a1.Containers[0].MemoryMB != 1024 || a1.Containers[0].VCores != 1 ||
				a1.Containers[0].Started.IsZero() || a1.Containers[0].ID != "container_"+tc.ts+"_0001_01_000001" {
				t.Errorf("app 1 containers = %+v", a1.Containers)
			}
			if len(a2.Containers) != 2 || a2.Containers[0].GPUs != 2 || a2.Containers[1].GPUs != 2 || a2.Containers[0].Host == a2.Containers[1].Host {
				t.Errorf("app 2 containers = %+v, want two of 2 GPUs on different hosts", a2.Containers)
			}
			tenants := yarn.NewQueueMap(map[string]broker.Tenant{
				"alpha": {Name: "alpha", BasePriority: 1000, YARNQueues: []string{"root.a"}},
				"beta":  {Name: "beta", BasePriority: 0, YARNQueues: []string{"b"}},
			})
			works := 0
			for _, n := range yarn.BrokerNodes(obs, tenants) {
				sum := 0
				for _, w := range n.Work {
					sum += w.GPUs
					works++
					if w.Name == yarn.KindUnknownWork {
						t.Errorf("node %s has unknown work %+v", n.Name, w)
					}
					if w.App == a1.ID && (w.Tenant != "alpha" || w.Priority != 1000 || w.GPUs != 1 || n.Name != "127.0.0.12") {
						t.Errorf("app 1 work = %+v on %s", w, n.Name)
					}
					if w.App == a2.ID && (w.Tenant != "beta" || w.Priority != 3 || w.GPUs != 2) {
						t.Errorf("app 2 work = %+v on %s", w, n.Name)
					}
				}
				if sum != n.GPUsAllocated {
					t.Errorf("node %s: work holds %d GPUs, allocated %d", n.Name, sum, n.GPUsAllocated)
				}
			}
			if works != 3 {
				t.Errorf("%d workloads, want 3", works)
			}
		})
	}
}

// scriptedRM serves small hand-written RM answers that a test changes
// between polls, and counts the per-app calls.
type scriptedRM struct {
	mu    sync.Mutex
	files map[string]string // path → body; "!500" answers 500, "!404" the RM's NotFound
	calls int
	// appGone is the RM's answer for an app it does not know.
	appGone string
}

func (s *scriptedRM) set(path, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = body
}

func (s *scriptedRM) perApp() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.calls
	s.calls = 0
	return n
}

func (s *scriptedRM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	body, ok := s.files[r.URL.Path]
	if strings.Contains(r.URL.Path, "/appattempts") {
		s.calls++
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case !ok || body == "!404":
		// What Hadoop 3.3.6 answered for an app it does not know.
		w.WriteHeader(http.StatusNotFound)
		body = s.appGone
	case body == "!500":
		w.WriteHeader(http.StatusInternalServerError)
		body = `{"RemoteException":{"exception":"WebApplicationException","message":"java.lang.NullPointerException"}}`
	case body == "!html404":
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		body = "<html><title>Error 404 Not Found</title></html>"
	}
	_, _ = w.Write([]byte(body))
}

const (
	appGPU   = "application_1_0001"
	appCPU   = "application_1_0002"
	attempt1 = "appattempt_1_0001_000001"
)

func gpuRes(mem, vcores, gpus int) string {
	return fmt.Sprintf(`{"memory":%d,"vCores":%d,"resourceInformations":{"resourceInformation":[{"name":"memory-mb","value":%d},{"name":"vcores","value":%d},{"name":"yarn.io/gpu","value":%d}]}}`, mem, vcores, mem, vcores, gpus)
}

func appsJSON(running, gpus int) string {
	app := func(id string, running, gpus int) string {
		return fmt.Sprintf(`{"id":%q,"name":"n","queue":"root.a","state":"RUNNING","priority":2,"runningContainers":%d,"allocatedMB":%d,"allocatedVCores":%d,"applicationTags":"gpubroker.io/checkpoint-dir=hdfs://nn/ckpt","resourceInfo":{"resourceUsagesByPartition":[{"partitionName":"","used":%s}]}}`,
			id, running, running*1024, running, gpuRes(running*1024, running, gpus))
	}
	return `{"apps":{"app":[` + app(appGPU, running, gpus) + "," + app(appCPU, 3, 0) + `]}}`
}

func nodesJSON(used map[string]int, states ...string) string {
	var ns []string
	for i, h := range []string{"n1", "n2"} {
		st := "RUNNING"
		if i < len(states) {
			st = states[i]
		}
		ns = append(ns, fmt.Sprintf(`{"nodeHostName":%q,"id":"%s:1","state":%q,"lastHealthUpdate":%d,"healthReport":"","totalResource":%s,"usedResource":%s}`,
			h, h, st, healthAt.UnixMilli(), gpuRes(8192, 8, 4), gpuRes(used[h]*1024, used[h], used[h])))
	}
	return `{"nodes":{"node":[` + strings.Join(ns, ",") + `]}}`
}

var healthAt = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func containersJSON(hosts ...string) string {
	var cs []string
	for i, h := range hosts {
		cs = append(cs, fmt.Sprintf(`{"containerId":"container_1_0001_01_%06d","allocatedMB":1024,"allocatedVCores":1,"assignedNodeId":"%s:1","priority":1,"startedTime":1796113976942,"containerState":"RUNNING","nodeId":"%s:1","allocatedResources":{"entry":[{"key":"memory-mb","value":1024},{"key":"yarn.io/gpu","value":1},{"key":"vcores","value":1}]}}`, i+2, h, h))
	}
	return `{"container":[` + strings.Join(cs, ",") + `]}`
}

func newScriptedRM(t *testing.T) (*scriptedRM, *yarn.Client, *time.Time) {
	t.Helper()
	rm := &scriptedRM{files: map[string]string{
		"/ws/v1/cluster/apps":                            appsJSON(1, 1),
		"/ws/v1/cluster/nodes":                           nodesJSON(map[string]int{"n1": 1}),
		"/ws/v1/cluster/scheduler":                       `{"scheduler":{"schedulerInfo":{"type":"capacityScheduler","queueName":"root","queues":{"queue":[{"queueName":"a","queuePath":"root.a"}]}}}}`,
		"/ws/v1/cluster/apps/" + appGPU + "/appattempts": `{"appAttempts":{"appAttempt":[{"id":1,"appAttemptId":"` + attempt1 + `","containerId":""}]}}`,
		"/ws/v1/cluster/apps/" + appGPU + "/appattempts/" + attempt1 + "/containers": containersJSON("n1"),
	}}
	b, err := os.ReadFile(filepath.Join("testdata", "hadoop-3.3.6", "containers-app-gone.json"))
	if err != nil {
		t.Fatal(err)
	}
	rm.appGone = string(b)
	srv := httptest.NewServer(rm)
	t.Cleanup(srv.Close)
	now := healthAt.Add(time.Minute)
	c := newClient(t, yarn.Config{RMs: []string{srv.URL}, Now: func() time.Time { return now }})
	return rm, c, &now
}

// TestContainerListingIsCached: only apps holding GPUs are asked for their
// containers; a steady app is not asked again; a changed allocation, a
// node whose GPU use no longer agrees with the cached containers, and age
// each make the app listed again.
func TestContainerListingIsCached(t *testing.T) {
	ctx := context.Background()
	rm, c, now := newScriptedRM(t)
	hostsOf := func(o *yarn.Observation) string {
		a, _ := o.App(appGPU)
		var hs []string
		for _, ct := range a.Containers {
			hs = append(hs, ct.Host)
		}
		return strings.Join(hs, ",")
	}
	step := func(what string, wantCalls int, wantHosts string) {
		t.Helper()
		obs, err := c.Observe(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := rm.perApp(); n != wantCalls {
			t.Errorf("%s: %d per-app calls, want %d", what, n, wantCalls)
		}
		if h := hostsOf(obs); h != wantHosts {
			t.Errorf("%s: containers on %q, want %q", what, h, wantHosts)
		}
		if cpu, _ := obs.App(appCPU); cpu.Containers != nil {
			t.Errorf("%s: the app without GPUs was listed: %+v", what, cpu.Containers)
		}
	}
	step("first poll", 2, "n1") // attempts + containers
	step("steady", 0, "n1")

	// The container moved: same allocation in the app list, but the nodes
	// disagree with the cache. The cached attempt is asked directly.
	rm.set("/ws/v1/cluster/nodes", nodesJSON(map[string]int{"n2": 1}))
	rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts/"+attempt1+"/containers", containersJSON("n2"))
	step("moved", 1, "n2")
	step("steady after move", 0, "n2")

	// A second container: the allocation changed.
	rm.set("/ws/v1/cluster/apps", appsJSON(2, 2))
	rm.set("/ws/v1/cluster/nodes", nodesJSON(map[string]int{"n1": 1, "n2": 1}))
	rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts/"+attempt1+"/containers", containersJSON("n2", "n1"))
	step("grown", 1, "n2,n1") // in container id order

	// A new attempt (AM restarted): the old one lists nothing, the new one
	// the containers it kept.
	rm.set("/ws/v1/cluster/apps", appsJSON(2, 2)+" ")
	*now = now.Add(10 * time.Minute) // past the cache's trust
	rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts/"+attempt1+"/containers", `{}`)
	rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts", `{"appAttempts":{"appAttempt":[{"id":1,"appAttemptId":"`+attempt1+`"},{"id":2,"appAttemptId":"appattempt_1_0001_000002","containerId":"container_1_0001_02_000009"}]}}`)
	rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts/appattempt_1_0001_000002/containers", containersJSON("n2", "n1"))
	step("new attempt", 3, "n2,n1")
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := obs.App(appGPU); a.Attempt != "appattempt_1_0001_000002" || a.AMContainer != "container_1_0001_02_000009" {
		t.Errorf("attempt %q AM %q, want attempt 2 and its AM container", a.Attempt, a.AMContainer)
	}
}

// TestContainerListingFailureIsStale: when the containers cannot be
// listed, the observation fails (stale), never shows the node idle; an app
// that ended meanwhile is no failure, and the GPUs its node still counts
// are unknown work, not free.
func TestContainerListingFailureIsStale(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, body, want string }{
		{"server error", "!500", "NullPointerException"},
		{"endpoint missing, NodeManager without a web address", "!html404", "nodemanager n1: no web address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rm, c, _ := newScriptedRM(t)
			rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts/"+attempt1+"/containers", tc.body)
			side := yarn.NewSide(c, yarn.MapOptions{})
			_, err := side.Observe(ctx, broker.TenantIndex{})
			if !errors.Is(err, broker.ErrStale) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("observe = %v, want a stale error naming %q", err, tc.want)
			}
		})
	}
	t.Run("app ended", func(t *testing.T) {
		rm, c, _ := newScriptedRM(t)
		rm.set("/ws/v1/cluster/apps/"+appGPU+"/appattempts", "!404")
		side := yarn.NewSide(c, yarn.MapOptions{})
		obs, err := side.Observe(ctx, broker.TenantIndex{})
		if err != nil {
			t.Fatal(err)
		}
		n := obs.Nodes[0]
		if n.Name != "n1" || n.GPUsAllocated != 1 || len(n.Work) != 1 || n.Work[0].Name != yarn.KindUnknownWork || n.Work[0].Preemptible {
			t.Errorf("node = %+v, want its GPU held by unknown, non-preemptible work", n)
		}
	})
}

// TestSideDownSince: an UNHEALTHY or LOST NodeManager is down since its
// health was last reported when first seen so, and stays down since then
// while later health reports move on; it is up again once RUNNING.
func TestSideDownSince(t *testing.T) {
	ctx := context.Background()
	rm, c, now := newScriptedRM(t)
	side := yarn.NewSide(c, yarn.MapOptions{})
	rm.set("/ws/v1/cluster/nodes", nodesJSON(map[string]int{"n1": 1}, "UNHEALTHY", "LOST"))
	obs, err := side.Observe(ctx, broker.TenantIndex{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range obs.Nodes {
		if !n.DownSince.Equal(healthAt) || !strings.HasPrefix(n.Down, "NodeManager ") || n.Owner != broker.OwnerYARN || n.Phase != broker.PhaseActive {
			t.Errorf("node %s: down %q since %s owner %s phase %s, want down since %s, owner yarn, active", n.Name, n.Down, n.DownSince, n.Owner, n.Phase, healthAt)
		}
	}
	// Later health reports: still down since the first one.
	healthAt = healthAt.Add(5 * time.Minute)
	defer func() { healthAt = healthAt.Add(-5 * time.Minute) }()
	*now = now.Add(6 * time.Minute)
	rm.set("/ws/v1/cluster/nodes", nodesJSON(map[string]int{"n1": 1}, "UNHEALTHY", "RUNNING"))
	obs, err = side.Observe(ctx, broker.TenantIndex{})
	if err != nil {
		t.Fatal(err)
	}
	if n := obs.Nodes[0]; !n.DownSince.Equal(healthAt.Add(-5*time.Minute)) || n.Healthy {
		t.Errorf("n1 down since %s, want %s", n.DownSince, healthAt.Add(-5*time.Minute))
	}
	if n := obs.Nodes[1]; n.Down != "" || !n.DownSince.IsZero() {
		t.Errorf("n2 back RUNNING is down %q since %s", n.Down, n.DownSince)
	}
}
