package hadoop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/fleet"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestBroker runs the broker's own YARN decisions — the real runtime with
// the yarn Side and Decommissioner, a PostgreSQL ledger and an in-test
// pool whose instances are the NodeManager hosts — against yarnsim and
// every Hadoop version, one cluster per target and the scenarios in
// order on it:
//
//   - LeavesBusyNodeAlone: idle reclaim decommissions the idle node and
//     never the one running a GPU container, and terminates only after
//     DECOMMISSIONED, also when the RM stops listing the host for a while;
//   - DrainByAttrition: with yarn_drain_by_attrition the busy node is
//     held with the cordon label (where the cluster offers it; otherwise
//     left alone), never put in the exclude file, and its container runs
//     on;
//   - HandOverToYARN: a pending YARN GPU app takes an idle node of a
//     fleet pool (owned hosts, no cloud) from Kubernetes (a tiny fake
//     side); the op stays open until the RM lists the restarted
//     NodeManager RUNNING with its GPUs, and the app gets its container
//     there; nothing is bought.
func TestBroker(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) { runBroker(t, simBrokerTarget(t)) })
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) { runBroker(t, hadoopBrokerTarget(t, v)) })
	}
}

// brokerTarget is a decomTarget that can also submit an app that waits.
type brokerTarget struct {
	decomTarget
	// submit asks in queue for containers of gpus GPUs; what the RM
	// cannot place stays pending.
	submit func(ctx context.Context, queue string, containers, gpus int) (string, error)
	// runIn is run in another queue.
	runIn func(ctx context.Context, queue, host string, gpus, seconds int) (string, string, error)
	// finish ends an app.
	finish func(ctx context.Context, app string) error
	// checkpoints, when set, reads checkpoint ages for the rig's runtime.
	checkpoints engine.Checkpoints
}

func simBrokerTarget(t *testing.T) brokerTarget {
	tg, _, _ := simBrokerWorld(t)
	return tg
}

// simBrokerWorld is simBrokerTarget with its simulator and admin server.
func simBrokerWorld(t *testing.T) (brokerTarget, *yarnsim.Sim, *yarnsim.AdminServer) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg := brokerTarget{decomTarget: decomTarget{gpus: 4, exclude: filepath.Join(t.TempDir(), "exclude.xml"), logs: func() string { return "" }}}
	for i := range 3 {
		h := fmt.Sprintf("127.0.0.%d", 11+i)
		tg.hosts = append(tg.hosts, h)
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4, MemoryMB: 16384, VCores: 16}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	tg.url = srv.URL
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: tg.exclude})
	if err != nil {
		t.Fatal(err)
	}
	if tg.admin, err = admin.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	tg.runIn = func(_ context.Context, queue, host string, gpus, seconds int) (string, string, error) {
		app, err := admin.RunOn(queue, host, gpus, time.Duration(seconds)*time.Second)
		if err != nil {
			return "", "", err
		}
		cs, err := sim.Containers(app)
		if err != nil || len(cs) != 1 {
			return "", "", fmt.Errorf("containers of %s: %+v, %v", app, cs, err)
		}
		return app, cs[0].ID, nil
	}
	tg.run = func(ctx context.Context, host string, gpus, seconds int) (string, string, error) {
		return tg.runIn(ctx, "a", host, gpus, seconds)
	}
	tg.restart = admin.RestartNodeManager
	tg.submit = func(_ context.Context, queue string, containers, gpus int) (string, error) {
		return sim.Submit(yarnsim.AppSpec{Queue: queue, Requests: []yarnsim.RequestSpec{{Containers: containers, GPUs: gpus}}})
	}
	tg.finish = func(_ context.Context, app string) error { return sim.Finish(app) }
	return tg, sim, admin
}

