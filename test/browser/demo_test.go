package browser_test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDashboardAgainstDemo builds the gpubroker binary, runs "gpubroker
// demo" as a user would (its own private PostgreSQL, the simulated YARN,
// Kubernetes and AWS, the workload), opens the dashboard it prints in
// headless Chromium, waits until nodes, charts and decisions show live
// data, saves a screenshot, then interrupts the demo and checks that it
// stops cleanly and frees its port.
func TestDashboardAgainstDemo(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "gpubroker")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpubroker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpubroker: %v\n%s", err, out)
	}
	demo := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--speed", "900", "--duration", "5m", "--log-level", "warn")
	stdout, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	demo.Stderr = &stderr
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		demo.Process.Kill()
	})
	lines := bufio.NewScanner(stdout)
	var addr, token string
	for lines.Scan() {
		line := lines.Text()
		if s, ok := strings.CutPrefix(line, "gpubroker demo: dashboard at "); ok {
			addr = s
		}
		if s, ok := strings.CutPrefix(line, "admin token: "); ok {
			token = s
			break
		}
	}
	if addr == "" || token == "" {
		t.Fatalf("the demo printed no address and token; stderr:\n%s", stderr.String())
	}
	var rest strings.Builder
	go func() {
		for lines.Scan() {
			rest.WriteString(lines.Text() + "\n")
		}
		exited <- demo.Wait()
	}()

	d := startDriver(t)
	d.open(addr + "/#token=" + token)
	p := waitPage(t, d, 90*time.Second, "the demo's live nodes, charts and decisions", func(p page) bool {
		return p.Loaded >= 2 && len(p.Tiles) > 0 && len(p.Decisions) > 0 && len(p.ChartPoints) == 3 &&
			p.ChartPoints[0]+p.ChartPoints[1] > 2 && strings.Contains(p.Status, "leader")
	})
	if !containsAll(p.Decisions, "scale-up") {
		t.Errorf("decisions shown: %q, want a scale-up among them", p.Decisions)
	}
	if !containsAll(p.Pools, "gpu-training-group") {
		t.Errorf("pools: %q", p.Pools)
	}
	dir, err := os.MkdirTemp("", "gpubroker-demo-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("demo dashboard: %d nodes, %d decisions, chart points %v; screenshot %s",
		len(p.Tiles), len(p.Decisions), p.ChartPoints, d.screenshot(dir, "demo-1366x768.png"))

	// Ctrl-C: the demo stops by itself and frees its port.
	if err := demo.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exit: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30 s of Ctrl-C")
	}
	if !strings.Contains(rest.String(), "gpubroker demo: stopped") {
		t.Errorf("no stop message; stdout after start:\n%s", rest.String())
	}
	host := strings.TrimPrefix(addr, "http://")
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the demo stopped", host)
	}
}
