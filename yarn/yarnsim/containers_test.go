package yarnsim_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

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
				wantStart = `{"container":{"containerId":"` + cs[0].ID + `","allocatedMB":1024`
			}
			if code != 200 || !strings.HasPrefix(body, wantStart) || !strings.Contains(body, `"containerState":"RUNNING"`) {
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

// TestNodeManagerLifecycle: a decommissioned NodeManager stays down until
// restarted, and an excluded host's NodeManager is turned away. (That a
// restart registers the configured GPUs again, dropping an
// updateNodeResource override, is checked in yarn's
// TestAdmitRestartsNodeManager over the admin RPC.)
func TestNodeManagerLifecycle(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ex := t.TempDir() + "/exclude.xml"
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: ex, Tick: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ex, `<hosts><host><name>g2</name></host></hosts>`); err != nil {
		t.Fatal(err)
	}
	if err := admin.StartNodeManager(yarnsim.NodeSpec{Host: "g1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if err := admin.StartNodeManager(yarnsim.NodeSpec{Host: "g2", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if s := sim.NodeState("g2"); s != "DECOMMISSIONED" {
		t.Fatalf("an excluded host's NodeManager is %s, want turned away (DECOMMISSIONED)", s)
	}
	if err := admin.RestartNodeManager(t.Context(), "g2"); err != nil || sim.NodeState("g2") != "DECOMMISSIONED" {
		t.Fatalf("restart while excluded: %v, %s", err, sim.NodeState("g2"))
	}
	if err := writeFile(ex, `<hosts></hosts>`); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestartNodeManager(t.Context(), "g2"); err != nil || sim.NodeState("g2") != "RUNNING" {
		t.Fatalf("restart after the exclusion ended: %v, %s", err, sim.NodeState("g2"))
	}
	if err := sim.SetNodeState("g1", "DECOMMISSIONED"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestartNodeManager(t.Context(), "nope"); err == nil {
		t.Fatal("restart of an unknown host succeeded")
	}
	if err := admin.RestartNodeManager(t.Context(), "g1"); err != nil || sim.NodeState("g1") != "RUNNING" {
		t.Fatalf("restart of a decommissioned NodeManager: %v, %s", err, sim.NodeState("g1"))
	}
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
