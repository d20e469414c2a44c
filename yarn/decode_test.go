package yarn

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// The reference decode: encoding/json into the wire.go shapes, then the
// conversion the client used before the fast decoders.

func refApps(b []byte) ([]App, error) {
	var r appsResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return convertApps(&r), nil
}

func refNodes(b []byte) ([]Node, error) {
	var r nodesResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return convertNodes(&r), nil
}

func refContainers(b []byte) ([]Container, error) {
	var r containersResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return convertContainers(r.all()), nil
}

func fastApps(b []byte) ([]App, error) {
	var r appsAnswer
	err := r.decodeAnswer(b)
	return r.apps, err
}

func fastNodes(b []byte) ([]Node, error) {
	var r nodesAnswer
	err := r.decodeAnswer(b)
	return r.nodes, err
}

func fastContainers(b []byte) ([]Container, error) {
	var r containersAnswer
	err := r.decodeAnswer(b)
	return r.containers, err
}

// same checks that the fast decode of b equals the reference one, error
// or not (nil and empty slices told apart).
func same[T any](t *testing.T, name string, b []byte, ref, fast func([]byte) (T, error)) {
	t.Helper()
	want, werr := ref(b)
	got, gerr := fast(b)
	if (werr == nil) != (gerr == nil) {
		t.Errorf("%s: reference error %v, fast error %v", name, werr, gerr)
		return
	}
	if werr != nil {
		return
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: fast decode differs from encoding/json (-want +got):\n%s", name, d)
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) != string(gj) {
		t.Errorf("%s: fast decode renders\n%s\nwant\n%s", name, gj, wj)
	}
}

