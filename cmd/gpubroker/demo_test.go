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

// TestDemoEndToEnd runs "gpubroker demo" in-process on loopback ports and
// watches it through its own API: demand arrives from both simulated sides,
// the pool grows through the simulated AWS API, nodes join, work runs, and
// the loop records decisions; then it stops cleanly.
func TestDemoEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		e := env{stdout: pw, stderr: &lockedWriter{w: &errOut}, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"demo", "--listen", "127.0.0.1:0", "--speed", "900", "--duration", "2m", "--log-level", "warn", "--verbose"})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var addr, token string
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "gpubroker demo: dashboard at "); ok {
			addr = s
		}
		if s, ok := strings.CutPrefix(line, "admin token: "); ok {
			token = s
			break
		}
	}
	if addr == "" || token == "" {
		t.Fatalf("the demo printed no address and token; stderr:\n%s", errOut.String())
	}
	go io.Copy(io.Discard, pr)

	get := func(path string, v any) int {
		req, _ := http.NewRequest("GET", addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if v != nil {
			json.NewDecoder(resp.Body).Decode(v)
		}
		return resp.StatusCode
	}
	if code := get("/", nil); code != http.StatusOK {
		t.Fatalf("dashboard: %d", code)
	}
	// Within 60 s: a scale-up decided, nodes joined and running work.
	deadline := time.Now().Add(60 * time.Second)
	var scaled, busy bool
	for time.Now().Before(deadline) && !(scaled && busy) {
		var decisions struct {
			Items []struct {
				Kind   string `json:"kind"`
				Reason string `json:"reason"`
			} `json:"items"`
		}
		get("/api/v1/decisions?kind=scale-up", &decisions)
		scaled = len(decisions.Items) > 0
		var capacity struct {
			Sides []struct {
				Side     string `json:"side"`
				GPUsBusy int    `json:"gpus_busy"`
			} `json:"sides"`
		}
		get("/api/v1/capacity", &capacity)
		for _, s := range capacity.Sides {
			if s.GPUsBusy > 0 {
				busy = true
			}
		}
		time.Sleep(time.Second)
	}
	if !scaled || !busy {
		t.Fatalf("after 60 s: scaled up %v, GPUs busy %v; stderr:\n%s", scaled, busy, errOut.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("demo exited %d; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30 s of being interrupted")
	}
}
