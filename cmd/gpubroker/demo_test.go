package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// demoRun is "gpubroker demo" running in-process on loopback ports, with
// its API at hand.
type demoRun struct {
	t      *testing.T
	addr   string
	token  string
	errOut *strings.Builder
	cancel context.CancelFunc
	done   chan int
}

// startDemo runs "gpubroker demo" with args (and a loopback listener)
// until the test ends.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	d := &demoRun{t: t, errOut: &strings.Builder{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		e := env{stdout: pw, stderr: &lockedWriter{w: d.errOut}, getenv: func(string) string { return "" }}
		d.done <- run(ctx, e, append([]string{"demo", "--listen", "127.0.0.1:0"}, args...))
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "gpubroker demo: dashboard at "); ok {
			d.addr = s
		}
		if s, ok := strings.CutPrefix(line, "admin token: "); ok {
			d.token = s
			break
		}
	}
	if d.addr == "" || d.token == "" {
		t.Fatalf("the demo printed no address and token; stderr:\n%s", d.errOut.String())
	}
	go io.Copy(io.Discard, pr)
	return d
}

// get reads path from the demo's API into v and returns the status.
func (d *demoRun) get(path string, v any) int {
	d.t.Helper()
	req, _ := http.NewRequest("GET", d.addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// decisions counts the decisions of kind recorded so far.
func (d *demoRun) decisions(kind string) int {
	var out struct {
		Items []struct {
			Kind string `json:"kind"`
		} `json:"items"`
	}
	d.get("/api/v1/decisions?kind="+kind, &out)
	return len(out.Items)
}

// stop interrupts the demo and checks that it stops cleanly.
func (d *demoRun) stop() {
	d.t.Helper()
	d.cancel()
	select {
	case code := <-d.done:
		if code != 0 {
			d.t.Fatalf("demo exited %d; stderr:\n%s", code, d.errOut.String())
		}
	case <-time.After(30 * time.Second):
		d.t.Fatal("the demo did not stop within 30 s of being interrupted")
	}
}

// TestDemoEndToEnd runs "gpubroker demo" in-process on loopback ports and
// watches it through its own API: demand arrives from both simulated sides,
// the pool grows through the simulated AWS API, nodes join, work runs, and
// the loop records decisions; then it stops cleanly.
func TestDemoEndToEnd(t *testing.T) {
	d := startDemo(t, "--speed", "900", "--duration", "2m", "--log-level", "warn", "--verbose")
	if code := d.get("/", nil); code != http.StatusOK {
		t.Fatalf("dashboard: %d", code)
	}
	// Within 60 s: a scale-up decided, nodes joined and running work.
	deadline := time.Now().Add(60 * time.Second)
	var scaled, busy bool
	for time.Now().Before(deadline) && !(scaled && busy) {
		scaled = d.decisions("scale-up") > 0
		var capacity struct {
			Sides []struct {
				Side     string `json:"side"`
				GPUsBusy int    `json:"gpus_busy"`
			} `json:"sides"`
		}
		d.get("/api/v1/capacity", &capacity)
		for _, s := range capacity.Sides {
			if s.GPUsBusy > 0 {
				busy = true
			}
		}
		time.Sleep(time.Second)
	}
	if !scaled || !busy {
		t.Fatalf("after 60 s: scaled up %v, GPUs busy %v; stderr:\n%s", scaled, busy, d.errOut.String())
	}
	d.stop()
}

// TestDemoFleet runs "gpubroker demo --fleet 4": four owned hosts and no
// cloud. Within a minute YARN demand gets a host handed over from
// Kubernetes; nothing is ever bought or terminated, and /capacity shows
// the fleet pool with its hosts and hand-overs.
func TestDemoFleet(t *testing.T) {
	d := startDemo(t, "--fleet", "4", "--speed", "900", "--duration", "2m", "--log-level", "warn", "--verbose")
	type pool struct {
		Name         string         `json:"name"`
		Provider     string         `json:"provider"`
		Nodes        int            `json:"nodes"`
		NodesBySide  map[string]int `json:"nodes_by_side"`
		HandOvers24h int            `json:"hand_overs_24h"`
	}
	var capacity struct {
		Pools []pool `json:"pools"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		d.get("/api/v1/capacity", &capacity)
		if len(capacity.Pools) == 1 && capacity.Pools[0].HandOvers24h > 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if len(capacity.Pools) != 1 || capacity.Pools[0].Provider != "fleet" || capacity.Pools[0].Nodes != 4 || capacity.Pools[0].HandOvers24h == 0 {
		t.Fatalf("after 60 s: pools %+v, want the fleet of 4 hosts with a hand-over; stderr:\n%s", capacity.Pools, d.errOut.String())
	}
	t.Logf("fleet after the first hand-over: %+v", capacity.Pools[0])
	for _, kind := range []string{"scale-up", "scale-down", "replace"} {
		if n := d.decisions(kind); n > 0 {
			t.Errorf("%d %s decisions on a fleet without a cloud", n, kind)
		}
	}
	d.stop()
}