func hadoopBrokerTarget(t *testing.T, version string) brokerTarget {
	// Node labels on, with every queue's accessible labels listed, so the
	// broker's cordon label is one no queue may use: the broker suite runs
	// the product as a cluster that offers the cordon runs it.
	tg, _ := hadoopBrokerWorld(t, hadoop.Config{Version: version, Cordon: yarn.DefaultCordonLabel})
	return tg
}

// hadoopBrokerWorld starts a cluster of cfg and returns it with its broker
// target.
func hadoopBrokerWorld(t *testing.T, cfg hadoop.Config) (brokerTarget, *hadoop.Cluster) {
	c := startHadoopWith(t, cfg)
	return brokerTarget{
		decomTarget: decomTarget{
			url: c.Ready.RMWeb, admin: c.Ready.RMAdmin, exclude: c.Ready.ExcludePath,
			hosts: c.Ready.Nodes, gpus: c.Ready.GPUsPerNode,
			run: func(ctx context.Context, host string, gpus, seconds int) (string, string, error) {
				return c.Run(ctx, "a", host, gpus, seconds)
			},
			restart: c.Restart,
			logs:    func() string { return c.LogTail(6000) },
		},
		runIn: c.Run,
		submit: func(ctx context.Context, queue string, containers, gpus int) (string, error) {
			return c.Submit(ctx, queue, 0, containers, gpus, "")
		},
		finish: c.Finish,
	}, c
}

// startBrokerSuite starts a broker suite's run on tg: a context of six
// minutes, the cluster's log tail when the test fails, a direct RM client
// and the exclude file; it returns once every node is RUNNING with its
// GPUs.
func startBrokerSuite(t *testing.T, tg brokerTarget) (context.Context, *yarn.Client, *yarn.ExcludeFile) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log tail:\n%s", tg.logs())
		}
	})
	direct, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range tg.hosts {
		waitNode(t, ctx, direct, h, "idle cluster", 2*time.Minute, func(n yarn.Node) error {
			if n.State != "RUNNING" || n.GPUsTotal != tg.gpus {
				return fmt.Errorf("node %s is %s with %d GPUs", n.Host, n.State, n.GPUsTotal)
			}
			return nil
		})
	}
	return ctx, direct, ex
}

// simRuns reports whether container of app runs on host in the simulator
// (an app it no longer knows runs nothing).
func simRuns(sim *yarnsim.Sim) func(ctx context.Context, host, app, container string) (bool, error) {
	return func(_ context.Context, host, app, container string) (bool, error) {
		cs, err := sim.Containers(app)
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(cs, func(c yarnsim.Container) bool { return c.ID == container && c.Host == host }), nil
	}
}

// nodeManagerRuns reports whether container runs on host, as host's
// NodeManager itself lists it.
func nodeManagerRuns(c *hadoop.Cluster) func(ctx context.Context, host, app, container string) (bool, error) {
	return func(ctx context.Context, host, _, container string) (bool, error) {
		state, cs, err := c.NodeManagerState(ctx, host)
		if err != nil {
			return false, err
		}
		return state == "STARTED" && slices.Contains(cs, container+"=RUNNING"), nil
	}
}

// hidingProxy stands between the broker and the RM's REST API and, while
// a host is hidden, drops it from every node list, as an RM that restarted
// or failed over does until the NodeManager registers again.
type hidingProxy struct {
	mu     sync.Mutex
	hidden string
	// served counts node lists served with the host hidden.
	served int
}

func (p *hidingProxy) hide(host string) {
	p.mu.Lock()
	p.hidden, p.served = host, 0
	p.mu.Unlock()
}

func (p *hidingProxy) hiddenServed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.served
}

