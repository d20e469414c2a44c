package simworld

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// Node is the Kubernetes node a machine joins as; its GPUs also size its
// NodeManager.
type Node struct {
	Name string
	GPUs int
	// Model is the nvidia.com/gpu.product label value (omitted if empty).
	Model  string
	Labels map[string]string
	Taints []corev1.Taint
	// ProviderID is spec.providerID, e.g. "aws:///us-east-1a/i-0abc"
	// (empty for a host of an owned fleet).
	ProviderID string
	// MIG, when set, partitions the node's GPUs into these MIG devices by
	// profile (a Kube side that cannot model MIG refuses the node).
	MIG map[string]int
}

// Kube is the Kubernetes side of the world: a machine's node joins it and
// leaves it.
type Kube interface {
	AddNode(ctx context.Context, n Node) error
	RemoveNode(ctx context.Context, name string) error
}

// Step names a step of a machine's bootstrap or departure.
type Step string

// The steps, in the order a machine takes them.
const (
	StepNode              Step = "node"            // Config.Node: the node a booted instance joins as
	StepJoinKubernetes    Step = "join kubernetes" // Kube.AddNode
	StepExclude           Step = "exclude from yarn"
	StepStartNodeManager  Step = "join yarn"        // the NodeManager starts and registers
	StepCordon            Step = "cordon"           // a machine that joined YARN, cordoned on Kubernetes
	StepLeaveKubernetes   Step = "leave kubernetes" // Kube.RemoveNode
	StepRemoveNodeManager Step = "remove NodeManager"
	StepUnexclude         Step = "remove exclude entry"
)

// A StepError is a step that failed.
type StepError struct {
	Step Step
	Host string
	// Instance is the booted or terminated instance; zero for a machine
	// that Join brought up.
	Instance awssim.Instance
	Err      error
}

func (e *StepError) Error() string { return string(e.Step) + " " + e.Host + ": " + e.Err.Error() }

func (e *StepError) Unwrap() error { return e.Err }

// Config is a world's bootstrap.
type Config struct {
	// Context bounds a machine's joining; leaving uses it without its
	// cancellation (the machine is gone either way).
	Context context.Context
	Kube    Kube
	// Sim, Admin and Exclude are the YARN side: the RM, its admin port
	// (which starts and restarts NodeManagers) and the exclude file the
	// broker and the machines' bootstrap share.
	Sim     *yarnsim.Sim
	Admin   *yarnsim.AdminServer
	Exclude *yarn.ExcludeFile
	// Node is the node a booted instance joins as; an error stops its
	// bootstrap (StepNode).
	Node func(awssim.Instance) (Node, error)
	// ToYARN, when set, is asked first as an instance boots: true, and it
	// joins YARN (not excluded) and is cordoned on Kubernetes once its
	// NodeManager runs. Nil: every machine joins Kubernetes, released on
	// YARN.
	ToYARN func() bool
	// Cordon cordons a node that joined YARN, as the broker's release
	// would; needed when ToYARN can say true.
	Cordon func(ctx context.Context, node string) error
	// OnError reports a failed step of Boot or Gone; for a step of Boot
	// (after StepNode, which always stops it) it returns whether the
	// bootstrap goes on with the next step (a machine whose NodeManager
	// failed to start and that stops is not live). Gone always goes on.
	// Nil: failures are ignored and stop a boot.
	OnError func(*StepError) (goOn bool)
	// Joined, when set, runs once a booted instance joined (no failed step
	// stopped it), with the side it joined.
	Joined func(in awssim.Instance, toYARN bool)
	// BeforeLeave, when set, runs as a terminated instance leaves, after
	// it stopped being live and before its node leaves Kubernetes (the
	// chaos soak records the GPU pods it kills).
	BeforeLeave func(awssim.Instance)
}

// Bootstrap boots and terminates the world's machines.
type Bootstrap struct {
	cfg Config
	mu  sync.Mutex
	// live are the hosts of running machines: only those have a
	// NodeManager to restart.
	live map[string]bool
	// hostOf maps a booted instance's ID to its host.
	hostOf map[string]string
}

// New returns the bootstrap of cfg's world.
func New(cfg Config) (*Bootstrap, error) {
	switch {
	case cfg.Context == nil:
		return nil, errors.New("simworld: no Context")
	case cfg.Kube == nil:
		return nil, errors.New("simworld: no Kube side")
	case cfg.Sim == nil || cfg.Admin == nil || cfg.Exclude == nil:
		return nil, errors.New("simworld: the YARN side needs Sim, Admin and Exclude")
	case cfg.Node == nil:
		return nil, errors.New("simworld: no Node")
	case cfg.ToYARN != nil && cfg.Cordon == nil:
		return nil, errors.New("simworld: ToYARN without Cordon")
	}
	return &Bootstrap{cfg: cfg, live: map[string]bool{}, hostOf: map[string]string{}}, nil
}

// Boot is the cloud's boot hook: the booted instance joins both clusters.
func (b *Bootstrap) Boot(in awssim.Instance) {
	toYARN := b.cfg.ToYARN != nil && b.cfg.ToYARN()
	n, err := b.cfg.Node(in)
	if err != nil {
		b.fail(&StepError{Step: StepNode, Host: in.PrivateDNSName, Instance: in, Err: err})
		return
	}
	if b.join(in, n, toYARN) == nil && b.cfg.Joined != nil {
		b.cfg.Joined(in, toYARN)
	}
}

