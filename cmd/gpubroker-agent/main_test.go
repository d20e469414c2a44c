package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// brokerAPI is the real broker API (package api) on a real Postgres.
type brokerAPI struct {
	st     *store.Store
	srv    *httptest.Server
	tokens map[store.Role]string
	// away, while set, drops every connection without an answer, as a
	// broker that is restarting does.
	away     atomic.Bool
	attempts atomic.Int64
}

func newBroker(t *testing.T) *brokerAPI {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	b := &brokerAPI{st: st, tokens: map[store.Role]string{}}
	secret, _, err := st.CreateToken(ctx, "viewer", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	b.tokens[store.RoleViewer] = secret
	// The agent token is bound to the nodes the tests report as.
	secret, _, err = st.CreateAgentToken(ctx, "agent",
		[]string{"ip-10-0-1-7.ec2.internal", "gpu-7", "gpu-1", "n1", "cpu-1", "flag", "tls-1"}, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	b.tokens[store.RoleAgent] = secret
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), AuthCacheTTL: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.attempts.Add(1)
		if b.away.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *brokerAPI) tokenFile(t *testing.T, role store.Role) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(b.tokens[role]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// gpus is a go-nvml mock DGX H100 whose metric calls answer from fields
// the test may change while the agent runs.
type gpus struct {
	srv  *server.Server
	mu   sync.Mutex
	util [8]uint32
	ecc  [8]uint64
}

func newGPUs(util ...uint32) *gpus {
	g := &gpus{srv: dgxh100.New()}
	copy(g.util[:], util)
	for i, d := range g.srv.Devices {
		dev := d.(*server.Device)
		dev.MemoryInfo.Used = uint64(i) << 30
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: dev.MemoryInfo.Total, Used: uint64(i) << 30, Free: dev.MemoryInfo.Total - uint64(i)<<30}, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return nvml.Utilization{Gpu: g.util[i]}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 250000, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.ecc[i], nvml.SUCCESS
		}
	}
	// No event support on this node: the agent must still report.
	g.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	return g
}

func (g *gpus) set(f func(g *gpus)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

type result struct {
	code           int
	stdout, stderr string
}

// agentEnv returns an env whose NVML is lib (nil: the real loader) and
// whose environment is vars.
func agentEnv(lib nvml.Interface, vars map[string]string) (env, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	e := env{stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] },
		hostname: func() (string, error) { return "host-from-uname", nil }, openNVML: openNVMLLibrary, now: time.Now}
	if lib != nil {
		e.openNVML = func(string) nvml.Interface { return lib }
	}
	return e, &out, &errOut
}

func runAgent(t *testing.T, lib nvml.Interface, vars map[string]string, args ...string) result {
	t.Helper()
	e, out, errOut := agentEnv(lib, vars)
	code := run(context.Background(), e, args)
	return result{code, out.String(), errOut.String()}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func oneLine(t *testing.T, s string) string {
	t.Helper()
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "\n") {
		t.Fatalf("want exactly one line, got %q", s)
	}
	return s
}

func TestOnceDeliversTheReportToTheBroker(t *testing.T) {
	b := newBroker(t)
	g := newGPUs(0, 10, 20, 30, 40, 50, 60, 70)
	r := runAgent(t, g.srv, map[string]string{"NODE_NAME": "ip-10-0-1-7.ec2.internal"},
		"--broker", b.srv.URL, "--token-file", b.tokenFile(t, store.RoleAgent), "--once")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "reported node ip-10-0-1-7.ec2.internal: 8 GPUs, utilisation 0.35, healthy true"; oneLine(t, r.stdout) != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	rep, err := b.st.LatestReport(context.Background(), "ip-10-0-1-7.ec2.internal")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GPUs) != 8 || rep.DriverVersion != "550.54.15" || rep.AgentVersion != version || time.Since(rep.At) > time.Minute {
		t.Fatalf("stored report: %+v", rep)
	}
	for i, gr := range rep.GPUs {
		dev := g.srv.Devices[i].(*server.Device)
		if gr.UUID != dev.UUID || gr.Utilisation != float64(i)/10 || gr.MemoryUsed != uint64(i)<<30 ||
			gr.MemoryTotal != 80<<30 || gr.Temperature != 41 || gr.PowerWatts != 250 || gr.Product != "NVIDIA H100 80GB HBM3" {
			t.Fatalf("stored GPU %d: %+v", i, gr)
		}
	}
	if util, healthy, _ := rep.Health(); !near(util, 0.35) || !healthy {
		t.Fatalf("broker sees utilisation %g healthy %t", util, healthy)
	}
}

