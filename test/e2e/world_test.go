package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/fleet"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/internal/simworld"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/k8senv"
	"github.com/gpubroker/gpubroker/test/pgtest"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

var (
	pg      *pgtest.Server
	kubeEnv *k8senv.Env
)

func TestMain(m *testing.M) {
	var err error
	pg, err = pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(2)
	}
	kubeEnv, err = k8senv.Start(context.Background(), k8senv.Options{
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		pg.Stop()
		fmt.Fprintln(os.Stderr, "k8senv:", err)
		os.Exit(2)
	}
	code := m.Run()
	kubeEnv.Stop()
	pg.Stop()
	os.Exit(code)
}

const poolName = "gpu-training-group"

var (
	gpuLabels = map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"}
	gpuTaint  = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
)

// world is the broker, assembled by internal/app as serve assembles it, on
// the real control plane and the simulators.
type world struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	rt       *engine.Runtime
	aws      *awssim.Server
	ysim     *yarnsim.Sim
	yadmin   *yarnsim.AdminServer
	yexclude *yarn.ExcludeFile
	yclient  *yarn.Client
	ns       string
	calls    *callLog
	app      *app.Main
	cancelRT context.CancelFunc
	rtDone   chan struct{}

	// draSlices, while set, has every node that boots publish its four
	// GPUs as a ResourceSlice, as NVIDIA's DRA driver would (dra_test.go).
	draSlices atomic.Bool

	// terminations are the Terminate calls, with the host's RM state.
	termMu       sync.Mutex
	terminations []terminated
}

// callLog records every SetDesired call the runtime makes.
type callLog struct {
	mu    sync.Mutex
	calls []desiredCall
}

type desiredCall struct {
	At     time.Time
	Pool   string
	Target int
}

// recordingPool wraps the real provider to time its scale-up calls and
// to see each termination as it is asked for.
type recordingPool struct {
	*cloud.Provider
	log *callLog
	// onTerminate, when set, runs before each Terminate call.
	onTerminate func(instanceID string)
}

func (r recordingPool) Terminate(ctx context.Context, pool, instanceID string) error {
	if r.onTerminate != nil {
		r.onTerminate(instanceID)
	}
	return r.Provider.Terminate(ctx, pool, instanceID)
}

// terminated is a Terminate call with the RM's state of its host then.
type terminated struct {
	Host, YARNState string
}

func (r recordingPool) SetDesired(ctx context.Context, pool string, target int) error {
	r.log.mu.Lock()
	r.log.calls = append(r.log.calls, desiredCall{At: time.Now(), Pool: pool, Target: target})
	r.log.mu.Unlock()
	return r.Provider.SetDesired(ctx, pool, target)
}

type worldOptions struct {
	maxNodes   int
	unneeded   time.Duration
	namespace  string
	bootDelay  time.Duration
	preemption bool
	// logTap, when set, sees every record the broker logs, debug too
	// (TestHeadlineLatency's per-tick timings), before the level filter.
	logTap func(slog.Record)
	// extra shapes the safety scenarios (safety_test.go).
	extra safetyOptions
	// fleet names the hosts of a fleet pool (fleetPoolName) beside the
	// cloud pool: machines up from the start, on Kubernetes, excluded
	// from YARN. noCloud leaves the cloud out altogether (no endpoint,
	// no cloud pool): the broker runs on the fleet alone.
	fleet   []string
	noCloud bool
	// fleetBySelector names the fleet's members by a Kubernetes node label
	// (fleetLabel) instead of by host name.
	fleetBySelector bool
}

// fleetLabel marks the fleet's Kubernetes nodes for a node selector.
var fleetLabel = map[string]string{"gpubroker.io/fleet": "e2e"}

