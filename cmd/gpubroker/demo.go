package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
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
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

const (
	demoPool  = "gpu-training-group"
	demoPool8 = "gpu-8x-group"
)

// demoConfig is the reference scenario, shortened so the story plays out
// in minutes: one shared GPU pool of 4-GPU nodes (0 to 10), two tenants.
func demoConfig() *config {
	pol := broker.DefaultPolicy()
	pol.ClusterMaxGPUs = 50
	pol.ScaleDownUnneeded = broker.Duration(45 * time.Second)
	pol.MaxProvisionTime = broker.Duration(2 * time.Minute)
	pol.DrainTimeout = broker.Duration(time.Minute)
	return &config{
		policy: pol,
		pools: []broker.Pool{
			{Name: demoPool, Provider: "aws", Group: demoPool, GPUModel: "A10G", GPUsPerNode: 4,
				MinNodes: 0, MaxNodes: 10, Sides: broker.PoolShared, PricePerHour: 5.67,
				Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
				Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}},
			// The openb workload asks 8 GPUs for about one task in
			// fourteen (the trace's G2 nodes have 8): without a pool of
			// 8-GPU nodes that demand is unsatisfiable for good.
			{Name: demoPool8, Provider: "aws", Group: demoPool8, GPUModel: "A100", GPUsPerNode: 8,
				MinNodes: 0, MaxNodes: 4, Sides: broker.PoolShared, PricePerHour: 32.77,
				Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
				Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}},
		},
		tenants: []broker.Tenant{
			{Name: "training", BasePriority: 0, GuaranteedGPUs: 8, MaxGPUs: 32, Weight: 2,
				YARNQueues: []string{"root.training"}, Namespaces: []string{"ml-training"}},
			{Name: "research", BasePriority: 0, GuaranteedGPUs: 4, MaxGPUs: 24, Weight: 1,
				YARNQueues: []string{"root.research"}, Namespaces: []string{"research"}},
		},
	}
}

// qosClasses maps the trace's QoS classes to PriorityClasses.
var qosClasses = map[workload.QoS]string{
	workload.QoSGuaranteed: "high-priority-training", workload.QoSLS: "latency-sensitive",
	workload.QoSBurstable: "burstable", workload.QoSBE: "best-effort",
}

// demoOptions are demo's flags, checked.
type demoOptions struct {
	listen, level, logFile string
	runFor                 time.Duration
	verbose                bool
	nodes, fleet           int
	load                   float64
	gen                    *workload.Generator
}

func parseDemoFlags(e env, args []string) (demoOptions, error) {
	var o demoOptions
	fs := newFlags("demo", e)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "dashboard and API `address` (port 0 picks a free one)")
	speed := fs.Float64("speed", 300, "time compression of the workload: trace seconds per real second")
	seedFlag := fs.Uint64("seed", 1, "workload random seed")
	profile := fs.String("profile", "multigpu50", "workload mix fitted to the openb trace: default or multigpu50")
	fs.DurationVar(&o.runFor, "duration", 0, "stop after this long (0: until interrupted)")
	fs.StringVar(&o.level, "log-level", "info", "log `level`: debug, info, warn, error")
	fs.StringVar(&o.logFile, "log-file", "", "write the JSON log to this `file` (default: a new file in the temporary directory; its path is printed)")
	fs.BoolVar(&o.verbose, "verbose", false, "stream the JSON log to stderr instead of one line per decision on the terminal")
	fs.IntVar(&o.nodes, "nodes", 0, "run at size: a pool of up to `N` nodes that starts with N booting and keeps at least N/2 (0: the 10-node reference scenario)")
	fs.Float64Var(&o.load, "load", 1, "workload arrival rate multiplier (with --nodes, e.g. 100 to keep 5,000 nodes busy; with --fleet, default: the fleet's GPUs over 50)")
	fs.IntVar(&o.fleet, "fleet", 0, "run on a fleet of `N` owned 8-GPU hosts and no cloud at all: they start on Kubernetes, and the broker hands them between the sides (0: the cloud pools)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.nodes < 0 || o.load <= 0 || o.fleet < 0 {
		return o, usagef("--nodes and --fleet must be 0 or more and --load more than 0, got %d, %d and %g", o.nodes, o.fleet, o.load)
	}
	if o.nodes > 0 && o.fleet > 0 {
		return o, usagef("--nodes sizes the cloud pools and --fleet replaces them with owned hosts: use one of them")
	}
	if o.fleet > 0 && !flagSet(fs, "load") {
		o.load = float64(o.fleet*demoFleetGPUs) / 50
	}
	var prof workload.Profile
	switch *profile {
	case "default":
		prof = workload.OpenB()
	case "multigpu50":
		prof = workload.OpenBMultiGPU50()
	default:
		return o, usagef("--profile: use default or multigpu50, got %q", *profile)
	}
	var err error
	if o.gen, err = workload.NewGenerator(prof, *seedFlag, *speed); err != nil {
		return o, usagef("--speed: %s", err)
	}
	return o, nil
}

