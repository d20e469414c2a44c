package yarn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// answers is what the fuzzed RM serves: one body per REST path family.
type answers struct {
	mu                                       sync.Mutex
	apps, nodes, sched, attempts, containers []byte
}

func (a *answers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	var b []byte
	switch p := r.URL.Path; {
	case p == "/ws/v1/cluster/apps":
		b = a.apps
	case p == "/ws/v1/cluster/nodes":
		b = a.nodes
	case p == "/ws/v1/cluster/scheduler":
		b = a.sched
	case strings.HasPrefix(p, "/ws/v1/cluster/apps/") && strings.HasSuffix(p, "/appattempts"):
		b = a.attempts
	case strings.HasPrefix(p, "/ws/v1/cluster/apps/") && strings.HasSuffix(p, "/containers"):
		b = a.containers
	}
	a.mu.Unlock()
	if b == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// FuzzObserve serves fuzzed RM answers (apps, nodes, scheduler, app
// attempts, containers) to the real client. Seeds are the answers recorded
// from Hadoop 3.3.6 and 3.5.0 and the version quirks. Properties: an error
// wraps broker.ErrStale and names the REST path; an observation keeps its
// documented order (apps by id, nodes by host, parent queues first), its
// counts are not negative, it survives a JSON round trip unchanged, and the
// same answers observed again by a fresh client give the same observation.
func FuzzObserve(f *testing.F) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for _, v := range []string{"hadoop-3.3.6/", "hadoop-3.5.0/"} {
		f.Add(read(v+"apps.json"), read(v+"nodes.json"), read(v+"scheduler.json"), read(v+"appattempts-0001.json"), read(v+"containers-0001.json"))
		f.Add(read(v+"apps-running.json"), read(v+"nodes-running.json"), read(v+"scheduler.json"), read(v+"appattempts-0002.json"), read(v+"containers-0002.json"))
		f.Add(read(v+"apps.json"), read(v+"nodes.json"), read(v+"scheduler.json"), read(v+"appattempts-0001.json"), read(v+"containers-app-gone.json"))
	}
	f.Add(read("quirks/apps-null.json"), read("quirks/nodes-null.json"), read("quirks/scheduler-fair.json"), []byte(`{}`), []byte(`{}`))
	f.Add(read("quirks/apps-single.json"), read("quirks/nodes-old.json"), read("quirks/scheduler-capacity-single.json"), []byte(`{"appAttempts":null}`), []byte(`{"containers":null}`))
	f.Add(read("quirks/apps-mixed.json"), read("quirks/nodes-old.json"), read("quirks/scheduler-capacity-single.json"), []byte(`{}`), []byte(`{}`))
	f.Add([]byte(`{"apps":{"app":[{"id":1e400}]}}`), []byte(`{"nodes":{"node":{}}}`), []byte(`{"scheduler":{"schedulerInfo":{"type":"fifoScheduler"}}}`), []byte(`[`), []byte(`null`))

	ans := &answers{}
	srv := httptest.NewServer(ans)
	f.Cleanup(srv.Close)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	observe := func(t *testing.T) (*yarn.Observation, error) {
		c, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}, Now: func() time.Time { return now }, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c.Observe(context.Background())
	}
	f.Fuzz(func(t *testing.T, apps, nodes, sched, attempts, containers []byte) {
		ans.mu.Lock()
		ans.apps, ans.nodes, ans.sched, ans.attempts, ans.containers = apps, nodes, sched, attempts, containers
		ans.mu.Unlock()
		obs, err := observe(t)
		if err != nil {
			if !errors.Is(err, broker.ErrStale) {
				t.Fatalf("error does not wrap broker.ErrStale: %v", err)
			}
			if !strings.Contains(err.Error(), "/ws/v1/cluster/") {
				t.Fatalf("error does not name the RM path: %v", err)
			}
			return
		}
		if !slices.IsSortedFunc(obs.Apps, func(a, b yarn.App) int { return strings.Compare(a.ID, b.ID) }) {
			t.Errorf("apps not in id order")
		}
		if !slices.IsSortedFunc(obs.Nodes, func(a, b yarn.Node) int { return strings.Compare(a.Host, b.Host) }) {
			t.Errorf("nodes not in host order")
		}
		// Parents come before their children. A parent the answer does
		// not name (a root queue without queueName) is not listed at all,
		// which is no ordering breach.
		listed, seen := map[string]bool{}, map[string]bool{}
		for _, q := range obs.Queues {
			listed[q.Path] = true
		}
		for _, q := range obs.Queues {
			if i := strings.LastIndex(q.Path, "."); i > 0 && listed[q.Path[:i]] && !seen[q.Path[:i]] {
				t.Errorf("queue %q comes before its parent", q.Path)
			}
			seen[q.Path] = true
		}
		for _, a := range obs.Apps {
			if a.PendingContainers() < 0 || a.PendingGPUs() < 0 {
				t.Errorf("app %s: pending %d containers, %d GPUs", a.ID, a.PendingContainers(), a.PendingGPUs())
			}
		}
		for _, n := range obs.Nodes {
			if n.GPUsTotal < 0 || n.GPUsUsed < 0 || n.GPUsAvailable < 0 || n.Containers < 0 {
				t.Errorf("node %s: negative count: %+v", n.Host, n)
			}
		}
		b, err := json.Marshal(obs)
		if err != nil {
			t.Fatalf("encode observation: %v", err)
		}
		var back yarn.Observation
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decode observation: %v", err)
		}
		if d := cmp.Diff(obs, &back, cmpTimes, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("observation changes in a JSON round trip (-before +after):\n%s", d)
		}
		again, err := observe(t)
		if err != nil {
			t.Fatalf("the same answers failed the second time: %v", err)
		}
		if d := cmp.Diff(obs, again, cmpTimes); d != "" {
			t.Errorf("same answers, different observation (-first +second):\n%s", d)
		}
	})
}

// cmpTimes compares instants (omitempty turns an empty list into none), not time.Time's representation.
var cmpTimes = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })
