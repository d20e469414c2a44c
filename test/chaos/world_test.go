package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/internal/simworld"
	"github.com/gpubroker/gpubroker/internal/workload"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/store/pgserver"
	"github.com/gpubroker/gpubroker/test/pgtest"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// The reference pools, two groups of 4-GPU nodes so that both a pool's max
// and the cluster's max bind: 3 + 4 nodes could hold 28 GPUs, the cluster
// may hold 24. The cloud groups allow more than the broker may use, so a
// breach would show.
var (
	chaosPools = []broker.Pool{
		{Name: "gpu-a", Provider: "aws", Group: "gpu-a", GPUModel: "A100", GPUsPerNode: 4, MinNodes: 1, MaxNodes: 3,
			Sides: broker.PoolShared, PricePerHour: 30, Labels: gpuLabels, Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}},
		{Name: "gpu-b", Provider: "aws", Group: "gpu-b", GPUModel: "A100", GPUsPerNode: 4, MinNodes: 0, MaxNodes: 4,
			Sides: broker.PoolShared, PricePerHour: 33, Labels: gpuLabels, Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}},
	}
	clusterMaxGPUs = 24
	gpuLabels      = map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"}
	gpuTaint       = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	chaosTenants   = []broker.Tenant{
		{Name: "training", GuaranteedGPUs: 8, MaxGPUs: 24, Weight: 2, YARNQueues: []string{"root.training"}, Namespaces: []string{"ml-training"}},
		{Name: "research", GuaranteedGPUs: 4, MaxGPUs: 16, Weight: 1, YARNQueues: []string{"root.research"}, Namespaces: []string{"research"}},
	}
	qosClasses = map[workload.QoS]string{
		workload.QoSGuaranteed: "high-priority-training", workload.QoSLS: "latency-sensitive",
		workload.QoSBurstable: "burstable", workload.QoSBE: "best-effort",
	}
)

func chaosPolicy() broker.Policy {
	pol := broker.DefaultPolicy()
	pol.ClusterMaxGPUs = clusterMaxGPUs
	pol.ScaleDownUnneeded = broker.Duration(15 * time.Second)
	pol.MaxProvisionTime = broker.Duration(20 * time.Second)
	pol.DrainTimeout = broker.Duration(20 * time.Second)
	pol.UnhealthyNodeTimeout = broker.Duration(10 * time.Second)
	pol.PlacementGrace = broker.Duration(30 * time.Second)
	// Busy YARN nodes leave by attrition under the cordon, so the RM
	// fails over while the broker holds some (fRMFailoverAttrition).
	pol.YARNDrainByAttrition = true
	return pol
}

// pgServer is the soak's PostgreSQL: a private server that can be
// restarted on its data directory and port, or, with DATABASE_URL set, an
// external one whose backends are terminated instead.
type pgServer struct {
	dir  string
	port int
	url  string // maintenance database
	srv  *pgserver.Server
	ext  *pgtest.Server
	mu   sync.Mutex
}

func startPG() (*pgServer, error) {
	if os.Getenv("DATABASE_URL") != "" {
		ext, err := pgtest.Start()
		if err != nil {
			return nil, err
		}
		return &pgServer{ext: ext, url: ext.URL}, nil
	}
	dir, err := os.MkdirTemp("", "gpubroker-chaos-pg-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &pgServer{dir: dir, port: port}
	if err := p.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.url = p.srv.URL
	return p, nil
}

func (p *pgServer) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Config{Dir: p.dir, Port: p.port, BinDir: os.Getenv("PG_BIN"), Fast: true})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	return nil
}

// restartMode names how Restart interrupts the database.
func (p *pgServer) restartMode() string {
	if p.ext != nil {
		return "pg_terminate_backend of every session (external DATABASE_URL)"
	}
	return "server stop (fast shutdown) and start on the same data directory and port"
}