// TestFastDecodeMatchesReference decodes every recorded RM answer (real
// Hadoop 3.3.6 and 3.5.0, the quirks), yarnsim's answers and hand-written
// quirky, malformed and truncated ones with both the fast decoders and
// encoding/json into the wire shapes, and requires the same apps, nodes
// and containers, or an error from both.
func TestFastDecodeMatchesReference(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded answers: %v", err)
	}
	var apps, nodes, containers int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch base := filepath.Base(f); {
		case strings.HasPrefix(base, "apps"):
			apps++
			same(t, f, b, refApps, fastApps)
		case strings.HasPrefix(base, "nodes"):
			nodes++
			same(t, f, b, refNodes, fastNodes)
		case strings.HasPrefix(base, "containers"):
			containers++
			same(t, f, b, refContainers, fastContainers)
		}
		// Every cut of a recorded answer fails both ways alike.
		if len(b) < 20000 {
			for n := 0; n < len(b); n += 1 + len(b)/97 {
				same(t, fmt.Sprintf("%s[:%d]", f, n), b[:n], refApps, fastApps)
				same(t, fmt.Sprintf("%s[:%d]", f, n), b[:n], refNodes, fastNodes)
				same(t, fmt.Sprintf("%s[:%d]", f, n), b[:n], refContainers, fastContainers)
			}
		}
	}
	if apps < 6 || nodes < 6 || containers < 4 {
		t.Fatalf("found %d apps, %d nodes, %d containers answers; want the recorded ones", apps, nodes, containers)
	}

	// yarnsim's answers: running apps with containers, pending ones with
	// host and rack asks, nodes of several states.
	sim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.a"}, {Path: "root.b"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("n%d.example", i), GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range 20 {
		r := yarnsim.RequestSpec{Containers: 1 + i%3, GPUs: 1 << (i % 3)}
		if i%4 == 0 {
			r.Hosts = []string{fmt.Sprintf("n%d.example", i%6)}
		}
		id, err := sim.Submit(yarnsim.AppSpec{Name: fmt.Sprintf("app-%d", i), Queue: []string{"a", "b"}[i%2], Priority: int64(i % 5), Requests: []yarnsim.RequestSpec{r}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	get := func(p string) []byte {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := get(PathApps)
	same(t, "yarnsim apps", b, refApps, fastApps)
	same(t, "yarnsim nodes", get(PathNodes), refNodes, fastNodes)
	got, _ := fastApps(b)
	listed := 0
	for _, a := range got {
		if !a.HoldsGPUs() {
			continue
		}
		var at appAttemptsResponse
		if err := json.Unmarshal(get(fmt.Sprintf(PathAppAttempts, a.ID)), &at); err != nil || at.AppAttempts == nil {
			t.Fatalf("attempts of %s: %v", a.ID, err)
		}
		for _, x := range at.AppAttempts.AppAttempt {
			cb := get(fmt.Sprintf(PathAttemptContainers, a.ID, x.AppAttemptID))
			same(t, "yarnsim containers of "+a.ID, cb, refContainers, fastContainers)
			if cs, _ := fastContainers(cb); len(cs) > 0 {
				listed++
			}
		}
	}
	if listed == 0 {
		t.Fatalf("no yarnsim app listed containers (of %d submitted)", len(ids))
	}

	// Hand-written renderings.
	for i, b := range []string{
		`{"apps":null}`, `{"apps":{}}`, `{}`, `null`, `{"apps":{"app":[]}}`, `{"apps":{"app":{}}}`,
		`{"APPS":{"App":{"ID":"x","State":"RUNNING","Priority":"7","RunningContainers":"2","resourceInfo":{"resourceUsagesByPartition":{"partitionName":"","used":{"resourceInformations":{"resourceInformation":{"name":"yarn.io/gpu","value":"3"}}}}}}}}`,
		`{"apps":{"app":{"id":"a\u00e9\"b","state":"ACCEPTED","applicationTags":"x,Y","startedTime":1.7E12,"resourceRequests":{"priority":{"priority":"4"},"resourceName":"*","numContainers":"2","relaxLocality":true,"executionTypeRequest":{"executionType":"OPPORTUNISTIC"},"capability":{"memory":"10","vCores":"2","resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":1},{"name":"yarn.io/gpu","value":5}]}}}}}}`,
		`{"apps":{"app":[{"id":"r","state":"RUNNING","runningContainers":1,"resourceInfo":null},{"id":"s","state":"RUNNING","runningContainers":1},{"id":"t","state":"RUNNING","runningContainers":1,"resourceInfo":{"resourceUsagesByPartition":[{"partitionName":"x","used":null},{"used":{"resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":2}]}}}]}}]}}`,
		`{"apps":{"app":[{"id":"u","state":"RUNNING","runningContainers":1,"resourceInfo":{"resourceUsagesByPartition":[{"used":{"resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":"x"}]}}}]}}]}}`,
		`{"apps":{"app":[{"id":"big","state":"RUNNING","priority":9223372036854775807,"allocatedMB":-5}]}}  `,
		`{"apps":{"app":[{"id":1}]}}`, `{"apps":{"app":[{"id":"x","priority":true}]}}`, `{"apps":{"app":[{"id":"x"}]}} x`,
		`{"apps":{"app":[{"id":"x",}]}}`, `{"apps":[]}`, `[]`, ``, `{"apps":{"app":[{"id":"x","priority":""}]}}`,
	} {
		same(t, fmt.Sprintf("apps case %d %s", i, b), []byte(b), refApps, fastApps)
	}
	for i, b := range []string{
		`{"nodes":null}`, `{"nodes":{}}`, `{"nodes":{"node":{}}}`,
		`{"nodes":{"node":[{"id":"h1:1","state":"RUNNING","nodeLabels":"gpu","usedResource":{"resourceInformations":{"resourceInformation":{"name":"yarn.io/gpu","value":"1"}}},"availableResource":{"resourceInformations":{"resourceInformation":{"name":"yarn.io/gpu","value":3}}}},` +
			`{"nodeHostName":"h1","id":"h1:2","state":"LOST","nodeLabels":[null,"",  "a"],"totalResource":{"resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":8}]}}},` +
			`{"nodeHostName":"h0","id":"h0:2","state":"RUNNING","lastHealthUpdate":"1700000000000","numContainers":"3","totalResource":null}]}}`,
		`{"nodes":{"node":[{"id":"h1:1","nodeLabels":[1]}]}}`, `{"nodes":{"node":[{"id":"h1:1","totalResource":[]}]}}`,
	} {
		same(t, fmt.Sprintf("nodes case %d %s", i, b), []byte(b), refNodes, fastNodes)
	}
	for i, b := range []string{
		`{}`, `{"container":{}}`, `{"containers":{"container":[]}}`,
		`{"container":{"containerId":"c1","nodeId":"h:1","allocatedResources":{"entry":{"key":"yarn.io/gpu","value":"2"}}},"containers":{"container":[{"containerId":"c2","assignedNodeId":"g:2","containerState":"RUNNING","allocatedMB":"5","priority":"3","startedTime":"1700000000000","allocatedResources":{"entry":[{"key":"memory-mb","value":"5"},{"key":"yarn.io/gpu","value":4}]}},{"containerId":"c3","containerState":"COMPLETE"}]}}`,
		`{"container":[{"containerId":"c1","allocatedResources":{"entry":[{"key":"yarn.io/gpu","value":"x"}]}}]}`,
	} {
		same(t, fmt.Sprintf("containers case %d %s", i, b), []byte(b), refContainers, fastContainers)
	}
}

// convertContainers is the mapping attemptContainers made of the wire
// shapes before the fast decoder.
func convertContainers(all []containerInfo) []Container {
	out := make([]Container, 0, len(all))
	for _, w := range all {
		switch w.ContainerState {
		case "COMPLETE":
			continue
		}
		node := w.NodeID
		if node == "" {
			node = w.AssignedNodeID
		}
		host, _, _ := strings.Cut(node, ":")
		ct := Container{
			ID: w.ContainerID, Host: host, NodeID: node, Priority: int32(w.Priority),
			MemoryMB: int64(w.AllocatedMB), VCores: int64(w.AllocatedVCores),
			Started: millis(w.StartedTime), State: w.ContainerState,
		}
		if g, ok := w.AllocatedResources[GPUResource]; ok {
			ct.GPUs = int(g)
		}
		out = append(out, ct)
	}
	return out
}
