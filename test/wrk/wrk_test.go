package wrk_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
	"github.com/gpubroker/gpubroker/test/servetest"
)

var (
	full     = flag.Bool("wrk.full", false, "the production size: 50,000 pending demands, 5,000 nodes, 200 clients, 10s per route")
	demandN  = flag.Int("wrk.demand", 5000, "pending demand rows to seed (-wrk.full: 50000)")
	nodesN   = flag.Int("wrk.nodes", 500, "nodes to seed (-wrk.full: 5000)")
	clients  = flag.Int("wrk.clients", 50, "concurrent connections (-wrk.full: 200)")
	binary   = flag.String("wrk.bin", "", "drive this gpubroker binary instead of building the tree's (e.g. an older build, for a before figure)")
	duration = flag.Duration("wrk.duration", time.Second, "how long wrk drives each route (-wrk.full: 10s)")
	only     = flag.String("wrk.routes", "", "drive only the routes this regular expression matches (e.g. nodes)")
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

const config = `
api:
  listen: "127.0.0.1:0"
cloud:
  provider: aws
  region: us-east-1
  endpoint: http://127.0.0.1:9
pools:
  - name: gpu-training-group
    group: gpu-training-group
    gpu_model: H100
    gpus_per_node: 8
    min_nodes: 0
    max_nodes: 10000
    sides: shared
`

// TestReadAPIUnderWrk seeds the store, starts gpubroker serve on it (no
// YARN or Kubernetes: its ticks fail to observe, and each still starts a
// new read-model generation, as on a live leader), and drives each read
// route with wrk three times: plain, accepting gzip (as browsers do), and
// revalidating with the answer's ETag (If-None-Match, answered 304). It logs p50, p99 and requests per second
// per route and the server's peak RSS; it fails on any error answer.
func TestReadAPIUnderWrk(t *testing.T) {
	if *full {
		*demandN, *nodesN, *clients, *duration = 50000, 5000, 200, 10*time.Second
	}
	wrk := servetest.Install(t, "wrk")
	bin := *binary
	if bin == "" {
		bin = servetest.Build(t)
	}
	dbURL := pg.NewDatabase(t, store.Migrate)
	t0 := time.Now()
	viewer := seed(t, dbURL)
	t.Logf("seeded %d pending demands and %d nodes in %s", *demandN, *nodesN, time.Since(t0).Round(time.Millisecond))
	srv := servetest.Start(t, bin, config, dbURL)
	base := srv.URL

	auth := "Authorization: Bearer " + viewer
	// /nodes is its default page (500 nodes; the whole list from a
	// binary before paging) and its largest.
	routes := []string{"/api/v1/capacity", "/api/v1/demand?limit=100", "/api/v1/demand?tenant=tenant-3&min_wait=1m&limit=50",
		"/api/v1/nodes", "/api/v1/nodes?limit=1000"}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			t.Fatalf("-wrk.routes: %v", err)
		}
		routes = slices.DeleteFunc(routes, func(r string) bool { return !re.MatchString(r) })
	}
	t.Logf("wrk %s, %d connections, %s per route, %d demands, %d nodes", wrkVersion(wrk), *clients, *duration, *demandN, *nodesN)
	t.Logf("%-72s %9s %9s %8s %8s", "route", "p50", "p99", "req/s", "MB/s")
	for _, route := range routes {
		for _, mode := range []string{"plain", "gzip", "gzip, If-None-Match"} {
			enc := "identity"
			if mode != "plain" {
				enc = "gzip"
			}
			// Taken just before the run: the answer changes when a tick
			// does (at, wait_seconds), and a tick runs every 5s.
			etag, size := answer(t, base+route, viewer, enc)
			if etag == "" && *binary == "" {
				t.Fatalf("GET %s: no ETag", route)
			}
			args := []string{"-t", "2", "-c", strconv.Itoa(*clients), "-d", duration.String(), "--latency", "--timeout", "30s",
				"-H", auth, "-H", "Accept-Encoding: " + enc}
			if mode == "gzip, If-None-Match" && etag != "" {
				args = append(args, "-H", "If-None-Match: "+etag)
			}
			name := route + " (" + mode + ")"
			ctx, cancel := context.WithTimeout(context.Background(), *duration+time.Minute)
			res, err := exec.CommandContext(ctx, wrk, append(args, base+route)...).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("wrk %s: %v\n%s", name, err, res)
			}
			r := parseWrk(t, string(res))
			if r.non2xx > 0 || r.socketErrs != "" {
				t.Errorf("%s: %d non-2xx/3xx answers, socket errors %q\n%s", name, r.non2xx, r.socketErrs, res)
			}
			t.Logf("%-72s %9s %9s %8.0f %8.1f  (answer %d bytes; load average %s)", name, r.p50, r.p99, r.rps, r.mbps, size, loadAverage())
		}
	}
	t.Logf("gpubroker serve peak RSS %d MiB", vmHWM(t, srv.Cmd.Process.Pid)>>20)
}