// Join brings up a machine that is no cloud instance (a host of an owned
// fleet, up from the start): it joins Kubernetes, released on YARN. It
// stops at the first failed step and returns it as a *StepError, without
// OnError.
func (b *Bootstrap) Join(n Node) error {
	return b.join(awssim.Instance{}, n, false)
}

// join takes a machine through its steps. in is zero for Join, which
// returns its first failure instead of reporting it.
//
// IMPORTANT: the order is the bootstrap's: the node joins Kubernetes, the
// host is excluded before its NodeManager starts (else the RM would give
// it work before the broker handed it over), it is live from then on, and
// a machine that joined YARN is cordoned only once its NodeManager runs.
func (b *Bootstrap) join(in awssim.Instance, n Node, toYARN bool) error {
	ctx, host := b.cfg.Context, n.Name
	booted := in.ID != ""
	step := func(s Step, err error) error {
		if err == nil {
			return nil
		}
		e := &StepError{Step: s, Host: host, Instance: in, Err: err}
		if !booted || !b.fail(e) {
			return e
		}
		return nil
	}
	if err := step(StepJoinKubernetes, b.cfg.Kube.AddNode(ctx, n)); err != nil {
		return err
	}
	if !toYARN {
		_, err := b.cfg.Exclude.Add(host, 0)
		if err := step(StepExclude, err); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.live[host] = true
	if booted {
		b.hostOf[in.ID] = host
	}
	b.mu.Unlock()
	if err := step(StepStartNodeManager, b.cfg.Admin.StartNodeManager(yarnsim.NodeSpec{Host: host, GPUs: n.GPUs})); err != nil {
		// The machine did not come up.
		b.mu.Lock()
		delete(b.live, host)
		b.mu.Unlock()
		return err
	}
	if toYARN {
		if err := b.cfg.Cordon(ctx, host); err != nil {
			b.fail(&StepError{Step: StepCordon, Host: host, Instance: in, Err: err})
		}
	}
	return nil
}

// Gone is the cloud's terminate hook: the machine leaves both clusters and
// its exclude entry is removed.
func (b *Bootstrap) Gone(in awssim.Instance) {
	host := in.PrivateDNSName
	ctx := context.WithoutCancel(b.cfg.Context)
	b.mu.Lock()
	delete(b.live, host)
	b.mu.Unlock()
	if b.cfg.BeforeLeave != nil {
		b.cfg.BeforeLeave(in)
	}
	if err := b.cfg.Kube.RemoveNode(ctx, host); err != nil {
		b.fail(&StepError{Step: StepLeaveKubernetes, Host: host, Instance: in, Err: err})
	}
	if err := b.cfg.Sim.RemoveNode(host); err != nil {
		b.fail(&StepError{Step: StepRemoveNodeManager, Host: host, Instance: in, Err: err})
	}
	if _, err := b.cfg.Exclude.Remove(host); err != nil {
		b.fail(&StepError{Step: StepUnexclude, Host: host, Instance: in, Err: err})
	}
}

// Terminating marks the machine of a booted instance whose termination
// was asked for as no longer live, before the cloud's terminate hook runs:
// its NodeManager cannot be restarted. It returns the instance's host
// ("" if it never came up).
func (b *Bootstrap) Terminating(instanceID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	host := b.hostOf[instanceID]
	delete(b.live, host)
	return host
}

// Live reports whether host is a running machine's.
func (b *Bootstrap) Live(host string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live[host]
}

// RestartNodeManager is the world's yarn.nodemanager_restart hook: it
// restarts the NodeManager of a running machine, and fails for a host
// whose machine is gone, as ssh to it would.
func (b *Bootstrap) RestartNodeManager(ctx context.Context, host string) error {
	if !b.Live(host) {
		return fmt.Errorf("restart nodemanager of %s: its machine is gone", host)
	}
	return b.cfg.Admin.RestartNodeManager(ctx, host)
}

func (b *Bootstrap) fail(e *StepError) bool {
	if b.cfg.OnError == nil {
		return false
	}
	return b.cfg.OnError(e)
}

// Sim is the Kube side on k8s/k8ssim's fake API.
type Sim struct{ Cluster *k8ssim.Cluster }

var _ Kube = Sim{}

// AddNode registers n as a ready node; k8ssim has no MIG.
func (s Sim) AddNode(ctx context.Context, n Node) error {
	if n.MIG != nil {
		return fmt.Errorf("node %s: k8ssim models no MIG devices", n.Name)
	}
	labels := n.Labels
	if n.Model != "" {
		labels = make(map[string]string, len(n.Labels)+1)
		for k, v := range n.Labels {
			labels[k] = v
		}
		labels["nvidia.com/gpu.product"] = n.Model
	}
	return s.Cluster.AddNode(ctx, k8ssim.NodeSpec{Name: n.Name, GPUs: n.GPUs, Labels: labels, Taints: n.Taints,
		ProviderID: n.ProviderID})
}

// RemoveNode deletes the node.
func (s Sim) RemoveNode(ctx context.Context, name string) error {
	return s.Cluster.RemoveNode(ctx, name)
}