func runDemo(ctx context.Context, e env, args []string) error {
	o, err := parseDemoFlags(e, args)
	if err != nil {
		return err
	}
	log, logPath, closeLog, err := demoLogger(e, o.level, o.logFile, o.verbose)
	if err != nil {
		return err
	}
	defer closeLog()
	if logPath != "" {
		fmt.Fprintf(e.stdout, "gpubroker demo: JSON log in %s (--verbose streams it here instead)\n", logPath)
	}
	if o.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.runFor)
		defer cancel()
	}

	// A private PostgreSQL, removed on exit.
	pg, err := pgserver.Start(ctx, pgserver.Config{Fast: true})
	if err != nil {
		return fmt.Errorf("start the demo's PostgreSQL: %w", err)
	}
	defer pg.Stop()
	if err := createDatabase(ctx, pg.URL, "gpubroker"); err != nil {
		return err
	}
	c := demoConfig()
	c.file.Database.URL = pg.DatabaseURL("gpubroker")
	group := awssim.GroupSpec{Name: demoPool, Min: 0, Max: 10, InstanceType: "g5.12xlarge",
		Tags: map[string]string{"gpubroker.io/pool": demoPool, "gpubroker.io/gpus-per-node": "4", "gpubroker.io/gpu-model": "A10G"}}
	group8 := awssim.GroupSpec{Name: demoPool8, Min: 0, Max: 4, InstanceType: "p4d.24xlarge",
		Tags: map[string]string{"gpubroker.io/pool": demoPool8, "gpubroker.io/gpus-per-node": "8", "gpubroker.io/gpu-model": "A100"}}
	switch {
	case o.fleet > 0:
		atFleet(c, o.fleet)
	case o.nodes > 0:
		atSize(c, &group, &group8, o.nodes)
	}

	yw, err := startDemoYARN(log)
	if err != nil {
		return err
	}
	defer yw.close()
	ysim, yclient, yexclude := yw.sim, yw.client, yw.exclude

	kc, kcfg, boot, err := startDemoKubernetes(ctx, log)
	if err != nil {
		return err
	}

	machines, err := newDemoMachines(ctx, kc, yw, boot, log)
	if err != nil {
		return err
	}
	var cloudCfg app.CloudConfig
	if o.fleet > 0 {
		// Owned machines: up from the start, no cloud behind them.
		if err := joinDemoFleet(machines, c.fleet[demoFleet].Hosts, log); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "gpubroker demo: a fleet of %d owned %d-GPU hosts, no cloud; they start on Kubernetes\n", o.fleet, demoFleetGPUs)
	} else {
		// Simulated AWS: autoscaling groups whose instances join a side,
		// one boot at a time (each lists every pod to pick the side).
		var bootMu sync.Mutex
		bootOne := func(in awssim.Instance) {
			bootMu.Lock()
			defer bootMu.Unlock()
			machines.Boot(in)
		}
		aws := awssim.New(awssim.Config{LaunchDelay: time.Second, BootDelay: 2 * time.Second, TerminateDelay: time.Second,
			BootHook: bootOne, TerminateHook: machines.Gone, Logger: log})
		awsAddr, err := aws.Start("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer aws.Close(context.WithoutCancel(ctx))
		for _, g := range []awssim.GroupSpec{group, group8} {
			if err := aws.CreateGroup(g); err != nil {
				return err
			}
		}
		cloudCfg = app.CloudConfig{Region: "us-east-1", Endpoint: awsAddr,
			Credentials: credentials.NewStaticCredentialsProvider("demo", "demo", "")}
	}

	var secret string // the admin token, made once the store is open
	// The broker, assembled as serve assembles it, on the simulators'
	// endpoints.
	m, err := openApp(ctx, app.Config{
		DatabaseURL: c.file.Database.URL, Migrate: true, Seed: true,
		Pools: c.pools, FleetMembers: c.fleet, Tenants: c.tenants, Policy: c.policy,
		YARN: app.YARNConfig{Client: yclient, AdminAddress: []string{yw.adminAddr}, Exclude: yexclude,
			RestartNodeManager: machines.RestartNodeManager,
			// yarnsim launches a container as it allocates it: no
			// allocation waits to launch, so the demo's cordon holds an
			// empty node for seconds, not the RM's 10-minute expiry.
			CordonHold: 5 * time.Second},
		Kubernetes: app.KubernetesConfig{Client: kc.Client(), Adapter: kcfg},
		Cloud:      cloudCfg,
		Logger:     log, Period: 2 * time.Second, BatchWindow: 500 * time.Millisecond,
		Listen: o.listen,
		Ready: func(addr string) {
			fmt.Fprintf(e.stdout, "gpubroker demo: dashboard at http://%s\n", addr)
			fmt.Fprintf(e.stdout, "admin token: %s\n", secret)
			fmt.Fprintf(e.stdout, "open http://%s/#token=%s to sign in; Ctrl-C stops everything\n", addr, secret)
		},
	})
	if err != nil {
		return err
	}
	defer m.Close()
	secret, _, err = m.Store().CreateToken(ctx, "demo-admin", store.RoleAdmin, "")
	if err != nil {
		return err
	}

	go runWorkload(ctx, o.gen, o.load, kc, ysim, yclient, log)
	if err := runApp(ctx, m); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "gpubroker demo: stopped")
	return nil
}

