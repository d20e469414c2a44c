package yarnsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestContainerEndpointsAnswerAsHadoop checks the container report,
// signal and app-kill answers against what Hadoop 3.3.6 and 3.5.0 RMs
// answered (recorded against test/hadoop's minicluster):
//
//	GET .../containers/{id}   3.3.6 {"containerId":...,"allocatedMB":"1024",...}
//	                          3.5.0 {"container":{"containerId":...,"allocatedMB":1024,...}}
//	  gone                    404 {"RemoteException":{"exception":"NotFoundException",
//	                              "message":"...Container with id '...' doesn't exist in RM."}}
//	POST .../signal/GRACEFUL_SHUTDOWN  200, body "" (3.3.6) or "signal success" (3.5.0)
//	  absent container        500 "Trying to signal an absent container ..."
//	  bad command             400 "Invalid command: BOGUS, valid commands are: [...]"
//	PUT .../apps/{id}/state KILLED     200 {"state":"KILLING"} (3.3.6), {"state":"KILLED"} (3.5.0)
//	  again                   200 {"state":"KILLED"}
//	GET .../apps/{unknown}/state       404 RemoteException "app with id: ... not found"
//
// and that a signal to a container on a DECOMMISSIONING node is answered
// 200 and dropped, as the RM's RMNodeImpl does.
func TestContainerEndpointsAnswerAsHadoop(t *testing.T) {
	for _, f := range []yarnsim.Flavor{yarnsim.Flavor33, yarnsim.Flavor35} {
		t.Run(string(f), func(t *testing.T) {
			sim, err := yarnsim.New(yarnsim.Config{Flavor: f})
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range []string{"g1", "g2"} {
				if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}); err != nil {
					t.Fatal(err)
				}
			}
			srv := httptest.NewServer(sim.Handler())
			defer srv.Close()
			do := func(method, path, body string) (int, string) {
				t.Helper()
				var rd io.Reader
				if body != "" {
					rd = strings.NewReader(body)
				}
				req, _ := http.NewRequest(method, srv.URL+path, rd)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			app, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}})
			if err != nil {
				t.Fatal(err)
			}
			cs, err := sim.Containers(app)
			if err != nil || len(cs) != 2 || cs[0].ID == cs[1].ID || cs[0].Host == cs[1].Host {
				t.Fatalf("containers: %+v, %v", cs, err)
			}
			attempt := strings.Replace(app, "application_", "appattempt_", 1) + "_000001"
			report := "/ws/v1/cluster/apps/" + app + "/appattempts/" + attempt + "/containers/"
			code, body := do("GET", report+cs[0].ID, "")
			wantStart := `{"allocatedMB":"1024"`
			if f == yarnsim.Flavor35 {
				wantStart = `{"container":{"allocatedMB":1024`
			}
			if code != 200 || !strings.HasPrefix(body, wantStart) || !strings.Contains(body, `"containerId":"`+cs[0].ID+`"`) ||
				!strings.Contains(body, `"containerState":"RUNNING"`) {
				t.Fatalf("container report: %d %s", code, body)
			}
			if code, body := do("POST", "/ws/v1/cluster/containers/"+cs[0].ID+"/signal/BOGUS", ""); code != 400 || !strings.HasPrefix(body, "Invalid command: BOGUS") {
				t.Fatalf("bad command: %d %s", code, body)
			}
			code, body = do("POST", "/ws/v1/cluster/containers/"+cs[0].ID+"/signal/GRACEFUL_SHUTDOWN", "")
			wantBody := "signal success"
			if f == yarnsim.Flavor33 {
				wantBody = ""
			}
			if code != 200 || body != wantBody {
				t.Fatalf("signal: %d %q, want 200 %q", code, body, wantBody)
			}
			// The RM queues the signal for the NodeManager's next heartbeat.
			heartbeat(t, "the signalled container to stop", func() bool { code, _ := do("GET", report+cs[0].ID, ""); return code == 404 })
			if code, body := do("GET", report+cs[0].ID, ""); code != 404 || !strings.Contains(body, `"exception":"NotFoundException"`) || !strings.Contains(body, "doesn't exist in RM") {
				t.Fatalf("report of a stopped container: %d %s", code, body)
			}
			if code, body := do("POST", "/ws/v1/cluster/containers/"+cs[0].ID+"/signal/GRACEFUL_SHUTDOWN", ""); code != 500 || !strings.HasPrefix(body, "Trying to signal an absent container") {
				t.Fatalf("signal to an absent container: %d %s", code, body)
			}
			// The stopped container's ask is pending again (its AM asks
			// again) and is placed anew with a new id.
			if now, _ := sim.Containers(app); len(now) != 2 || now[0].ID == cs[0].ID && now[1].ID == cs[0].ID {
				t.Fatalf("containers after one stopped: %+v", now)
			}
			// A DECOMMISSIONING node drops signals.
			if err := sim.SetNodeState(cs[1].Host, "DECOMMISSIONING"); err != nil {
				t.Fatal(err)
			}
			if code, _ := do("POST", "/ws/v1/cluster/containers/"+cs[1].ID+"/signal/FORCEFUL_SHUTDOWN", ""); code != 200 {
				t.Fatalf("signal to a decommissioning node: %d", code)
			}
			if code, _ := do("GET", report+cs[1].ID, ""); code != 200 {
				t.Fatalf("a container on a DECOMMISSIONING node stopped on a signal: %d", code)
			}
			// Kill the app.
			code, body = do("PUT", "/ws/v1/cluster/apps/"+app+"/state", `{"state":"KILLED"}`)
			wantKill := `{"state":"KILLED"}`
			if f == yarnsim.Flavor33 {
				wantKill = `{"state":"KILLING"}`
			}
			if code != 200 || body != wantKill {
				t.Fatalf("kill: %d %s, want %s", code, body, wantKill)
			}
			if code, body := do("PUT", "/ws/v1/cluster/apps/"+app+"/state", `{"state":"KILLED"}`); code != 200 || body != `{"state":"KILLED"}` {
				t.Fatalf("kill again: %d %s", code, body)
			}
			if code, body := do("GET", "/ws/v1/cluster/apps/"+app+"/state", ""); code != 200 || body != `{"state":"KILLED"}` {
				t.Fatalf("state after the kill: %d %s", code, body)
			}
			if code, body := do("GET", "/ws/v1/cluster/apps/application_1_0001/state", ""); code != 404 || !strings.Contains(body, "app with id: application_1_0001 not found") {
				t.Fatalf("state of an unknown app: %d %s", code, body)
			}
		})
	}
}