const fleetPoolName = "owned-fleet"

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var handler slog.Handler = slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: testLogLevel()})
	if o.logTap != nil {
		handler = tapHandler{Handler: handler, tap: o.logTap}
	}
	log := slog.New(handler)
	url := pg.NewDatabase(t, store.Migrate)
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pool := broker.Pool{Name: poolName, Provider: "aws", Group: poolName, GPUModel: "A100", GPUsPerNode: 4,
		MinNodes: 0, MaxNodes: o.maxNodes, Sides: broker.PoolShared, Labels: gpuLabels,
		Taints: []broker.Taint{{Key: gpuTaint.Key, Value: gpuTaint.Value, Effect: string(gpuTaint.Effect)}}}
	var pools []broker.Pool
	if !o.noCloud {
		pools = append(pools, pool)
	}
	var fleetMembers map[string]fleet.Members
	if len(o.fleet) > 0 {
		fp := pool
		fp.Name, fp.Provider, fp.Group, fp.MinNodes, fp.MaxNodes = fleetPoolName, broker.ProviderFleet, "", len(o.fleet), len(o.fleet)
		members := fleet.Members{Hosts: o.fleet}
		if o.fleetBySelector {
			members = fleet.Members{NodeSelector: fleetLabel}
		}
		pools, fleetMembers = append(pools, fp), map[string]fleet.Members{fleetPoolName: members}
	}
	for _, p := range pools {
		if _, err := st.UpsertPool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "training", MaxGPUs: 200, Weight: 1,
		YARNQueues: []string{"root.training"}, Namespaces: []string{o.namespace}}); err != nil {
		t.Fatal(err)
	}
	pol := broker.DefaultPolicy()
	pol.ClusterMaxGPUs = 200
	pol.ScaleDownUnneeded = broker.Duration(o.unneeded)
	pol.DrainTimeout = broker.Duration(time.Minute)
	pol.MaxProvisionTime = broker.Duration(2 * time.Minute)
	pol.Preemption = o.preemption
	if o.extra.unhealthyTimeout > 0 {
		pol.UnhealthyNodeTimeout = broker.Duration(o.extra.unhealthyTimeout)
	}
	if _, err := st.UpdatePolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeEnv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ysim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	ysrv := httptest.NewServer(ysim.Handler())
	t.Cleanup(ysrv.Close)
	yclient, err := yarn.NewClient(yarn.Config{RMs: []string{ysrv.URL}})
	if err != nil {
		t.Fatal(err)
	}

	// YARN's admin port and exclude file: nodes move through the real
	// graceful decommission and recommission.
	exPath := filepath.Join(t.TempDir(), "exclude.xml")
	yadmin, err := yarnsim.NewAdminServer(ysim, yarnsim.AdminConfig{ExcludePath: exPath})
	if err != nil {
		t.Fatal(err)
	}
	yadminAddr, err := yadmin.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { yadmin.Close() })
	yexclude, err := yarn.NewExcludeFile(exPath)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ctx: ctx, st: st, ysim: ysim, yadmin: yadmin, yexclude: yexclude, yclient: yclient, ns: o.namespace, calls: &callLog{}}
	// The machines' bootstrap (internal/simworld): booted instances join
	// Kubernetes as KWOK nodes, and YARN as NodeManagers of excluded hosts
	// (the RM turns them away as DECOMMISSIONED) until the broker hands
	// them over. A failed step fails the test and the machine goes on.
	machines, err := simworld.New(simworld.Config{Context: ctx, Kube: kwokNodes{w}, Sim: ysim, Admin: yadmin, Exclude: yexclude,
		Node: func(in awssim.Instance) (simworld.Node, error) {
			labels, model := gpuLabels, "A100"
			var mig map[string]int
			if in.Group != poolName { // an extra pool of safety_test.go
				labels, model = map[string]string{"infra-type": "other"}, "A10G"
				if slices.ContainsFunc(o.extra.pools, func(p extraPool) bool { return p.name == in.Group && p.mig }) {
					labels, model, mig = gpuLabels, "A100", map[string]int{e2eMIGProfile: 4 * e2eMIGPerGPU}
				}
			}
			return simworld.Node{Name: in.PrivateDNSName, GPUs: 4, Model: model, MIG: mig, Labels: labels,
				Taints: append([]corev1.Taint{gpuTaint}, o.extra.bootTaints...), ProviderID: "aws:///us-east-1a/" + in.ID}, nil
		},
		OnError: func(e *simworld.StepError) bool {
			switch e.Step {
			case simworld.StepJoinKubernetes:
				if ctx.Err() == nil {
					t.Errorf("boot %s: %v", e.Instance.ID, e.Err)
				}
			case simworld.StepExclude:
				t.Errorf("boot %s: exclude from yarn: %v", e.Instance.ID, e.Err)
			case simworld.StepStartNodeManager:
				if ctx.Err() == nil {
					t.Errorf("boot %s: start nodemanager: %v", e.Instance.ID, e.Err)
				}
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.aws = awssim.New(awssim.Config{LaunchDelay: 200 * time.Millisecond, BootDelay: o.bootDelay,
		TerminateDelay: 200 * time.Millisecond, Logger: log,
		BootHook: machines.Boot, TerminateHook: machines.Gone})
	// The fleet's machines are up from the start: Kubernetes nodes, and
	// NodeManagers of excluded hosts, as a booted instance's.
	for _, h := range o.fleet {
		labels := maps.Clone(gpuLabels)
		maps.Copy(labels, fleetLabel)
		if err := machines.Join(simworld.Node{Name: h, GPUs: 4, Model: "A100", Labels: labels,
			Taints: []corev1.Taint{gpuTaint}}); err != nil {
			t.Fatal(err)
		}
	}
	// Up means Ready: KWOK marks a node Ready shortly after it is created,
	// and a broker started before that would see a fleet host it cannot
	// use yet and rightly burst to the cloud for the first demand. An
	// operator's fleet is running before the broker starts.
	for _, h := range o.fleet {
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := kubeEnv.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
			if err == nil && slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
				return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fleet host %s not Ready in Kubernetes after 30s (%v)", h, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	minN, maxN := 0, o.maxNodes
	cloudCfg := app.CloudConfig{}
	if !o.noCloud {
		endpoint, err := w.aws.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.aws.Close(context.Background()) })
		if err := w.aws.CreateGroup(awssim.GroupSpec{Name: poolName, Min: 0, Max: o.maxNodes, InstanceType: "p4d.24xlarge"}); err != nil {
			t.Fatal(err)
		}
		cloudCfg = app.CloudConfig{Region: "us-east-1", Endpoint: endpoint,
			Credentials: credentials.NewStaticCredentialsProvider("e2e", "e2e", ""),
			Pools:       append([]cloud.PoolConfig{{Name: poolName, GPUsPerNode: 4, GPUModel: "A100", MinNodes: &minN, MaxNodes: &maxN}}, w.extraPools(o.extra)...),
			Wrap: func(provider *cloud.Provider) engine.NodePool {
				return recordingPool{Provider: provider, log: w.calls, onTerminate: func(id string) {
					// A terminating machine's NodeManager cannot be restarted.
					host := machines.Terminating(id)
					w.termMu.Lock()
					w.terminations = append(w.terminations, terminated{Host: host, YARNState: ysim.NodeState(host)})
					w.termMu.Unlock()
				}}
			}}
	}
	kcfg := k8s.Config{GPUNodeLabels: map[string]string{"infra-type": "gpu"}}
	if len(o.extra.startupTaints) > 0 {
		kcfg.StartupTaints = append(append([]string(nil), k8s.DefaultStartupTaints...), o.extra.startupTaints...)
	}
	// The broker, assembled as serve assembles it, on the simulators and
	// the real control plane.
	w.app, err = app.Open(ctx, app.Config{Store: st, Policy: pol, Logger: log, Pools: pools, FleetMembers: fleetMembers,
		YARN: app.YARNConfig{Client: yclient, AdminAddress: []string{yadminAddr}, Exclude: yexclude,
			RestartNodeManager: machines.RestartNodeManager,
			// yarnsim launches a container as it allocates it: no
			// allocation waits to launch, so a hold of seconds suffices.
			CordonHold: 2 * time.Second},
		Kubernetes: app.KubernetesConfig{Client: kubeEnv.Client, Adapter: kcfg, DrainStep: 2 * time.Second},
		Cloud:      cloudCfg,
		Period:     time.Second, BatchWindow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.app.Close)
	w.start()
	t.Cleanup(w.stop)
	return w
}

// kwokNodes is the world's Kubernetes side: KWOK nodes of the shared
// control plane. While w.draSlices is set, a node that joins publishes its
// GPUs as a ResourceSlice, as NVIDIA's DRA driver would.
type kwokNodes struct{ w *world }

func (k kwokNodes) AddNode(ctx context.Context, n simworld.Node) error {
	_, err := kubeEnv.AddNode(ctx, k8senv.NodeSpec{Name: n.Name, GPUs: n.GPUs, Model: n.Model, MIG: n.MIG,
		Labels: n.Labels, Taints: n.Taints, ProviderID: n.ProviderID})
	switch {
	case k.w.draSlices.Load() && n.MIG != nil:
		publishMIGSlice(ctx, k.w.t, n.Name, e2eMIGProfile, 4*e2eMIGPerGPU)
	case k.w.draSlices.Load():
		publishGPUSlice(ctx, k.w.t, n.Name, n.Model)
	}
	return err
}

func (k kwokNodes) RemoveNode(ctx context.Context, name string) error {
	return kubeEnv.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
}

// start runs a new runtime: a broker process starting with empty memory
// on the same database, clusters and cloud.
func (w *world) start() {
	w.t.Helper()
	rt, err := w.app.NewRuntime()
	if err != nil {
		w.t.Fatal(err)
	}
	w.rt = rt
	rctx, rcancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	w.cancelRT, w.rtDone = rcancel, done
	go func() { defer close(done); rt.Run(rctx, w.app.Trigger()) }()
}

// crash stops the runtime abruptly, as a killed process would: whatever
// step was in flight is abandoned; only the database remembers.
func (w *world) crash() {
	w.cancelRT()
	<-w.rtDone
}

// stop ends the broker and removes what the test put in the shared
// control plane, so the next test starts from an empty cluster.
func (w *world) stop() {
	w.crash()
	ctx := context.Background()
	c := kubeEnv.Client
	c.CoreV1().Namespaces().Delete(ctx, w.ns, metav1.DeleteOptions{})
	zero := int64(0)
	c.CoreV1().Pods(w.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "infra-type in (gpu,other)"})
	c.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: e2eSliceLabel})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "infra-type in (gpu,other)"})
		if err == nil && len(nodes.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.t.Errorf("GPU nodes of %s still present after cleanup", w.ns)
}