func createDatabase(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// bootCordon cordons a node as released, as a bootstrap script would.
type bootCordon struct{ act *k8s.Actuator }

func (b bootCordon) Cordon(ctx context.Context, node string) error {
	return b.act.Cordon(ctx, node, string(broker.OwnerNone))
}

// newDemoMachines is the demo's machine bootstrap (internal/simworld): a
// booted instance joins the side with more unmet GPU demand, and registers
// on the other side as released (a cordoned Kubernetes node; a
// NodeManager whose host is in the exclude file, so the RM turns it away
// as DECOMMISSIONED), so the broker can hand it over later. A real node
// bootstraps both agents the same way. A failed step is logged and stops
// the machine's bootstrap.
func newDemoMachines(ctx context.Context, kc *k8ssim.Cluster, yw *demoYARN, kside bootCordon, log *slog.Logger) (*simworld.Bootstrap, error) {
	return simworld.New(simworld.Config{Context: ctx, Kube: simworld.Sim{Cluster: kc},
		Sim: yw.sim, Admin: yw.admin, Exclude: yw.exclude,
		Node:   demoInstanceNode,
		ToYARN: func() bool { return yarnPending(yw.sim) > k8sPending(ctx, kc) },
		Cordon: kside.Cordon,
		OnError: func(e *simworld.StepError) bool {
			demoStepFailed(log, e)
			return false
		},
		Joined: func(in awssim.Instance, toYARN bool) {
			log.Info("demo: instance joined", "node", in.PrivateDNSName, "instance", in.ID, "side", sideName(toYARN))
		}})
}

// demoInstanceNode is the node a booted instance joins as: its GPUs and
// model come from its group's tags, as a real node's device plugin and
// GPU feature discovery would report them.
func demoInstanceNode(in awssim.Instance) (simworld.Node, error) {
	gpus, err := strconv.Atoi(in.Tags["gpubroker.io/gpus-per-node"])
	if err != nil || gpus <= 0 {
		return simworld.Node{}, errors.New("instance without a GPU count tag")
	}
	return demoNode(in.PrivateDNSName, gpus, in.Tags["gpubroker.io/gpu-model"], "aws:///us-east-1a/"+in.ID), nil
}

func demoNode(host string, gpus int, model, providerID string) simworld.Node {
	return simworld.Node{Name: host, GPUs: gpus, ProviderID: providerID,
		Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia", "nvidia.com/gpu.product": model},
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}
}

// demoStepFailed logs a failed step of a machine's bootstrap or departure.
func demoStepFailed(log *slog.Logger, e *simworld.StepError) {
	switch e.Step {
	case simworld.StepNode:
		log.Warn("demo: instance without a GPU count tag", "node", e.Host, "group", e.Instance.Group)
	case simworld.StepLeaveKubernetes:
		log.Debug("demo: remove kubernetes node", "node", e.Host, "err", e.Err)
	case simworld.StepRemoveNodeManager:
		log.Debug("demo: remove NodeManager", "node", e.Host, "err", e.Err)
	case simworld.StepUnexclude:
		log.Warn("demo: exclude file", "node", e.Host, "err", e.Err)
	default: // join kubernetes, exclude from yarn, join yarn, cordon
		log.Warn("demo: "+string(e.Step), "node", e.Host, "err", e.Err)
	}
}

func sideName(toYARN bool) string {
	if toYARN {
		return "yarn"
	}
	return "kubernetes"
}

func yarnPending(ysim *yarnsim.Sim) int {
	_, _, gpus := ysim.Counts()
	return gpus
}

func k8sPending(ctx context.Context, kc *k8ssim.Cluster) int {
	pods, err := kc.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			for _, ctr := range p.Spec.Containers {
				q := ctr.Resources.Requests[k8ssim.GPUResource]
				n += int(q.Value())
			}
		}
	}
	return n
}