// seed writes 10 tenants, nodes, pending demand with wait reasons, and
// returns a viewer token.
func seed(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	const tenants = 10
	for i := range tenants {
		if _, err := st.CreateTenant(ctx, broker.Tenant{Name: fmt.Sprintf("tenant-%d", i), MaxGPUs: 1 << 20, Weight: 1,
			Namespaces: []string{fmt.Sprintf("ns-%d", i)}, YARNQueues: []string{fmt.Sprintf("root.q%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "gpu-training-group", Group: "gpu-training-group", Provider: "aws",
		GPUModel: "H100", GPUsPerNode: 8, MaxNodes: 10000, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	nodes := make([]broker.Node, *nodesN)
	for i := range nodes {
		owner := []broker.Owner{broker.OwnerYARN, broker.OwnerK8s}[i%2]
		nodes[i] = broker.Node{Name: fmt.Sprintf("ip-10-1-%d-%d", i/250, i%250), Pool: "gpu-training-group", Owner: owner,
			Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 8, GPUsAllocated: i % 9, Utilisation: float64(i%9) / 8, Healthy: true}
	}
	if err := st.UpsertNodes(ctx, nodes, now); err != nil {
		t.Fatal(err)
	}
	var waits []broker.Wait
	for _, src := range broker.Sources {
		var ds []broker.Demand
		for i := range *demandN / 2 {
			d := broker.Demand{Source: src, Key: fmt.Sprintf("%s-%d", src, i), Name: fmt.Sprintf("job-%d", i),
				Tenant: fmt.Sprintf("tenant-%d", i%tenants), Priority: int64(i % 5 * 1000), GPUsPerUnit: 1 + i%4, Units: 1 + i%2}
			ds = append(ds, d)
			waits = append(waits, broker.Wait{Demand: d.ID(), Reason: []broker.WaitReason{broker.WaitInFlight, broker.WaitQuota, broker.WaitPoolMax}[i%3], Detail: "seeded"})
		}
		if _, err := st.ApplyObservation(ctx, store.Observation{Source: src, At: now.Add(-10 * time.Minute), Demand: ds}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetWaitReasons(ctx, waits); err != nil {
		t.Fatal(err)
	}
	secret, _, err := st.CreateToken(ctx, "wrk", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// answer fetches route once in encoding: it must be 200. It returns the
// ETag (empty from a binary without the read model) and the size on the
// wire.
func answer(t *testing.T, url, token, encoding string) (etag string, size int) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept-Encoding", encoding) // set: the transport passes the body on as sent
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, ETag %q: %s", url, res.Status, res.Header.Get("ETag"), b.String())
	}
	return res.Header.Get("ETag"), b.Len()
}

type wrkResult struct {
	p50, p99   string
	rps, mbps  float64
	non2xx     int
	socketErrs string
}

var (
	reP50    = regexp.MustCompile(`(?m)^\s+50%\s+(\S+)`)
	reP99    = regexp.MustCompile(`(?m)^\s+99%\s+(\S+)`)
	reRPS    = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	reXfer   = regexp.MustCompile(`(?m)^Transfer/sec:\s+([0-9.]+)(\w+)`)
	reNon2xx = regexp.MustCompile(`(?m)^\s+Non-2xx or 3xx responses:\s+(\d+)`)
	reSock   = regexp.MustCompile(`(?m)^\s+Socket errors:\s+(.*)$`)
)

func parseWrk(t *testing.T, out string) wrkResult {
	t.Helper()
	var r wrkResult
	p50, p99, rps := reP50.FindStringSubmatch(out), reP99.FindStringSubmatch(out), reRPS.FindStringSubmatch(out)
	if p50 == nil || p99 == nil || rps == nil {
		t.Fatalf("cannot read wrk's output:\n%s", out)
	}
	r.p50, r.p99 = p50[1], p99[1]
	r.rps, _ = strconv.ParseFloat(rps[1], 64)
	if m := reXfer.FindStringSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "KB":
			v /= 1024
		case "GB":
			v *= 1024
		case "B":
			v /= 1 << 20
		}
		r.mbps = v
	}
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(m[1])
	}
	if m := reSock.FindStringSubmatch(out); m != nil {
		r.socketErrs = m[1]
	}
	return r
}

func wrkVersion(wrk string) string {
	out, _ := exec.Command(wrk, "--version").CombinedOutput() // exits 1
	line, _, _ := strings.Cut(string(out), "[")
	return strings.TrimSpace(line)
}

// loadAverage is the machine's one-minute load average: the figures of a
// shared machine are read against it.
func loadAverage() string {
	raw, _ := os.ReadFile("/proc/loadavg") // Linux; empty elsewhere
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// vmHWM is a process's peak resident set size in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