// TestOneContainerModel: the RM's app-attempt listing (read by the real
// client), the NodeManagers' REST API and Sim.Containers name the same
// containers by the same ids, and the signal, report and app-kill
// endpoints act on those: a signalled container leaves every listing at
// once (its ask is placed again under a new id, listed alike); a
// decommissioned NodeManager's containers are gone from the RM's listing,
// its REST API no longer answers, and a signal to one of them finds no
// container; a killed app leaves no container on any NodeManager.
func TestOneContainerModel(t *testing.T) {
	for _, f := range []yarnsim.Flavor{yarnsim.Flavor33, yarnsim.Flavor35} {
		t.Run(string(f), func(t *testing.T) {
			sim, rm, _ := start(t, yarnsim.Config{Flavor: f})
			nm := httptest.NewServer(sim.NodeManagerHandler())
			t.Cleanup(nm.Close)
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
			app, err := sim.Submit(yarnsim.AppSpec{Queue: "a", ManagedAM: true, Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}})
			must(t, err)

			do := func(srv *httptest.Server, host, method, path, body string) (int, string) {
				t.Helper()
				var rd io.Reader
				if body != "" {
					rd = strings.NewReader(body)
				}
				req, _ := http.NewRequest(method, srv.URL+path, rd)
				req.Header.Set("Content-Type", "application/json")
				if host != "" {
					req.Host = host + ":8042"
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			// nmList returns the ids host's NodeManager lists, or nil and
			// false when it does not answer.
			nmList := func(host string) ([]string, bool) {
				t.Helper()
				code, body := do(nm, host, "GET", "/ws/v1/node/containers", "")
				if code != http.StatusOK {
					return nil, false
				}
				var doc struct {
					Containers struct {
						Container []struct {
							ID string `json:"id"`
						} `json:"container"`
					} `json:"containers"`
				}
				if err := json.Unmarshal([]byte(body), &doc); err != nil {
					t.Fatalf("NodeManager %s listing %s: %v", host, body, err)
				}
				var ids []string
				for _, x := range doc.Containers.Container {
					ids = append(ids, x.ID)
				}
				slices.Sort(ids)
				return ids, true
			}
			// rmList returns the ids the RM lists for app by host, read by
			// a new client each time (a client trusts its cached lists
			// while the app's allocation stays the same).
			rmList := func() map[string][]string {
				t.Helper()
				c, err := yarn.NewClient(yarn.Config{RMs: []string{rm.URL}})
				must(t, err)
				a, ok := observe(t, c).App(app)
				if !ok {
					return nil
				}
				out := map[string][]string{}
				for _, ct := range a.Containers {
					out[ct.Host] = append(out[ct.Host], ct.ID)
				}
				for _, ids := range out {
					slices.Sort(ids)
				}
				return out
			}
			simList := func() map[string][]string {
				t.Helper()
				cs, err := sim.Containers(app)
				must(t, err)
				out := map[string][]string{}
				for _, ct := range cs {
					out[ct.Host] = append(out[ct.Host], ct.ID)
				}
				for _, ids := range out {
					slices.Sort(ids)
				}
				return out
			}
			agree := func(when string) map[string][]string {
				t.Helper()
				rmIDs, simIDs := rmList(), simList()
				for _, h := range []string{"n1", "n2"} {
					nmIDs, up := nmList(h)
					if up && !slices.Equal(nmIDs, rmIDs[h]) || !slices.Equal(simIDs[h], rmIDs[h]) {
						t.Fatalf("%s: %s lists %v on its NodeManager, %v at the RM, %v in the sim", when, h, nmIDs, rmIDs[h], simIDs[h])
					}
				}
				return rmIDs
			}
			ids := agree("at the start")
			if len(ids["n1"]) != 2 || len(ids["n2"]) != 1 {
				t.Fatalf("containers %v, want the AM's and one on n1, one on n2", ids)
			}

			// Signal n2's container: it leaves every listing, its report
			// is 404, and its ask lands on n2 again under a new id.
			victim := ids["n2"][0]
			if code, body := do(rm, "", "POST", "/ws/v1/cluster/containers/"+victim+"/signal/FORCEFUL_SHUTDOWN", ""); code != 200 {
				t.Fatalf("signal: %d %s", code, body)
			}
			heartbeat(t, "the signal to reach n2's NodeManager", func() bool { ids := rmList(); return !slices.Contains(ids["n2"], victim) })
			ids = agree("after the signal")
			if len(ids["n2"]) != 1 || ids["n2"][0] == victim {
				t.Fatalf("containers on n2 after the signal %v: want one, not %s", ids["n2"], victim)
			}
			attempt := strings.Replace(app, "application_", "appattempt_", 1) + "_000001"
			report := "/ws/v1/cluster/apps/" + app + "/appattempts/" + attempt + "/containers/"
			if code, _ := do(rm, "", "GET", report+victim, ""); code != 404 {
				t.Fatalf("report of the signalled container: %d, want 404", code)
			}
			if code, _ := do(rm, "", "GET", report+ids["n2"][0], ""); code != 200 {
				t.Fatalf("report of its replacement: %d, want 200", code)
			}

			// n2 is decommissioned: its NodeManager has stopped, the RM
			// lists nothing on it, and its container cannot be signalled.
			onN2 := ids["n2"][0]
			must(t, sim.SetNodeState("n2", "DECOMMISSIONED"))
			ids = agree("after n2 was decommissioned")
			if _, up := nmList("n2"); up || len(ids["n2"]) != 0 {
				t.Fatalf("decommissioned n2: NodeManager answers %v, RM lists %v", up, ids["n2"])
			}
			if code, body := do(rm, "", "POST", "/ws/v1/cluster/containers/"+onN2+"/signal/GRACEFUL_SHUTDOWN", ""); code != 500 || !strings.HasPrefix(body, "Trying to signal an absent container") {
				t.Fatalf("signal to a container of a decommissioned node: %d %s", code, body)
			}
			if code, _ := do(rm, "", "GET", report+onN2, ""); code != 404 {
				t.Fatalf("report of a container of a decommissioned node: %d, want 404", code)
			}

			// The app is killed: no NodeManager lists its containers.
			if code, body := do(rm, "", "PUT", "/ws/v1/cluster/apps/"+app+"/state", `{"state":"KILLED"}`); code != 200 {
				t.Fatalf("kill: %d %s", code, body)
			}
			if got, up := nmList("n1"); !up || len(got) != 0 {
				t.Fatalf("n1 lists %v (answering %v) after the kill, want none", got, up)
			}
			if _, err := sim.Containers(app); err == nil {
				t.Fatalf("the killed app still has containers in the sim")
			}
		})
	}
}

// heartbeat waits (at most 5s) for what a NodeManager heartbeat brings.
func heartbeat(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat brought %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFreedSpaceOnDecommissioningNode: Hadoop 3.5's CapacityScheduler
// skips nodes that are not RUNNING, so space freed on a DECOMMISSIONING
// node takes no pending ask; 3.3's allocates there in the heartbeat that
// frees it (only the freed space, before the node's total drops to its
// used resource).
func TestFreedSpaceOnDecommissioningNode(t *testing.T) {
	for _, f := range []yarnsim.Flavor{yarnsim.Flavor33, yarnsim.Flavor35} {
		t.Run(string(f), func(t *testing.T) {
			sim, err := yarnsim.New(yarnsim.Config{Flavor: f})
			if err != nil {
				t.Fatal(err)
			}
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 8}))
			victim, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
			must(t, err)
			small, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}})
			must(t, err)
			queued, err := sim.Submit(yarnsim.AppSpec{Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
			must(t, err)
			cs, _ := sim.Containers(victim)
			if q, _ := sim.Containers(queued); len(cs) != 1 || len(q) != 0 {
				t.Fatalf("victim %+v, queued %+v: want the victim placed, the queued app pending", cs, q)
			}
			must(t, sim.SetNodeState("n1", "DECOMMISSIONING"))
			sc, _ := sim.Containers(small)
			must(t, sim.CompleteContainer(sc[0].ID)) // 2 GPUs freed: too few
			if q, _ := sim.Containers(queued); len(q) != 0 {
				t.Fatalf("queued app placed in 2 freed GPUs: %+v", q)
			}
			must(t, sim.CompleteContainer(cs[0].ID))
			q, _ := sim.Containers(queued)
			if f == yarnsim.Flavor33 && (len(q) != 1 || q[0].Host != "n1") {
				t.Fatalf("3.3: queued app's containers %+v, want one placed in the space freed on n1", q)
			}
			if f == yarnsim.Flavor35 && len(q) != 0 {
				t.Fatalf("3.5: queued app's containers %+v, want none on a decommissioning node", q)
			}
		})
	}
}