// runWorkload submits generated tasks at their arrival times divided by
// load: Kubernetes pods to k8ssim, YARN apps to yarnsim, each finishing
// after its run time.
func runWorkload(ctx context.Context, gen *workload.Generator, load float64, kc *k8ssim.Cluster, ysim *yarnsim.Sim, yc *yarn.Client, log *slog.Logger) {
	start := time.Now()
	apps := &yarnApps{sim: ysim, client: yc, runFor: map[string]time.Duration{}, started: map[string]time.Time{}}
	go apps.finisher(ctx, log)
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	for {
		t := gen.Next()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(time.Duration(float64(t.Arrival) / load)))):
		}
		// Two tenants, by name: a deterministic split like the side's.
		tenant, ns, queue := "training", "ml-training", "root.training"
		if n, _ := strconv.Atoi(t.Name[len(t.Name)-1:]); n%3 == 0 {
			tenant, ns, queue = "research", "research", "root.research"
		}
		switch t.Side {
		case broker.SourceK8s:
			err := kc.SubmitPod(ctx, k8ssim.PodSpec{Namespace: ns, Name: t.Name, GPUs: t.GPUs,
				PriorityClassName: qosClasses[t.QoS], Priority: int32(t.Priority),
				NodeSelector: map[string]string{"infra-type": "gpu"}, Tolerations: tol, Duration: t.Duration,
				Annotations: map[string]string{"gpubroker.io/preemptible": strconv.FormatBool(t.Preemptible)}})
			if err != nil && ctx.Err() == nil {
				log.Warn("demo: submit pod", "task", t.Name, "err", err)
			}
		default:
			var tags []string
			if !t.Preemptible {
				tags = append(tags, yarn.TagNotPreemptible)
			}
			id, err := ysim.Submit(yarnsim.AppSpec{Name: t.Name, Queue: queue, Priority: t.Priority, Tags: tags,
				Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: t.GPUs}}})
			if err != nil {
				log.Warn("demo: submit app", "task", t.Name, "err", err)
				continue
			}
			apps.add(id, t.Duration)
		}
		log.Debug("demo: task", "name", t.Name, "side", t.Side, "tenant", tenant, "gpus", t.GPUs, "qos", t.QoS, "run", t.Duration)
	}
}

// yarnApps finishes YARN apps once they have run for their run time.
type yarnApps struct {
	sim     *yarnsim.Sim
	client  *yarn.Client
	mu      sync.Mutex
	runFor  map[string]time.Duration
	started map[string]time.Time
}

func (a *yarnApps) add(id string, d time.Duration) {
	a.mu.Lock()
	a.runFor[id] = d
	a.mu.Unlock()
}