func TestUnhealthyGPUReachesTheBroker(t *testing.T) {
	b := newBroker(t)
	g := newGPUs(90, 90, 90, 90, 90, 90, 90, 90)
	g.set(func(g *gpus) { g.ecc[2] = 3 })
	r := runAgent(t, g.srv, nil, "--broker", b.srv.URL, "--token-file", b.tokenFile(t, store.RoleAgent), "--node", "gpu-7", "--once")
	if r.code != 0 || !strings.Contains(r.stdout, "healthy false; GPU 2 (") || !strings.Contains(r.stdout, "3 uncorrectable ECC errors") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	rep, err := b.st.LatestReport(context.Background(), "gpu-7")
	if err != nil {
		t.Fatal(err)
	}
	if _, healthy, reason := rep.Health(); healthy || !strings.Contains(reason, "uncorrectable ECC") {
		t.Fatalf("broker sees healthy %t %q", healthy, reason)
	}
}

func TestRunRetriesWhileTheBrokerIsAwayAndTheLatestSampleWins(t *testing.T) {
	b := newBroker(t)
	b.away.Store(true)
	g := newGPUs(5, 5, 5, 5, 5, 5, 5, 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, _, errOut := agentEnv(g.srv, nil)
	var mu sync.Mutex
	var waits []time.Duration
	e.sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		n := len(waits)
		mu.Unlock()
		switch n {
		case 3:
			// While the broker is away the GPUs get busy; then it returns.
			g.set(func(g *gpus) { g.util = [8]uint32{80, 80, 80, 80, 80, 80, 80, 80} })
			b.away.Store(false)
		case 4:
			cancel()
		}
		// Real waits would be seconds; the test only needs to yield.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
			return nil
		}
	}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"--broker", b.srv.URL, "--token-file", b.tokenFile(t, store.RoleAgent),
			"--node", "gpu-1", "--interval", "1m", "--min-backoff", "2s", "--max-backoff", "5s"})
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not stop after cancellation")
	}
	if code != 0 {
		t.Fatalf("exit %d after cancellation: %s", code, errOut)
	}
	// Three dropped attempts backed off 2s, 4s, 5s (cap), each jittered to
	// between half and all of it; the delivered one waits the interval.
	mu.Lock()
	defer mu.Unlock()
	bounds := []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second}
	if len(waits) != 4 || waits[3] != time.Minute {
		t.Fatalf("waits %v", waits)
	}
	for i, hi := range bounds {
		if waits[i] < hi/2 || waits[i] > hi {
			t.Fatalf("wait %d = %s, want between %s and %s (all: %v)", i+1, waits[i], hi/2, hi, waits)
		}
	}
	if n := b.attempts.Load(); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	rep, err := b.st.LatestReport(context.Background(), "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	if util, _, _ := rep.Health(); !near(util, 0.8) {
		t.Fatalf("stored utilisation %g, want the latest sample's 0.8", util)
	}
	if logs := errOut.String(); !strings.Contains(logs, "report not delivered; backing off") || !strings.Contains(logs, "broker reachable again") {
		t.Fatalf("log:\n%s", logs)
	}
}

func TestRefusedTokens(t *testing.T) {
	b := newBroker(t)
	for _, c := range []struct {
		name, token, want string
	}{
		{"unknown token", "gbk_not_a_real_token", "401"},
		{"viewer token", b.tokens[store.RoleViewer], "403"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(p, []byte(c.token), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runAgent(t, newGPUs().srv, nil, "--broker", b.srv.URL, "--token-file", p, "--node", "n1", "--once")
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			line := lines[len(lines)-1]
			if r.code != 1 || strings.Contains(r.stderr, c.token) || !strings.Contains(line, c.want) || strings.Contains(line, c.token) {
				t.Fatalf("exit %d, stderr %q", r.code, line)
			}
		})
	}
	if _, err := b.st.LatestReport(context.Background(), "n1"); err == nil {
		t.Fatal("a refused report was stored")
	}
}

