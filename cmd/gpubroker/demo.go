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

func runDemo(ctx context.Context, e env, args []string) error {
	fs := newFlags("demo", e)
	listen := fs.String("listen", "127.0.0.1:8080", "dashboard and API `address` (port 0 picks a free one)")
	speed := fs.Float64("speed", 300, "time compression of the workload: trace seconds per real second")
	seedFlag := fs.Uint64("seed", 1, "workload random seed")
	profile := fs.String("profile", "multigpu50", "workload mix fitted to the openb trace: default or multigpu50")
	runFor := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	logFile := fs.String("log-file", "", "write the JSON log to this `file` (default: a new file in the temporary directory; its path is printed)")
	verbose := fs.Bool("verbose", false, "stream the JSON log to stderr instead of one line per decision on the terminal")
	nodes := fs.Int("nodes", 0, "run at size: a pool of up to `N` nodes that starts with N booting and keeps at least N/2 (0: the 10-node reference scenario)")
	load := fs.Float64("load", 1, "workload arrival rate multiplier (with --nodes, e.g. 100 to keep 5,000 nodes busy; with --fleet, default: the fleet's GPUs over 50)")
	fleetN := fs.Int("fleet", 0, "run on a fleet of `N` owned 8-GPU hosts and no cloud at all: they start on Kubernetes, and the broker hands them between the sides (0: the cloud pools)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *nodes < 0 || *load <= 0 || *fleetN < 0 {
		return usagef("--nodes and --fleet must be 0 or more and --load more than 0, got %d, %d and %g", *nodes, *fleetN, *load)
	}
	if *nodes > 0 && *fleetN > 0 {
		return usagef("--nodes sizes the cloud pools and --fleet replaces them with owned hosts: use one of them")
	}
	var prof workload.Profile
	switch *profile {
	case "default":
		prof = workload.OpenB()
	case "multigpu50":
		prof = workload.OpenBMultiGPU50()
	default:
		return usagef("--profile: use default or multigpu50, got %q", *profile)
	}
	gen, err := workload.NewGenerator(prof, *seedFlag, *speed)
	if err != nil {
		return usagef("--speed: %s", err)
	}
	log, logPath, closeLog, err := demoLogger(e, *level, *logFile, *verbose)
	if err != nil {
		return err
	}
	defer closeLog()
	if logPath != "" {
		fmt.Fprintf(e.stdout, "gpubroker demo: JSON log in %s (--verbose streams it here instead)\n", logPath)
	}
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
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
	case *fleetN > 0:
		atFleet(c, *fleetN)
		if !flagSet(fs, "load") {
			*load = float64(*fleetN*demoFleetGPUs) / 50
		}
	case *nodes > 0:
		atSize(c, &group, &group8, *nodes)
	}

	// Simulated YARN: the RM REST API on a loopback port.
	ysim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 60}, {Path: "root.research", Capacity: 40}}})
	if err != nil {
		return err
	}
	yln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ysrv := &http.Server{Handler: ysim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go ysrv.Serve(yln)
	defer ysrv.Close()
	yclient, err := yarn.NewClient(yarn.Config{RMs: []string{"http://" + yln.Addr().String()}, Logger: log})
	if err != nil {
		return err
	}
	// Its admin port (Hadoop IPC) and exclude file: nodes move through the
	// same graceful decommission and recommission as in production.
	ydir, err := os.MkdirTemp("", "gpubroker-demo-yarn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ydir)
	yadmin, err := yarnsim.NewAdminServer(ysim, yarnsim.AdminConfig{ExcludePath: filepath.Join(ydir, "exclude.xml")})
	if err != nil {
		return err
	}
	yadminAddr, err := yadmin.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer yadmin.Close()
	yexclude, err := yarn.NewExcludeFile(filepath.Join(ydir, "exclude.xml"))
	if err != nil {
		return err
	}

	// Simulated Kubernetes: the fake API with a small scheduler and kubelet.
	kc := k8ssim.New(k8ssim.Config{Logger: log})
	for q, name := range qosClasses {
		prio, _ := q.Priority()
		if err := kc.EnsurePriorityClass(ctx, name, int32(prio)); err != nil {
			return err
		}
	}
	go kc.Run(ctx, 200*time.Millisecond)
	// The bootstrap of a node that joins YARN cordons it on Kubernetes,
	// as the broker's own release would.
	kcfg := kubeConfig(kubernetesConfig{GPUNodeLabels: map[string]string{"infra-type": "gpu"}})
	boot, err := k8s.NewActuator(kc.Client(), kcfg, log)
	if err != nil {
		return err
	}

	joiner := &demoJoiner{ctx: ctx, kc: kc, ysim: ysim, yadmin: yadmin, yexclude: yexclude, kside: bootCordon{boot}, log: log,
		live: map[string]bool{}}
	var cloudCfg app.CloudConfig
	if *fleetN > 0 {
		// Owned machines: up from the start, no cloud behind them.
		if err := joiner.joinFleet(c.fleet[demoFleet].Hosts); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "gpubroker demo: a fleet of %d owned %d-GPU hosts, no cloud; they start on Kubernetes\n", *fleetN, demoFleetGPUs)
	} else {
		// Simulated AWS: autoscaling groups whose instances join a side.
		aws := awssim.New(awssim.Config{LaunchDelay: time.Second, BootDelay: 2 * time.Second, TerminateDelay: time.Second,
			BootHook: joiner.boot, TerminateHook: joiner.gone, Logger: log})
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
		YARN: app.YARNConfig{Client: yclient, AdminAddress: []string{yadminAddr}, Exclude: yexclude,
			RestartNodeManager: joiner.restartNodeManager,
			// yarnsim launches a container as it allocates it: no
			// allocation waits to launch, so the demo's cordon holds an
			// empty node for seconds, not the RM's 10-minute expiry.
			CordonHold: 5 * time.Second},
		Kubernetes: app.KubernetesConfig{Client: kc.Client(), Adapter: kcfg},
		Cloud:      cloudCfg,
		Logger:     log, Period: 2 * time.Second, BatchWindow: 500 * time.Millisecond,
		Listen: *listen,
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

	go runWorkload(ctx, gen, *load, kc, ysim, yclient, log)
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

// demoJoiner turns a booted instance into a node of the side with more
// unmet GPU demand, and registers it on the other side as released (a
// cordoned Kubernetes node; a NodeManager whose host is in the exclude
// file, so the RM turns it away as DECOMMISSIONED), so the broker can hand
// it over later. A real node bootstraps both agents the same way.
type demoJoiner struct {
	ctx      context.Context
	kc       *k8ssim.Cluster
	ysim     *yarnsim.Sim
	yadmin   *yarnsim.AdminServer
	yexclude *yarn.ExcludeFile
	kside    interface {
		Cordon(context.Context, string) error
	}
	log *slog.Logger
	mu  sync.Mutex
	// live are the hosts of running instances: only those have a
	// NodeManager to restart.
	live map[string]bool
}

// restartNodeManager is the demo's yarn.nodemanager_restart hook: it
// restarts the simulated NodeManager of a running instance, and fails for
// a host whose instance is gone, as ssh to it would.
func (j *demoJoiner) restartNodeManager(ctx context.Context, host string) error {
	j.mu.Lock()
	live := j.live[host]
	j.mu.Unlock()
	if !live {
		return fmt.Errorf("restart nodemanager of %s: no running instance has that host", host)
	}
	return j.yadmin.RestartNodeManager(ctx, host)
}

func (j *demoJoiner) boot(in awssim.Instance) {
	j.mu.Lock()
	defer j.mu.Unlock()
	host := in.PrivateDNSName
	toYARN := j.yarnPending() > j.k8sPending()
	// The instance's GPUs and model come from its group's tags, as a real
	// node's device plugin and GPU feature discovery would report them.
	gpus, err := strconv.Atoi(in.Tags["gpubroker.io/gpus-per-node"])
	if err != nil || gpus <= 0 {
		j.log.Warn("demo: instance without a GPU count tag", "node", host, "group", in.Group)
		return
	}
	if j.join(host, gpus, in.Tags["gpubroker.io/gpu-model"], "aws:///us-east-1a/"+in.ID, toYARN) {
		j.log.Info("demo: instance joined", "node", host, "instance", in.ID, "side", sideName(toYARN))
	}
}

func sideName(toYARN bool) string {
	if toYARN {
		return "yarn"
	}
	return "kubernetes"
}

// join registers a machine on both sides, owned by YARN or Kubernetes and
// released on the other; it reports whether it joined. The caller holds
// j.mu.
func (j *demoJoiner) join(host string, gpus int, model, providerID string, toYARN bool) bool {
	labels := map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia", "nvidia.com/gpu.product": model}
	taints := []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	if err := j.kc.AddNode(j.ctx, k8ssim.NodeSpec{Name: host, GPUs: gpus, Labels: labels, Taints: taints,
		ProviderID: providerID}); err != nil {
		j.log.Warn("demo: join kubernetes", "node", host, "err", err)
		return false
	}
	if !toYARN {
		if _, err := j.yexclude.Add(host, 0); err != nil {
			j.log.Warn("demo: exclude from yarn", "node", host, "err", err)
			return false
		}
	}
	if err := j.yadmin.StartNodeManager(yarnsim.NodeSpec{Host: host, GPUs: gpus}); err != nil {
		j.log.Warn("demo: join yarn", "node", host, "err", err)
		return false
	}
	j.live[host] = true
	if toYARN {
		if err := j.kside.Cordon(j.ctx, host); err != nil {
			j.log.Warn("demo: cordon", "node", host, "err", err)
		}
	}
	return true
}

func (j *demoJoiner) gone(in awssim.Instance) {
	host := in.PrivateDNSName
	j.mu.Lock()
	delete(j.live, host)
	j.mu.Unlock()
	if err := j.kc.RemoveNode(j.ctx, host); err != nil {
		j.log.Debug("demo: remove kubernetes node", "node", host, "err", err)
	}
	if err := j.ysim.RemoveNode(host); err != nil {
		j.log.Debug("demo: remove NodeManager", "node", host, "err", err)
	}
	// The bootstrap's own exclusion goes with the machine, so a later
	// machine with the same name is not turned away.
	if _, err := j.yexclude.Remove(host); err != nil {
		j.log.Warn("demo: exclude file", "node", host, "err", err)
	}
}

func (j *demoJoiner) yarnPending() int {
	_, _, gpus := j.ysim.Counts()
	return gpus
}

func (j *demoJoiner) k8sPending() int {
	pods, err := j.kc.Client().CoreV1().Pods("").List(j.ctx, metav1.ListOptions{})
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

// joinFleet brings the fleet's hosts up on Kubernetes, registered on YARN
// as released (excluded NodeManagers), as owned machines that ran
// Kubernetes before the broker came would be.
func (j *demoJoiner) joinFleet(hosts []string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, h := range hosts {
		if !j.join(h, demoFleetGPUs, "A100", "", false) {
			return fmt.Errorf("demo: host %s of the fleet did not join (the log says why)", h)
		}
	}
	return nil
}