// Restart stops the server, waits down, and starts it again; on an
// external server it terminates every session of db instead.
func (p *pgServer) Restart(ctx context.Context, db string, down time.Duration) error {
	if p.ext != nil {
		conn, err := pgx.Connect(ctx, p.url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", db)
		return err
	}
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if err := srv.Stop(); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	return p.start()
}

// DatabaseURL is the URL of database name at host:port addr ("" for the
// server's own address).
func (p *pgServer) DatabaseURL(name, addr string) string {
	var u string
	if p.ext != nil {
		u = p.ext.DatabaseURL(name)
	} else {
		p.mu.Lock()
		u = p.srv.DatabaseURL(name)
		p.mu.Unlock()
	}
	if addr == "" {
		return u
	}
	at := strings.Index(u, "@")
	slash := strings.Index(u[at:], "/")
	return u[:at+1] + addr + u[at+slash:]
}

// Addr is the server's host:port.
func (p *pgServer) Addr() string {
	u := p.DatabaseURL("x", "")
	at := strings.Index(u, "@")
	slash := strings.Index(u[at:], "/")
	return u[at+1 : at+slash]
}

func (p *pgServer) Stop() {
	if p.ext != nil {
		p.ext.Stop()
		return
	}
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Stop()
	os.RemoveAll(p.dir)
}

// proxy forwards one replica's database connections, so that killing the
// replica drops them all at once, as the kernel does for a killed process:
// its lease's session ends and nothing it still tries reaches the
// database.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// Cut closes the listener and every connection.
func (p *proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	cs := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range cs {
		c.Close()
	}
}

// world is the product and its surroundings.
type world struct {
	t        *testing.T
	ctx      context.Context
	log      *slog.Logger
	pg       *pgServer
	dbName   string
	check    *store.Store  // the checker's own connection to the store
	raw      *pgxpool.Pool // and for ledger reads the store has no call for
	aws      *awssim.Server
	awsURL   string
	ysim     *yarnsim.Sim
	ha       *yarnsim.HA
	yadmin   *yarnsim.AdminServer
	yadmAddr string
	yex      *yarn.ExcludeFile
	machines *simworld.Bootstrap // the machines' bootstrap; knows which run
	kc       *k8ssim.Cluster
	kcfg     k8s.Config
	tokens   map[string]string // agent tokens by node (each bound to its node), for reports

	mu       sync.Mutex
	replicas []*replica
	nextRep  int
	kills    []Kill          // kills seen by the terminate hook
	lost     map[string]bool // nodes an XID fault destroyed
	faulty   []*k8ssim.FaultyClient
	apiDown  bool
}

// replica is one broker process: its own Main on its own database
// connections (through its proxy) and its own view of Kubernetes.
type replica struct {
	name   string
	proxy  *proxy
	fk     *k8ssim.FaultyClient
	m      *app.Main
	cancel context.CancelFunc
	done   chan error
	addr   chan string
	api    string
	killed bool
}

func newWorld(t *testing.T, ctx context.Context, pg *pgServer, seed uint64) *world {
	t.Helper()
	lvl := slog.LevelWarn
	if os.Getenv("CHAOS_LOG") != "" {
		lvl = slog.LevelInfo
	}
	w := &world{t: t, ctx: ctx, pg: pg, lost: map[string]bool{},
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: lvl}))}
	// Unique per run: an external server (DATABASE_URL) keeps databases.
	w.dbName = "chaos_" + strconv.FormatUint(seed, 10) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	conn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{w.dbName}.Sanitize())
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	url := pg.DatabaseURL(w.dbName, "")
	if err := store.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if w.check, err = store.Open(ctx, store.Config{URL: url, MaxConns: 3}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.check.Close)
	if w.raw, err = pgxpool.New(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.raw.Close)
	if err := app.Seed(ctx, w.check, chaosPools, chaosTenants, chaosPolicy(), w.log); err != nil {
		t.Fatal(err)
	}
	w.tokens = map[string]string{}

	// YARN: an RM HA pair over one simulator, its admin port, the exclude
	// file the broker and the machines' bootstrap share.
	if w.ysim, err = yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 60}, {Path: "root.research", Capacity: 40}}}); err != nil {
		t.Fatal(err)
	}
	if w.ha, err = w.ysim.StartHA(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.ha.Close(context.Background()) })
	exPath := filepath.Join(t.TempDir(), "exclude.xml")
	if w.yadmin, err = yarnsim.NewAdminServer(w.ysim, yarnsim.AdminConfig{ExcludePath: exPath}); err != nil {
		t.Fatal(err)
	}
	if w.yadmAddr, err = w.yadmin.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	// A failover rebuilds what a real new active RM rebuilds: excluded
	// hosts become placeholders and their NodeManagers' containers die.
	w.ha.SetAdmin(w.yadmin)
	t.Cleanup(func() { w.yadmin.Close() })
	if w.yex, err = yarn.NewExcludeFile(exPath); err != nil {
		t.Fatal(err)
	}

	// Kubernetes.
	w.kc = k8ssim.New(k8ssim.Config{Logger: w.log})
	for q, name := range qosClasses {
		prio, _ := q.Priority()
		if err := w.kc.EnsurePriorityClass(ctx, name, int32(prio)); err != nil {
			t.Fatal(err)
		}
	}
	go w.kc.Run(ctx, 200*time.Millisecond)
	w.kcfg = k8s.Config{GPUNodeLabels: map[string]string{"infra-type": "gpu"}, StaleAfter: 5 * time.Second}

	// The cloud: booted machines join Kubernetes, and YARN as excluded
	// NodeManagers, until the broker hands them over.
	if w.machines, err = w.newMachines(); err != nil {
		t.Fatal(err)
	}
	w.aws = awssim.New(awssim.Config{LaunchDelay: 500 * time.Millisecond, BootDelay: time.Second,
		TerminateDelay: 500 * time.Millisecond, LaunchRetry: 2 * time.Second, Logger: w.log,
		BootHook: w.machines.Boot, TerminateHook: w.machines.Gone})
	if w.awsURL, err = w.aws.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.aws.Close(context.Background()) })
	for _, p := range chaosPools {
		if err := w.aws.CreateGroup(awssim.GroupSpec{Name: p.Group, Min: 0, Max: 10, Desired: p.MinNodes, InstanceType: "p4d.24xlarge"}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// newMachines is the world's machine bootstrap (internal/simworld): a
// booted machine joins Kubernetes, and YARN as an excluded NodeManager,
// until the broker hands it over; a terminated one leaves both, and the
// GPU pods still running on it are killed work. A failed step is logged;
// a machine whose NodeManager did not start still runs.
func (w *world) newMachines() (*simworld.Bootstrap, error) {
	return simworld.New(simworld.Config{Context: w.ctx, Kube: simworld.Sim{Cluster: w.kc},
		Sim: w.ysim, Admin: w.yadmin, Exclude: w.yex,
		Node: func(in awssim.Instance) (simworld.Node, error) {
			return simworld.Node{Name: in.PrivateDNSName, GPUs: 4, Labels: gpuLabels, Taints: []corev1.Taint{gpuTaint},
				ProviderID: "aws:///us-east-1a/" + in.ID}, nil
		},
		OnError: func(e *simworld.StepError) bool {
			switch e.Step {
			case simworld.StepLeaveKubernetes, simworld.StepRemoveNodeManager, simworld.StepUnexclude:
				return true // the machine is gone either way
			}
			w.log.Warn("chaos: "+string(e.Step), "node", e.Host, "err", e.Err)
			return e.Step == simworld.StepStartNodeManager
		},
		BeforeLeave: w.recordKills})
}

// recordKills records the GPU pods running on a terminated machine as
// killed work.
func (w *world) recordKills(in awssim.Instance) {
	host := in.PrivateDNSName
	pods, err := w.kc.Client().CoreV1().Pods("").List(context.WithoutCancel(w.ctx), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == host && p.Status.Phase == corev1.PodRunning && podGPUs(&p) > 0 {
			w.mu.Lock()
			w.kills = append(w.kills, Kill{Source: broker.SourceK8s, Key: string(p.UID), Name: p.Namespace + "/" + p.Name,
				Node: host, Why: "its node was terminated"})
			w.mu.Unlock()
		}
	}
}

func podGPUs(p *corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		q := c.Resources.Requests[k8ssim.GPUResource]
		n += q.Value()
	}
	return n
}

// startReplica opens a new broker process on the shared database and
// clusters. It retries while the database is unreachable (a restart).
func (w *world) startReplica() (*replica, error) {
	w.mu.Lock()
	w.nextRep++
	name := fmt.Sprintf("replica-%d", w.nextRep)
	fk := w.kc.NewFaultyClient()
	fk.SetUnavailable(w.apiDown)
	w.faulty = append(w.faulty, fk)
	w.mu.Unlock()
	px, err := newProxy(w.pg.Addr())
	if err != nil {
		return nil, err
	}
	r := &replica{name: name, proxy: px, fk: fk, done: make(chan error, 1), addr: make(chan string, 1)}
	ctx, cancel := context.WithCancel(w.ctx)
	r.cancel = cancel
	pools := app.CloudPools(chaosPools)
	var m *app.Main
	deadline := time.Now().Add(time.Minute)
	for {
		m, err = app.Open(ctx, app.Config{DatabaseURL: w.pg.DatabaseURL(w.dbName, px.Addr()), MaxConns: 8,
			Seed: true, Pools: chaosPools, Tenants: chaosTenants, Policy: chaosPolicy(),
			// The cordon's hold is seconds here: the simulator launches
			// what it allocates at once, so nothing can be allocated and
			// not yet listed once a host is empty under the cordon.
			YARN: app.YARNConfig{RM: w.ha.URLs(), Timeout: 2 * time.Second, AdminAddress: []string{w.yadmAddr}, Exclude: w.yex,
				RestartNodeManager: w.machines.RestartNodeManager, CordonHold: 3 * time.Second},
			Kubernetes: app.KubernetesConfig{Client: fk.Client(), Adapter: w.kcfg, DrainStep: time.Second},
			Cloud: app.CloudConfig{Region: "us-east-1", Endpoint: w.awsURL, Pools: pools,
				Credentials: credentials.NewStaticCredentialsProvider("chaos", "chaos", ""), PoolBackoff: 30 * time.Second},
			Logger: w.log.With("replica", name), Period: time.Second, BatchWindow: 200 * time.Millisecond,
			ObserveTimeout: 3 * time.Second,
			Listen:         "127.0.0.1:0", Ready: func(addr string) { r.addr <- addr }})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cancel()
			px.Cut()
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.m = m
	go func() { r.done <- m.Run(ctx) }()
	select {
	case r.api = <-r.addr:
	case err := <-r.done:
		cancel()
		px.Cut()
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	w.mu.Lock()
	w.replicas = append(w.replicas, r)
	w.mu.Unlock()
	return r, nil
}

// kill ends a replica as kill -9 would: its database connections drop,
// its context ends, nothing is cleaned up or released.
func (w *world) kill(r *replica) {
	r.proxy.Cut()
	r.cancel()
	w.mu.Lock()
	r.killed = true
	w.replicas = removeReplica(w.replicas, r)
	w.mu.Unlock()
	// The process is gone: its goroutines end with the context (the
	// store's pool is closed so no connection attempt lingers).
	go func() {
		<-r.done
		r.m.Close()
	}()
}

func removeReplica(rs []*replica, r *replica) []*replica {
	out := rs[:0:0]
	for _, x := range rs {
		if x != r {
			out = append(out, x)
		}
	}
	return out
}

// stopAll ends the replicas at the end of the run.
func (w *world) stopAll() {
	w.mu.Lock()
	rs := w.replicas
	w.replicas = nil
	w.mu.Unlock()
	for _, r := range rs {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			w.t.Errorf("%s did not stop", r.name)
		}
		r.m.Close()
		r.proxy.Cut()
	}
}

// readiness is a replica's /readyz answer.
type readiness struct {
	Role     string            `json:"role"`
	LastTick time.Time         `json:"last_tick"`
	Stale    map[string]string `json:"stale"`
}

func (w *world) status(r *replica) (readiness, error) {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.api+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	var out readiness
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return readiness{}, fmt.Errorf("readyz of %s: %w", r.name, err)
	}
	return out, nil
}

// leader returns the replica that leads now, if one does.
func (w *world) leader() (*replica, readiness, bool) {
	w.mu.Lock()
	rs := append([]*replica(nil), w.replicas...)
	w.mu.Unlock()
	for _, r := range rs {
		if st, err := w.status(r); err == nil && st.Role == "leader" {
			return r, st, true
		}
	}
	return nil, readiness{}, false
}

// ticked waits until some replica leads and has ticked after since with
// the named sources fresh, and returns when it first saw that (zero after
// the deadline).
func (w *world) ticked(since time.Time, fresh []string, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && w.ctx.Err() == nil {
		if _, st, ok := w.leader(); ok && st.LastTick.After(since) {
			stale := false
			for _, s := range fresh {
				if _, ok := st.Stale[s]; ok {
					stale = true
				}
			}
			if !stale {
				return time.Now()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}
}

// report posts an agent report for node through the API, as
// gpubroker-agent does.
func (w *world) report(node string, xids []uint64) error {
	r, _, ok := w.leader()
	if !ok {
		w.mu.Lock()
		if len(w.replicas) == 0 {
			w.mu.Unlock()
			return errors.New("no replica runs")
		}
		r = w.replicas[0]
		w.mu.Unlock()
	}
	rep := broker.NodeReport{Node: node, At: time.Now().UTC(), AgentVersion: "chaos", DriverVersion: "550.54.15"}
	for i := 0; i < 4; i++ {
		rep.GPUs = append(rep.GPUs, broker.GPUReport{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Product: "NVIDIA A100-SXM4-40GB",
			MemoryTotal: 40 << 30, XIDs: xids})
	}
	body, _ := json.Marshal(rep)
	ctx, cancel := context.WithTimeout(w.ctx, 3*time.Second)
	defer cancel()
	// Each node's agent has its own token, bound to its node, as deployed.
	w.mu.Lock()
	token, ok := w.tokens[node]
	w.mu.Unlock()
	if !ok {
		secret, _, err := w.check.CreateAgentToken(ctx, "chaos-agent-"+node, []string{node}, "", time.Time{})
		if err != nil {
			return err
		}
		token = secret
		w.mu.Lock()
		w.tokens[node] = token
		w.mu.Unlock()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.api+"/api/v1/nodes/"+node+"/report", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("report %s: %s: %s", node, resp.Status, b)
	}
	return nil
}

type testWriter struct{ t *testing.T }

func (tw testWriter) Write(p []byte) (int, error) {
	tw.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