func (a *yarnApps) finisher(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		obs, err := a.client.Observe(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				log.Debug("demo: observe yarn", "err", err)
			}
			continue
		}
		now := time.Now()
		a.mu.Lock()
		for id, d := range a.runFor {
			app, ok := obs.App(id)
			if !ok {
				delete(a.runFor, id)
				delete(a.started, id)
				continue
			}
			if app.PendingContainers() > 0 {
				continue
			}
			s, ok := a.started[id]
			if !ok {
				a.started[id] = now
				continue
			}
			if now.Sub(s) >= d {
				if err := a.sim.Finish(id); err != nil {
					log.Debug("demo: finish app", "app", id, "err", err)
				}
				delete(a.runFor, id)
				delete(a.started, id)
			}
		}
		a.mu.Unlock()
	}
}

// joinDemoFleet brings the fleet's hosts up on Kubernetes, registered on
// YARN as released (excluded NodeManagers), as owned machines that ran
// Kubernetes before the broker came would be.
func joinDemoFleet(machines *simworld.Bootstrap, hosts []string, log *slog.Logger) error {
	for _, h := range hosts {
		if err := machines.Join(demoNode(h, demoFleetGPUs, "A100", "")); err != nil {
			var e *simworld.StepError
			if errors.As(err, &e) {
				demoStepFailed(log, e)
			}
			return fmt.Errorf("demo: host %s of the fleet did not join (the log says why)", h)
		}
	}
	return nil
}

// demoYARN is the demo's simulated YARN: the RM REST API on a loopback
// port, its admin port (Hadoop IPC) and its exclude file, so nodes move
// through the same graceful decommission and recommission as in
// production.
type demoYARN struct {
	sim       *yarnsim.Sim
	client    *yarn.Client
	admin     *yarnsim.AdminServer
	adminAddr string
	exclude   *yarn.ExcludeFile
	closers   []func()
}

func (y *demoYARN) close() {
	for i := len(y.closers) - 1; i >= 0; i-- {
		y.closers[i]()
	}
}

// startDemoYARN starts the demo's simulated YARN; close stops it.
func startDemoYARN(log *slog.Logger) (y *demoYARN, err error) {
	y = &demoYARN{}
	defer func() {
		if err != nil {
			y.close()
		}
	}()
	if y.sim, err = yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 60}, {Path: "root.research", Capacity: 40}}}); err != nil {
		return nil, err
	}
	yln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: y.sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(yln)
	y.closers = append(y.closers, func() { srv.Close() })
	if y.client, err = yarn.NewClient(yarn.Config{RMs: []string{"http://" + yln.Addr().String()}, Logger: log}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpubroker-demo-yarn-")
	if err != nil {
		return nil, err
	}
	y.closers = append(y.closers, func() { os.RemoveAll(dir) })
	exclude := filepath.Join(dir, "exclude.xml")
	if y.admin, err = yarnsim.NewAdminServer(y.sim, yarnsim.AdminConfig{ExcludePath: exclude}); err != nil {
		return nil, err
	}
	if y.adminAddr, err = y.admin.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	y.closers = append(y.closers, func() { y.admin.Close() })
	if y.exclude, err = yarn.NewExcludeFile(exclude); err != nil {
		return nil, err
	}
	return y, nil
}

// startDemoKubernetes starts the demo's simulated Kubernetes (the fake API
// with a small scheduler and kubelet, and the workload's PriorityClasses)
// until ctx ends. It returns the adapter's configuration and the cordon a
// node's bootstrap applies when the node joins YARN, as the broker's own
// release would.
func startDemoKubernetes(ctx context.Context, log *slog.Logger) (*k8ssim.Cluster, k8s.Config, bootCordon, error) {
	kc := k8ssim.New(k8ssim.Config{Logger: log})
	for q, name := range qosClasses {
		prio, _ := q.Priority()
		if err := kc.EnsurePriorityClass(ctx, name, int32(prio)); err != nil {
			return nil, k8s.Config{}, bootCordon{}, err
		}
	}
	go kc.Run(ctx, 200*time.Millisecond)
	kcfg := kubeConfig(kubernetesConfig{GPUNodeLabels: map[string]string{"infra-type": "gpu"}})
	act, err := k8s.NewActuator(kc.Client(), kcfg, log)
	if err != nil {
		return nil, k8s.Config{}, bootCordon{}, err
	}
	return kc, kcfg, bootCordon{act}, nil
}
