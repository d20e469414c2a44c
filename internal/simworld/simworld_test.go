package simworld

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// fakeKube records the nodes that joined; it refuses the names in fail.
type fakeKube struct {
	mu    sync.Mutex
	nodes map[string]Node
	fail  map[string]bool
	calls []string
}

func (k *fakeKube) AddNode(_ context.Context, n Node) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, "add "+n.Name)
	if k.fail[n.Name] {
		return errors.New("refused")
	}
	k.nodes[n.Name] = n
	return nil
}

func (k *fakeKube) RemoveNode(_ context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, "remove "+name)
	if _, ok := k.nodes[name]; !ok {
		return errors.New("not found")
	}
	delete(k.nodes, name)
	return nil
}

type testWorld struct {
	kube    *fakeKube
	sim     *yarnsim.Sim
	exclude *yarn.ExcludeFile
	errs    []*StepError
	left    []string
	b       *Bootstrap
}

func newTestWorld(t *testing.T, edit func(*Config)) *testWorld {
	t.Helper()
	sim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.default", Capacity: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "exclude.xml")
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: path})
	if err != nil {
		t.Fatal(err)
	}
	exclude, err := yarn.NewExcludeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &testWorld{kube: &fakeKube{nodes: map[string]Node{}, fail: map[string]bool{}}, sim: sim, exclude: exclude}
	cfg := Config{Context: context.Background(), Kube: w.kube, Sim: sim, Admin: admin, Exclude: exclude,
		Node: func(in awssim.Instance) (Node, error) {
			return Node{Name: in.PrivateDNSName, GPUs: 4, ProviderID: "aws:///us-east-1a/" + in.ID}, nil
		},
		OnError:     func(e *StepError) bool { w.errs = append(w.errs, e); return false },
		BeforeLeave: func(in awssim.Instance) { w.left = append(w.left, in.PrivateDNSName) }}
	if edit != nil {
		edit(&cfg)
	}
	if w.b, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *testWorld) excluded(t *testing.T, host string) bool {
	t.Helper()
	ok, err := w.exclude.Contains(host)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A booted machine joins Kubernetes and YARN released (excluded,
// DECOMMISSIONED), and is live; once gone it left both, its exclude entry
// went with it, and its NodeManager cannot be restarted.
func TestBootJoinsReleasedAndGoneLeaves(t *testing.T) {
	w := newTestWorld(t, nil)
	in := awssim.Instance{ID: "i-1", PrivateDNSName: "ip-10-0-0-1.ec2.internal", Group: "gpu"}
	w.b.Boot(in)
	host := in.PrivateDNSName
	if len(w.errs) > 0 {
		t.Fatalf("boot failed: %v", w.errs[0])
	}
	if n, ok := w.kube.nodes[host]; !ok || n.GPUs != 4 || n.ProviderID != "aws:///us-east-1a/i-1" {
		t.Fatalf("kubernetes nodes %v, want %s with 4 GPUs and its provider ID", w.kube.nodes, host)
	}
	if !w.excluded(t, host) {
		t.Fatalf("%s not in the exclude file after boot: it would join YARN unreleased", host)
	}
	if st := w.sim.NodeState(host); st != "DECOMMISSIONED" {
		t.Fatalf("RM state of %s after boot: %q, want DECOMMISSIONED (excluded NodeManager)", host, st)
	}
	if !w.b.Live(host) {
		t.Fatalf("%s not live after boot", host)
	}
	if err := w.b.RestartNodeManager(context.Background(), host); err != nil {
		t.Fatalf("restart the NodeManager of a running machine: %v", err)
	}

	w.b.Gone(in)
	if _, ok := w.kube.nodes[host]; ok || len(w.left) != 1 {
		t.Fatalf("after gone: kubernetes nodes %v, left %v; want none and the before-leave hook run once", w.kube.nodes, w.left)
	}
	if w.excluded(t, host) {
		t.Fatalf("%s still in the exclude file after gone: a later machine of that name would be turned away", host)
	}
	if st := w.sim.NodeState(host); st != "" {
		t.Fatalf("RM still lists %s (%s) after gone", host, st)
	}
	if w.b.Live(host) {
		t.Fatalf("%s still live after gone", host)
	}
	if err := w.b.RestartNodeManager(context.Background(), host); err == nil {
		t.Fatalf("restart the NodeManager of gone %s succeeded", host)
	}
	if len(w.errs) > 0 {
		t.Fatalf("gone failed: %v", w.errs[0])
	}
}

// A machine whose termination was asked for cannot have its NodeManager
// restarted, though the RM still lists it: the bootstrap's own check, not
// yarnsim's, refuses.
func TestRestartRefusedOnceTerminating(t *testing.T) {
	w := newTestWorld(t, nil)
	in := awssim.Instance{ID: "i-2", PrivateDNSName: "ip-10-0-0-2.ec2.internal"}
	w.b.Boot(in)
	if host := w.b.Terminating("i-2"); host != in.PrivateDNSName {
		t.Fatalf("Terminating(i-2) = %q, want %q", host, in.PrivateDNSName)
	}
	if w.sim.NodeState(in.PrivateDNSName) == "" {
		t.Fatal("the RM no longer lists the host: the test would not tell the checks apart")
	}
	err := w.b.RestartNodeManager(context.Background(), in.PrivateDNSName)
	if err == nil || !strings.Contains(err.Error(), "machine is gone") {
		t.Fatalf("restart of a terminating machine's NodeManager: %v, want refused as gone", err)
	}
}

// A machine that joins YARN is not excluded and is cordoned on Kubernetes
// after its NodeManager started.
func TestBootToYARNCordons(t *testing.T) {
	var w *testWorld
	var cordoned []string
	var joined []bool
	w = newTestWorld(t, func(c *Config) {
		c.ToYARN = func() bool { return true }
		c.Cordon = func(_ context.Context, node string) error {
			if st := w.sim.NodeState(node); st != "RUNNING" {
				t.Errorf("cordon of %s before its NodeManager runs (RM state %q)", node, st)
			}
			cordoned = append(cordoned, node)
			return nil
		}
		c.Joined = func(_ awssim.Instance, toYARN bool) { joined = append(joined, toYARN) }
	})
	in := awssim.Instance{ID: "i-3", PrivateDNSName: "ip-10-0-0-3.ec2.internal"}
	w.b.Boot(in)
	if w.excluded(t, in.PrivateDNSName) || len(cordoned) != 1 || len(joined) != 1 || !joined[0] {
		t.Fatalf("excluded %v, cordoned %v, joined %v: want not excluded, cordoned once, joined YARN", w.excluded(t, in.PrivateDNSName), cordoned, joined)
	}
}

// A failed step stops a boot when OnError says so, and the machine is not
// live; a fleet host's Join returns its failure.
func TestFailedStepStops(t *testing.T) {
	w := newTestWorld(t, nil)
	w.kube.fail["bad"] = true
	w.b.Boot(awssim.Instance{ID: "i-4", PrivateDNSName: "bad"})
	if len(w.errs) != 1 || w.errs[0].Step != StepJoinKubernetes || w.errs[0].Instance.ID != "i-4" {
		t.Fatalf("errors %v, want one join kubernetes failure of i-4", w.errs)
	}
	if w.excluded(t, "bad") || w.sim.NodeState("bad") != "" || w.b.Live("bad") {
		t.Fatal("the boot went on after its node failed to join Kubernetes")
	}
	err := w.b.Join(Node{Name: "bad", GPUs: 8})
	var se *StepError
	if !errors.As(err, &se) || se.Step != StepJoinKubernetes || len(w.errs) != 1 {
		t.Fatalf("Join of a refused host: %v (errors reported %d), want its StepError returned, not reported", err, len(w.errs))
	}
	if err := w.b.Join(Node{Name: "fleet-1", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	if !w.excluded(t, "fleet-1") || w.sim.NodeState("fleet-1") != "DECOMMISSIONED" || !w.b.Live("fleet-1") {
		t.Fatal("a fleet host did not join released on YARN")
	}
}

// New refuses a world that could send a machine to YARN without cordoning
// it on Kubernetes.
func TestNewRefusesToYARNWithoutCordon(t *testing.T) {
	w := newTestWorld(t, nil)
	cfg := w.b.cfg
	cfg.ToYARN = func() bool { return true }
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted ToYARN without Cordon")
	}
}