func TestWithoutTheNVIDIADriver(t *testing.T) {
	b := newBroker(t)
	tok := b.tokenFile(t, store.RoleAgent)
	// The real NVML loader (nil lib), pointed at a library that is not there.
	r := runAgent(t, nil, nil, "--broker", b.srv.URL, "--token-file", tok, "--node", "cpu-1",
		"--nvml-library", "/nonexistent/libnvidia-ml.so.1")
	line := oneLine(t, r.stderr)
	if r.code != 1 || !strings.Contains(line, "no NVIDIA driver") || !strings.Contains(line, "/nonexistent/libnvidia-ml.so.1") ||
		!strings.Contains(line, "--allow-no-gpu") {
		t.Fatalf("exit %d, stderr %q", r.code, line)
	}

	r = runAgent(t, nil, nil, "--broker", b.srv.URL, "--token-file", tok, "--node", "cpu-1",
		"--nvml-library", "/nonexistent/libnvidia-ml.so.1", "--allow-no-gpu", "--once")
	if r.code != 0 || oneLine(t, r.stdout) != "reported node cpu-1: 0 GPUs, utilisation 0.00, healthy true" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	rep, err := b.st.LatestReport(context.Background(), "cpu-1")
	if err != nil || len(rep.GPUs) != 0 || rep.DriverVersion != "" {
		t.Fatalf("stored %+v, %v", rep, err)
	}
}

func TestUsage(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		vars map[string]string
		args []string
		want string
	}{
		{"no broker", nil, []string{"--token-file", tok}, "--broker"},
		{"no token file", nil, []string{"--broker", "http://b"}, "--token-file"},
		{"missing token file", nil, []string{"--broker", "http://b", "--token-file", tok + ".missing"}, "--token-file"},
		{"bad broker", nil, []string{"--broker", "gpubroker:80", "--token-file", tok}, "--broker: must be an http or https URL"},
		{"short interval", nil, []string{"--broker", "http://b", "--token-file", tok, "--interval", "10ms"}, "--interval"},
		{"backoff order", nil, []string{"--broker", "http://b", "--token-file", tok, "--min-backoff", "1m", "--max-backoff", "1s"}, "--min-backoff"},
		{"unknown flag", nil, []string{"--brokr", "http://b"}, "flag provided but not defined: -brokr"},
		{"argument", nil, []string{"--broker", "http://b", "--token-file", tok, "extra"}, "takes no arguments"},
		{"log level", nil, []string{"--broker", "http://b", "--token-file", tok, "--log-level", "loud"}, "--log-level"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runAgent(t, newGPUs().srv, c.vars, c.args...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q, want 2 and %q", r.code, r.stderr, c.want)
			}
		})
	}
	if r := runAgent(t, nil, nil, "--version"); r.code != 0 || r.stdout != "gpubroker-agent dev\n" {
		t.Fatalf("--version: %d %q", r.code, r.stdout)
	}
}

func TestNodeNameAndBrokerDefaults(t *testing.T) {
	e, _, _ := agentEnv(nil, map[string]string{"GPUBROKER_URL": "http://from-env"})
	o, err := parseArgs(e, []string{"--token-file", "t"})
	if err != nil || o.node != "host-from-uname" || o.broker != "http://from-env" || o.interval != 15*time.Second {
		t.Fatalf("%+v %v", o, err)
	}
	e, _, _ = agentEnv(nil, map[string]string{"NODE_NAME": "from-downward-api"})
	if o, err := parseArgs(e, []string{"--broker", "http://b", "--token-file", "t"}); err != nil || o.node != "from-downward-api" {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err := parseArgs(e, []string{"--broker", "http://b", "--token-file", "t", "--node", "flag"}); err != nil || o.node != "flag" {
		t.Fatalf("%+v %v", o, err)
	}
}

func TestHTTPSBrokerWithPrivateCA(t *testing.T) {
	b := newBroker(t)
	// The same broker API behind TLS with a certificate of its own CA.
	tlsSrv := httptest.NewTLSServer(b.srv.Config.Handler)
	t.Cleanup(tlsSrv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := b.tokenFile(t, store.RoleAgent)
	r := runAgent(t, newGPUs().srv, nil, "--broker", tlsSrv.URL, "--token-file", tok, "--node", "tls-1", "--once")
	if r.code != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("without --ca-file: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runAgent(t, newGPUs().srv, nil, "--broker", tlsSrv.URL, "--token-file", tok, "--node", "tls-1", "--once", "--ca-file", ca)
	if r.code != 0 {
		t.Fatalf("with --ca-file: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := b.st.LatestReport(context.Background(), "tls-1"); err != nil {
		t.Fatal(err)
	}
	r = runAgent(t, newGPUs().srv, nil, "--broker", tlsSrv.URL, "--token-file", tok, "--once", "--ca-file", tok)
	if r.code != 2 || !strings.Contains(r.stderr, "holds no PEM certificate") {
		t.Fatalf("bad --ca-file: exit %d, stderr %q", r.code, r.stderr)
	}
}