func (p *hidingProxy) start(t *testing.T, rm string) string {
	u, err := url.Parse(rm)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host
		r.Out.Header.Del("Accept-Encoding") // the RM's Jetty gzips; the filter reads plain JSON
	}}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		t.Errorf("hiding proxy: %s: %v", r.URL.Path, err)
		w.WriteHeader(http.StatusBadGateway)
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		p.mu.Lock()
		host := p.hidden
		p.mu.Unlock()
		if host == "" || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.Path, "/ws/v1/cluster/nodes") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		out, err := dropHost(body, host)
		if err != nil {
			return fmt.Errorf("hide %s from %s: %w", host, resp.Request.URL.Path, err)
		}
		p.mu.Lock()
		p.served++
		p.mu.Unlock()
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", fmt.Sprint(len(out)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// dropHost removes host's entries from a {"nodes":{"node":[...]}} answer.
func dropHost(body []byte, host string) ([]byte, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	raw, ok := v["nodes"]
	if !ok || string(raw) == "null" {
		return body, nil
	}
	var nodes map[string]json.RawMessage
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(nodes["node"], &list); err != nil {
		return nil, err
	}
	kept := list[:0]
	for _, n := range list {
		var id struct {
			Host string `json:"nodeHostName"`
			ID   string `json:"id"`
		}
		if err := json.Unmarshal(n, &id); err != nil {
			return nil, err
		}
		if id.Host == host || strings.HasPrefix(id.ID, host+":") {
			continue
		}
		kept = append(kept, n)
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	nodes["node"] = b
	if v["nodes"], err = json.Marshal(nodes); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// testPool is the in-test cloud: pools whose instances are NodeManager
// hosts. Terminate records the RM's state of the host at that moment.
type testPool struct {
	names []string
	state func(host string) string

	mu         sync.Mutex
	desired    map[string]int
	instances  map[string][]broker.Instance
	terminated []terminatedHost
}

type terminatedHost struct{ Host, RMState string }

func (p *testPool) Pools(context.Context) ([]broker.PoolState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []broker.PoolState
	for _, name := range p.names {
		out = append(out, broker.PoolState{Pool: broker.Pool{Name: name}, Desired: p.desired[name],
			Instances: slices.Clone(p.instances[name])})
	}
	return out, nil
}

// add puts a running instance for host into pool.
func (p *testPool) add(pool, host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances[pool] = append(p.instances[pool], broker.Instance{ID: fmt.Sprintf("i-%s-%s", pool, host), Hostname: host,
		Phase: broker.PhaseRegistered, LaunchedAt: time.Now().Add(-time.Hour)})
	p.desired[pool]++
}

func (p *testPool) SetDesired(_ context.Context, pool string, target int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desired[pool] = target
	return nil
}

func (p *testPool) Terminate(_ context.Context, pool, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ins := p.instances[pool]
	i := slices.IndexFunc(ins, func(in broker.Instance) bool { return in.ID == id })
	if i < 0 {
		return nil // gone already: no second decrement
	}
	host := ins[i].Hostname
	p.terminated = append(p.terminated, terminatedHost{Host: host, RMState: p.state(host)})
	p.instances[pool] = slices.Delete(ins, i, i+1)
	p.desired[pool]--
	return nil
}

func (p *testPool) terminations() []terminatedHost {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.terminated)
}

// fakeK8s is a Kubernetes side of idle GPU nodes: Release cordons (nothing
// to drain), Admit uncordons.
type fakeK8s struct {
	mu    sync.Mutex
	nodes map[string]broker.Owner
	gpus  int
}

func (k *fakeK8s) Source() broker.Source { return broker.SourceK8s }

// Capabilities are Kubernetes' (k8s.Side's): the fence shows as the owner.
func (k *fakeK8s) Capabilities() engine.SideCaps { return engine.SideCaps{ShowsFence: true} }

func (k *fakeK8s) Observe(context.Context, broker.TenantIndex) (broker.SideObservation, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	obs := broker.SideObservation{Source: broker.SourceK8s, Closed: map[string]broker.CloseReason{}}
	for name, owner := range k.nodes {
		obs.Nodes = append(obs.Nodes, broker.Node{Name: name, Owner: owner, Phase: broker.PhaseActive,
			GPUsTotal: k.gpus, Utilisation: -1, Healthy: true})
	}
	return obs, nil
}

func (k *fakeK8s) set(node string, o broker.Owner) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.nodes[node]; ok {
		k.nodes[node] = o
	}
}

// join adds an idle schedulable node.
func (k *fakeK8s) join(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes[node] = broker.OwnerK8s
}

func (k *fakeK8s) Release(_ context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	k.set(node, broker.OwnerNone)
	return broker.ReleaseStatus{Drained: true}, nil
}

func (k *fakeK8s) Cordon(_ context.Context, node string) error {
	k.set(node, broker.OwnerNone)
	return nil
}

func (k *fakeK8s) Admit(_ context.Context, node string) error {
	k.set(node, broker.OwnerK8s)
	return nil
}

func (k *fakeK8s) Evict(context.Context, string, broker.Workload) error { return nil }

// k8sSide is the Kubernetes side a rig runs with: fakeK8s, or podK8s
// (broker_preempt_test.go) for nodes that run pods.
type k8sSide interface {
	engine.SideObserver
	engine.SideActions
}

// brokerRig is one broker process over a target: a fresh database, the
// real yarn side and decommissioner through the hiding proxy, and pool.
type brokerRig struct {
	t    *testing.T
	st   *store.Store
	rt   *engine.Runtime
	pool *testPool
	// cordonOK is whether the cluster offers the YARN cordon (node labels
	// enabled, centralized): without it busy nodes are left alone.
	cordonOK bool

	mu       sync.Mutex
	restarts []string // hosts the restart hook ran for
}

func (r *brokerRig) restarted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.restarts)
}

const brokerPool = "yarn-gpus"

func newBrokerRig(t *testing.T, ctx context.Context, tg brokerTarget, rmURL string, direct *yarn.Client, pol broker.Policy, k8s k8sSide, hosts ...string) *brokerRig {
	t.Helper()
	return newBrokerRigPools(t, ctx, tg, rmURL, direct, pol, k8s, poolSpec{name: brokerPool, hosts: hosts})
}

// poolSpec is one pool of a rig: its partition and its instances' hosts;
// a fleet pool is package fleet's over those hosts instead of the test's.
type poolSpec struct {
	name, partition string
	max             int // default: len(hosts)
	hosts           []string
	fleet           bool
}

func newBrokerRigPools(t *testing.T, ctx context.Context, tg brokerTarget, rmURL string, direct *yarn.Client, pol broker.Policy, k8s k8sSide, pools ...poolSpec) *brokerRig {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pool := &testPool{desired: map[string]int{}, instances: map[string][]broker.Instance{}, state: func(host string) string {
		return nodeState(t, context.WithoutCancel(ctx), direct, host)
	}}
	var fleetPools []fleet.Pool
	for _, ps := range pools {
		if ps.max == 0 {
			ps.max = len(ps.hosts)
		}
		bp := broker.Pool{Name: ps.name, Provider: "test", Group: ps.name, GPUModel: "A100",
			GPUsPerNode: tg.gpus, MinNodes: 0, MaxNodes: ps.max, Sides: broker.PoolShared, Partition: ps.partition}
		if ps.fleet {
			bp.Provider, bp.Group, bp.MinNodes = broker.ProviderFleet, "", ps.max
		}
		if _, err := st.UpsertPool(ctx, bp); err != nil {
			t.Fatal(err)
		}
		if ps.fleet {
			fleetPools = append(fleetPools, fleet.Pool{Pool: bp, Members: fleet.Members{Hosts: ps.hosts}})
			continue
		}
		pool.names = append(pool.names, ps.name)
		for _, h := range ps.hosts {
			pool.add(ps.name, h)
		}
	}
	var nodePool engine.NodePool = pool
	if len(fleetPools) > 0 {
		fl, err := fleet.New(fleetPools)
		if err != nil {
			t.Fatal(err)
		}
		nodePool = fleet.Combine(fl, pool)
	}
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "training", MaxGPUs: 100, Weight: 1,
		YARNQueues: []string{"root.a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdatePolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	client, err := yarn.NewClient(yarn.Config{RMs: []string{rmURL}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := rmadmin.New(rmadmin.Config{Addrs: []string{tg.admin}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	// The restart hook asks the service manager for a restart, which comes
	// two seconds later (systemd's RestartSec), so the RM lists the host
	// down for some ticks after Admit and the hand-over must wait for it.
	var restarts sync.WaitGroup
	t.Cleanup(restarts.Wait)
	r := &brokerRig{t: t, st: st}
	restart := func(ctx context.Context, host string) error {
		r.mu.Lock()
		r.restarts = append(r.restarts, host)
		r.mu.Unlock()
		restarts.Add(1)
		go func() {
			defer restarts.Done()
			time.Sleep(2 * time.Second)
			if err := tg.restart(context.WithoutCancel(ctx), host); err != nil {
				t.Errorf("restart nodemanager of %s: %v", host, err)
			}
		}()
		return nil
	}
	// The cordon as serve builds it, with a hold of seconds: no container
	// is allocated here but by the scenarios, which wait for theirs.
	cordon, err := yarn.NewCordon(yarn.CordonConfig{Client: client, Admin: yarn.RMAdminLabeler{Client: admin}, Hold: 3 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var why string
	if r.cordonOK, why = cordon.Available(ctx); !r.cordonOK {
		t.Logf("the yarn cordon is unavailable here: %s", why)
	}
	dec, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex,
		RestartNodeManager: restart, RestartInterval: 20 * time.Second, Logger: log, Cordon: cordon})
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.RuntimeConfig{
		Observers: []engine.SideObserver{yarn.NewSide(client, yarn.MapOptions{}).WithCordon(cordon)},
		Actions:   []engine.SideActions{dec},
		Pools:     nodePool, Ledger: st.Ledger(), Logger: log, ObserveTimeout: 5 * time.Second,
		Checkpoints: tg.checkpoints,
	}
	if k8s != nil {
		cfg.Observers = append(cfg.Observers, k8s)
		cfg.Actions = append(cfg.Actions, k8s)
	}
	if r.rt, err = engine.NewRuntime(cfg); err != nil {
		t.Fatal(err)
	}
	r.pool = pool
	return r
}

// tickUntil ticks every 300ms until done holds, checking every tick
// (check's error fails the test at once), or fails after budget.
func (r *brokerRig) tickUntil(ctx context.Context, what string, budget time.Duration, check func() error, done func() bool) int {
	r.t.Helper()
	deadline := time.Now().Add(budget)
	for n := 1; ; n++ {
		if _, err := r.rt.Tick(ctx); err != nil {
			r.t.Fatalf("tick %d: %v", n, err)
		}
		if check != nil {
			if err := check(); err != nil {
				r.dumpOps(ctx)
				r.t.Fatalf("after tick %d, waiting for %s: %v", n, what, err)
			}
		}
		if done() {
			return n
		}
		if time.Now().After(deadline) {
			r.dumpOps(ctx)
			r.t.Fatalf("no %s after %d ticks (%s)", what, n, budget)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (r *brokerRig) dumpOps(ctx context.Context) {
	ops, _ := r.st.ListOps(context.WithoutCancel(ctx), store.OpFilter{Limit: 20})
	for _, op := range ops {
		r.t.Logf("op %d %s node=%s state=%s step=%s: %s %s", op.ID, op.Kind, op.Node, op.State, op.Step, op.Reason, op.LastError)
	}
	ds, _ := r.st.ListDecisions(context.WithoutCancel(ctx), store.DecisionFilter{Limit: 15})
	for _, d := range ds {
		r.t.Logf("decision %s demand=%s node=%s: %s", d.Kind, d.Demand, d.Node, d.Reason)
	}
}

func (r *brokerRig) ops(ctx context.Context, kind broker.ActionKind, node string) []broker.Op {
	ops, err := r.st.ListOps(ctx, store.OpFilter{Kind: string(kind), Node: node})
	if err != nil {
		r.t.Fatal(err)
	}
	return ops
}

func runBroker(t *testing.T, tg brokerTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("log tail:\n%s", tg.logs())
		}
	}()
	direct, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	proxy := &hidingProxy{}
	rmURL := proxy.start(t, tg.url)
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	busy, idle, spare := tg.hosts[0], tg.hosts[1], tg.hosts[2]
	for _, h := range tg.hosts {
		waitNode(t, ctx, direct, h, "idle cluster", time.Minute, func(n yarn.Node) error {
			if n.State != "RUNNING" || n.GPUsTotal != tg.gpus {
				return fmt.Errorf("node %s is %s with %d GPUs", n.Host, n.State, n.GPUsTotal)
			}
			return nil
		})
	}
	excludedWith := func(host string) (time.Duration, bool) {
		hs, err := ex.Hosts()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Name == host {
				return h.Timeout, true
			}
		}
		return 0, false
	}
	_, busyContainer, err := tg.run(ctx, busy, 1, 900)
	if err != nil {
		t.Fatalf("run a long 1-GPU container on %s: %v", busy, err)
	}
	containerOn := func(host, cid string) error {
		obs, err := direct.Observe(ctx)
		if err != nil {
			return err
		}
		for _, a := range obs.Apps {
			for _, c := range a.Containers {
				if c.ID == cid {
					if c.Host != host || a.State != "RUNNING" {
						return fmt.Errorf("container %s on %s, app %s", cid, c.Host, a.State)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("container %s is not running any more", cid)
	}
	waitNode(t, ctx, direct, busy, "the container on "+busy, time.Minute, func(n yarn.Node) error {
		if n.Containers == 0 || n.GPUsUsed != 1 {
			return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
		}
		return containerOn(busy, busyContainer)
	})

	base := broker.DefaultPolicy()
	base.ScaleDownUnneeded = broker.Duration(3 * time.Second)
	base.DrainTimeout = broker.Duration(2 * time.Minute)

	ok := t.Run("LeavesBusyNodeAlone", func(t *testing.T) {
		// The spare node is in the pool too, protected from reclaim: the
		// busy node's container would fit there, so only the rule that
		// idle reclaim never stops YARN work keeps the busy node.
		r := newBrokerRig(t, ctx, tg, rmURL, direct, base, nil, busy, idle, spare)
		if _, err := r.rt.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.st.SetNodeProtected(ctx, spare, true); err != nil {
			t.Fatalf("protect %s: %v", spare, err)
		}
		neverBusy := func() error {
			if to, ok := excludedWith(busy); ok {
				return fmt.Errorf("busy node %s is in the exclude file (timeout %s)", busy, to)
			}
			if len(r.pool.terminations()) > 0 && r.pool.terminations()[0].Host != idle {
				return fmt.Errorf("terminated %+v", r.pool.terminations())
			}
			return nil
		}
		// The idle node is decommissioned: the exclude file, then the RM.
		r.tickUntil(ctx, idle+" in the exclude file", time.Minute, neverBusy, func() bool {
			_, ok := excludedWith(idle)
			return ok
		})
		// From here the RM stops listing the host (a restart or failover)
		// while it goes on to DECOMMISSIONED: no terminate while unlisted.
		proxy.hide(idle)
		noTerminate := func() error {
			if err := neverBusy(); err != nil {
				return err
			}
			if ts := r.pool.terminations(); len(ts) > 0 {
				return fmt.Errorf("terminated %+v while the RM did not list the host", ts)
			}
			return nil
		}
		// The RM really takes the host to DECOMMISSIONED, and the broker
		// asks about it while it cannot see it: the op records that the
		// release is unknown and waits.
		unknown := ""
		hiddenTicks := r.tickUntil(ctx, "the broker to find "+idle+"'s release unknown while unlisted", time.Minute, noTerminate, func() bool {
			for _, op := range r.ops(ctx, broker.ActScaleDown, idle) {
				if op.State.Terminal() {
					r.t.Fatalf("scale-down op of %s ended while the host was unlisted: %+v", idle, op)
				}
				if strings.Contains(op.LastError, "cannot tell") {
					unknown = op.LastError
				}
			}
			return unknown != "" && nodeState(t, ctx, direct, idle) == "DECOMMISSIONED"
		})
		if proxy.hiddenServed() == 0 {
			t.Fatal("the proxy hid nothing: the broker did not read node lists while the host was hidden")
		}
		t.Logf("op while unlisted: %s", unknown)
		t.Logf("%d ticks with %s unlisted, no terminate", hiddenTicks, idle)
		proxy.hide("")
		r.tickUntil(ctx, idle+" terminated", time.Minute, neverBusy, func() bool { return len(r.pool.terminations()) > 0 })
		if ts := r.pool.terminations(); len(ts) != 1 || ts[0] != (terminatedHost{Host: idle, RMState: "DECOMMISSIONED"}) {
			t.Fatalf("terminations %+v, want %s once while the RM listed it DECOMMISSIONED", ts, idle)
		}
		// A few more ticks: the busy node stays, its container runs.
		for range 5 {
			if _, err := r.rt.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if err := neverBusy(); err != nil {
				t.Fatal(err)
			}
		}
		if err := containerOn(busy, busyContainer); err != nil {
			t.Fatal(err)
		}
		if s := nodeState(t, ctx, direct, busy); s != "RUNNING" {
			t.Fatalf("busy node %s is %s, want RUNNING", busy, s)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("DrainByAttrition", func(t *testing.T) {
		pol := base
		pol.YARNDrainByAttrition = true
		r := newBrokerRig(t, ctx, tg, rmURL, direct, pol, nil, busy)
		// IMPORTANT: never the exclude file for a busy host (an RM
		// failover would shut its NodeManager down): the cordon label, or,
		// where the cluster cannot offer it, nothing at all.
		neverExcluded := func() error {
			if to, ok := excludedWith(busy); ok {
				return fmt.Errorf("busy node %s excluded (timeout %s)", busy, to)
			}
			if ts := r.pool.terminations(); len(ts) > 0 {
				return fmt.Errorf("terminated %+v", ts)
			}
			return containerOn(busy, busyContainer)
		}
		cordoned := func() bool {
			o, err := direct.Observe(ctx)
			if err != nil {
				return false
			}
			n, ok := o.Node(busy)
			return ok && slices.Contains(n.Labels, yarn.DefaultCordonLabel)
		}
		if r.cordonOK {
			r.tickUntil(ctx, busy+" held by the cordon", time.Minute, neverExcluded, cordoned)
		}
		for range 8 {
			if _, err := r.rt.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if err := neverExcluded(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if s := nodeState(t, ctx, direct, busy); s != "RUNNING" || cordoned() != r.cordonOK {
			t.Fatalf("%s is %s, cordoned %v (cordon available %v): want RUNNING with its container, cordoned where the cluster offers it", busy, s, cordoned(), r.cordonOK)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("HandOverToYARN", func(t *testing.T) {
		// The spare node is full (another tenant's container), the busy
		// one leaves by attrition, the idle one was decommissioned: its
		// machine came back as an idle Kubernetes node.
		if _, _, err := tg.runIn(ctx, "b", spare, tg.gpus, 900); err != nil {
			t.Fatalf("fill %s: %v", spare, err)
		}
		waitNode(t, ctx, direct, spare, spare+" full", time.Minute, func(n yarn.Node) error {
			if n.GPUsAvailable != 0 {
				return fmt.Errorf("node %s has %d GPUs free", n.Host, n.GPUsAvailable)
			}
			return nil
		})
		app, err := tg.submit(ctx, "a", 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		eventuallyFor(t, ctx, direct, "app "+app+" pending", time.Minute, 250*time.Millisecond, func(o *yarn.Observation) error {
			if a, ok := o.App(app); !ok || a.PendingGPUs() != 1 {
				return fmt.Errorf("app %s: %+v", app, a)
			}
			return nil
		})
		// The idle machine is a host of a fleet pool (no cloud behind it:
		// package fleet), the hand-over the same as any pool's.
		k8s := &fakeK8s{nodes: map[string]broker.Owner{idle: broker.OwnerK8s}, gpus: tg.gpus}
		r := newBrokerRigPools(t, ctx, tg, rmURL, direct, base, k8s, poolSpec{name: "owned", hosts: []string{idle}, fleet: true})
		var rmStates []string
		ticks := r.tickUntil(ctx, "the hand-over of "+idle+" to end", 3*time.Minute, func() error {
			s := nodeState(t, ctx, direct, idle)
			if len(rmStates) == 0 || rmStates[len(rmStates)-1] != s {
				rmStates = append(rmStates, s)
			}
			for _, op := range r.ops(ctx, broker.ActTransfer, idle) {
				if op.State == broker.OpFailed || op.State == broker.OpCancelled {
					return fmt.Errorf("hand-over op %d %s: %s", op.ID, op.State, op.LastError)
				}
				if op.State == broker.OpDone {
					n := waitNode(t, ctx, direct, idle, idle+" at the end of the hand-over", time.Second, func(n yarn.Node) error { return nil })
					if n.State != "RUNNING" || n.GPUsTotal != tg.gpus {
						return fmt.Errorf("hand-over op %d done while the RM lists %s %s with %d GPUs", op.ID, idle, n.State, n.GPUsTotal)
					}
				}
			}
			if ts := r.pool.terminations(); len(ts) > 0 {
				return fmt.Errorf("terminated %+v", ts)
			}
			return nil
		}, func() bool {
			ops := r.ops(ctx, broker.ActTransfer, idle)
			return len(ops) == 1 && ops[0].State == broker.OpDone
		})
		if len(rmStates) < 2 || rmStates[0] != "DECOMMISSIONED" || rmStates[len(rmStates)-1] != "RUNNING" {
			t.Fatalf("RM states of %s during the hand-over %v: want DECOMMISSIONED while the op was open, then RUNNING", idle, rmStates)
		}
		if rs := r.restarted(); !slices.Equal(rs, []string{idle}) {
			t.Fatalf("restart hook ran for %v, want once for %s", rs, idle)
		}
		t.Logf("hand-over of %s done after %d ticks, RM states %v", idle, ticks, rmStates)
		eventuallyFor(t, ctx, direct, "app "+app+" gets its container on "+idle, time.Minute, 250*time.Millisecond, func(o *yarn.Observation) error {
			a, ok := o.App(app)
			if !ok || len(a.Containers) == 0 {
				return fmt.Errorf("app %s holds no container: %+v", app, a)
			}
			for _, c := range a.Containers {
				if c.Host == idle && c.GPUs == 1 {
					return nil
				}
			}
			return fmt.Errorf("app %s containers %+v, want one of 1 GPU on %s", app, a.Containers, idle)
		})
		if ups := r.ops(ctx, broker.ActScaleUp, ""); len(ups) != 0 {
			t.Fatalf("scale-ups %+v, want none (the hand-over serves the app)", ups)
		}
		if err := containerOn(busy, busyContainer); err != nil {
			t.Fatal(err)
		}
	})
	if !ok {
		return
	}
	runBrokerPreempt(t, ctx, tg, rmURL, direct, base, spare, func() error { return containerOn(busy, busyContainer) })
}

type testWriter struct{ t *testing.T }

func (tw testWriter) Write(p []byte) (int, error) {
	tw.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