// eventually polls cond every 200 ms until it holds or d passes.
func (w *world) eventually(d time.Duration, what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			// The broker's latest decisions usually say why.
			if ds, err := w.st.ListDecisions(context.WithoutCancel(w.ctx), store.DecisionFilter{Limit: 15}); err == nil {
				for _, d := range ds {
					w.t.Logf("decision %s %s demand=%s node=%s: %s", d.At.Format(time.RFC3339), d.Kind, d.Demand, d.Node, d.Reason)
				}
			}
			w.t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *world) desired() int {
	st, ok := w.aws.Group(poolName)
	if !ok {
		w.t.Fatalf("group %s is gone", poolName)
	}
	return st.Desired
}

// tapHandler hands every record to tap and passes those its handler
// enables on to it.
type tapHandler struct {
	slog.Handler
	tap func(slog.Record)
}

func (h tapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tapHandler) Handle(ctx context.Context, r slog.Record) error {
	h.tap(r)
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tapHandler{Handler: h.Handler.WithAttrs(as), tap: h.tap}
}

func (h tapHandler) WithGroup(name string) slog.Handler {
	return tapHandler{Handler: h.Handler.WithGroup(name), tap: h.tap}
}

type testWriter struct{ t *testing.T }

func (tw testWriter) Write(p []byte) (int, error) {
	tw.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
