package cloud_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/test/moto"
)

// backend is one AWS implementation the shared suite runs against.
type backend struct {
	name     string
	endpoint string
	sim      *awssim.Server // nil for moto
}

var (
	motoOnce   sync.Once
	motoServer *moto.Server
	motoErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if motoServer != nil {
		motoServer.Stop()
	}
	os.Exit(code)
}

// startMoto starts one moto_server for the package, installing moto into
// the cache first if needed.
func startMoto(t *testing.T) *moto.Server {
	t.Helper()
	motoOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		motoServer, motoErr = moto.Start(ctx)
	})
	if motoErr != nil {
		t.Fatalf("moto is required for the shared provider suite: %v", motoErr)
	}
	if err := motoServer.Reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	return motoServer
}

// startSim starts an awssim server for one test.
func startSim(t *testing.T, cfg awssim.Config) (*awssim.Server, string) {
	t.Helper()
	sim := awssim.New(cfg)
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close(context.Background()) })
	return sim, url
}

// eachBackend runs f once against awssim and once against moto: the same
// test function on both.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("awssim", func(t *testing.T) {
		sim, url := startSim(t, awssim.Config{})
		f(t, backend{name: "awssim", endpoint: url, sim: sim})
	})
	t.Run("moto", func(t *testing.T) {
		m := startMoto(t)
		f(t, backend{name: "moto", endpoint: m.URL})
	})
}

var testCreds = credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")

// client is a plain autoscaling client for setting up groups.
func client(b backend) *autoscaling.Client {
	return autoscaling.New(autoscaling.Options{
		Region:       "us-east-1",
		Credentials:  testCreds,
		BaseEndpoint: aws.String(b.endpoint),
		HTTPClient:   readOnlyBodies{http.DefaultClient},
	})
}

// readOnlyBodies hides WriteTo of request bodies, as the provider's own
// client does (see cloud/httpclient.go): without it a fast loopback answer
// can make net/http drop the connection and the SDK retry a create.
type readOnlyBodies struct{ c *http.Client }

func (r readOnlyBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = struct{ io.ReadCloser }{req.Body}
	}
	return r.c.Do(req)
}

type groupSpec struct {
	name              string
	min, max, desired int
	tags              map[string]string
}

// createGroup creates a launch configuration and a group through the API,
// as an operator's tooling would.
func createGroup(t *testing.T, b backend, g groupSpec) {
	t.Helper()
	ctx := t.Context()
	c := client(b)
	lc := "lc-" + g.name
	if _, err := c.CreateLaunchConfiguration(ctx, &autoscaling.CreateLaunchConfigurationInput{
		LaunchConfigurationName: aws.String(lc),
		ImageId:                 aws.String("ami-12c6146b"),
		InstanceType:            aws.String("p3.8xlarge"),
	}); err != nil {
		t.Fatalf("create launch configuration: %v", err)
	}
	in := &autoscaling.CreateAutoScalingGroupInput{
		AutoScalingGroupName:    aws.String(g.name),
		LaunchConfigurationName: aws.String(lc),
		MinSize:                 aws.Int32(int32(g.min)),
		MaxSize:                 aws.Int32(int32(g.max)),
		DesiredCapacity:         aws.Int32(int32(g.desired)),
		AvailabilityZones:       []string{"us-east-1a"},
	}
	for k, v := range g.tags {
		in.Tags = append(in.Tags, asgtypes.Tag{
			Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(true),
			ResourceId: aws.String(g.name), ResourceType: aws.String("auto-scaling-group"),
		})
	}
	if _, err := c.CreateAutoScalingGroup(ctx, in); err != nil {
		t.Fatalf("create group %q: %v", g.name, err)
	}
}

func newProvider(t *testing.T, b backend, cfg cloud.Config) *cloud.Provider {
	t.Helper()
	cfg.Region = "us-east-1"
	cfg.Endpoint = b.endpoint
	cfg.Credentials = testCreds
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 20 * time.Millisecond
	}
	p, err := cloud.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func poolByName(t *testing.T, p *cloud.Provider, name string) broker.PoolState {
	t.Helper()
	states, err := p.Pools(t.Context())
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	for _, s := range states {
		if s.Pool.Name == name {
			return s
		}
	}
	t.Fatalf("pool %q not among %d pools", name, len(states))
	return broker.PoolState{}
}

// waitPool polls Pools until ok holds, for at most 20 s.
func waitPool(t *testing.T, p *cloud.Provider, name string, what string, ok func(broker.PoolState) bool) broker.PoolState {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := poolByName(t, p, name)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %q: gave up waiting for %s; last state %+v", name, what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func live(s broker.PoolState) []broker.Instance {
	var out []broker.Instance
	for _, in := range s.Instances {
		if in.Phase != broker.PhaseTerminating && in.Phase != broker.PhaseGone {
			out = append(out, in)
		}
	}
	return out
}

func intp(i int) *int { return &i }

// The reference scenario's group, set up for the Cluster Autoscaler.
var caTags = map[string]string{
	"k8s.io/cluster-autoscaler/enabled":                                "true",
	"k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu": "4",
	"k8s.io/cluster-autoscaler/node-template/label/infra-type":         "gpu",
	"k8s.io/cluster-autoscaler/node-template/label/gpu.vendor":         "nvidia",
	"k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu":     "present:NoSchedule",
	"gpubroker.io/gpu-model":                                           "A100",
}

func TestPoolsFromConfigAndTags(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-training-group", min: 0, max: 5, tags: caTags})
		p := newProvider(t, b, cloud.Config{Pools: []cloud.PoolConfig{
			{Name: "gpu-training", Group: "gpu-training-group", MaxNodes: intp(4), PricePerHour: 32.77},
		}})
		s := poolByName(t, p, "gpu-training")
		want := broker.Pool{
			Name: "gpu-training", Provider: "aws", Group: "gpu-training-group", GPUModel: "A100",
			GPUsPerNode: 4, MinNodes: 0, MaxNodes: 4, Sides: broker.PoolShared, PricePerHour: 32.77,
			Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
			Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
		}
		if diff := cmp.Diff(want, s.Pool); diff != "" {
			t.Errorf("pool (-want +got):\n%s", diff)
		}
		if s.Desired != 0 || len(s.Instances) != 0 {
			t.Errorf("a group at zero: desired %d, %d instances", s.Desired, len(s.Instances))
		}
		if !s.BackoffUntil.IsZero() {
			t.Errorf("fresh pool backs off until %s", s.BackoffUntil)
		}
	})
}

func TestDiscoveryByTagPaginates(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 7
		for i := range n {
			createGroup(t, b, groupSpec{name: fmt.Sprintf("asg-%d", i), max: 3, tags: map[string]string{
				cloud.TagPool: fmt.Sprintf("pool-%d", i), cloud.TagGPUsPerNode: "8",
			}})
		}
		createGroup(t, b, groupSpec{name: "cpu-node-group", min: 0, max: 10})
		p := newProvider(t, b, cloud.Config{Discover: true, PageSize: 2})
		states, err := p.Pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != n {
			t.Fatalf("discovered %d pools, want %d: %+v", len(states), n, states)
		}
		for i, s := range states {
			if s.Pool.Name != fmt.Sprintf("pool-%d", i) || s.Pool.Group != fmt.Sprintf("asg-%d", i) || s.Pool.GPUsPerNode != 8 {
				t.Errorf("pool %d = %+v", i, s.Pool)
			}
		}
		if b.sim != nil {
			// 7 groups at 2 per page is 4 pages.
			if got := b.sim.Operations("DescribeAutoScalingGroups"); got != 4 {
				t.Errorf("DescribeAutoScalingGroups called %d times, want 4 pages", got)
			}
		}
	})
}

func TestSetDesiredScalesUpAbsolutely(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-a", min: 0, max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
		p := newProvider(t, b, cloud.Config{Discover: true})
		ctx := t.Context()
		if err := p.SetDesired(ctx, "gpu-a", 2); err != nil {
			t.Fatal(err)
		}
		// Absolute and idempotent: repeating the step changes nothing.
		if err := p.SetDesired(ctx, "gpu-a", 2); err != nil {
			t.Fatal(err)
		}
		s := waitPool(t, p, "gpu-a", "2 instances with host names", func(s broker.PoolState) bool {
			l := live(s)
			return len(l) == 2 && l[0].Hostname != "" && l[1].Hostname != ""
		})
		if s.Desired != 2 || s.InService() != 2 {
			t.Errorf("desired %d, in service %d; want 2 and 2", s.Desired, s.InService())
		}
		for _, in := range s.Instances {
			if in.Phase != broker.PhaseBooting {
				t.Errorf("instance %s: phase %s, want booting (nothing registered it)", in.ID, in.Phase)
			}
			if in.LaunchedAt.IsZero() {
				t.Errorf("instance %s: no launch time", in.ID)
			}
		}

		var ve *broker.ValidationError
		if err := p.SetDesired(ctx, "gpu-a", 6); !errors.As(err, &ve) {
			t.Errorf("above max: got %v, want a validation error", err)
		}
		if err := p.SetDesired(ctx, "gpu-a", -1); !errors.As(err, &ve) {
			t.Errorf("below min: got %v, want a validation error", err)
		}
		if err := p.SetDesired(ctx, "no-such-pool", 1); !errors.Is(err, broker.ErrNotFound) {
			t.Errorf("unknown pool: got %v, want ErrNotFound", err)
		}
		// A lower target never lets AWS pick instances to terminate: the
		// group keeps its launched instances, and only the broker's own
		// terminate removes them.
		if err := p.SetDesired(ctx, "gpu-a", 0); err != nil {
			t.Fatal(err)
		}
		if s := poolByName(t, p, "gpu-a"); s.Desired != 2 || len(live(s)) != 2 {
			t.Fatalf("after a target of 0: desired %d, %d live instances; want both kept", s.Desired, len(live(s)))
		}
		for _, in := range live(s) {
			if err := p.Terminate(ctx, "gpu-a", in.ID); err != nil {
				t.Fatal(err)
			}
		}
		waitPool(t, p, "gpu-a", "scale to zero", func(s broker.PoolState) bool { return s.Desired == 0 && len(live(s)) == 0 })
	})
}

func TestTerminateChosenInstanceWithDecrement(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-b", min: 1, max: 5, desired: 3, tags: map[string]string{cloud.TagPool: "gpu-b"}})
		p := newProvider(t, b, cloud.Config{Discover: true})
		ctx := t.Context()
		s := waitPool(t, p, "gpu-b", "3 instances", func(s broker.PoolState) bool { return len(live(s)) == 3 })
		victim := live(s)[1].ID
		if err := p.Terminate(ctx, "gpu-b", victim); err != nil {
			t.Fatal(err)
		}
		s = waitPool(t, p, "gpu-b", "the victim to leave", func(s broker.PoolState) bool { return len(live(s)) == 2 })
		if s.Desired != 2 {
			t.Errorf("desired %d after terminate with decrement, want 2", s.Desired)
		}
		for _, in := range live(s) {
			if in.ID == victim {
				t.Errorf("victim %s still live", victim)
			}
		}
		// Terminating it again succeeds and does not decrement again.
		if err := p.Terminate(ctx, "gpu-b", victim); err != nil {
			t.Fatalf("second terminate: %v", err)
		}
		if s := poolByName(t, p, "gpu-b"); s.Desired != 2 {
			t.Errorf("desired %d after a repeated terminate, want 2", s.Desired)
		}
		// Down to min, then refuse to go below it.
		if err := p.Terminate(ctx, "gpu-b", live(s)[0].ID); err != nil {
			t.Fatal(err)
		}
		s = waitPool(t, p, "gpu-b", "one instance", func(s broker.PoolState) bool { return len(live(s)) == 1 })
		err := p.Terminate(ctx, "gpu-b", live(s)[0].ID)
		if !errors.Is(err, broker.ErrConflict) {
			t.Errorf("terminate below min: got %v, want ErrConflict", err)
		}
		if s := poolByName(t, p, "gpu-b"); s.Desired != 1 || len(live(s)) != 1 {
			t.Errorf("after refused terminate: desired %d, %d live, want 1 and 1", s.Desired, len(live(s)))
		}
	})
}

func TestConfiguredMinOverrideIsEnforced(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-c", min: 0, max: 5, desired: 2})
		p := newProvider(t, b, cloud.Config{Pools: []cloud.PoolConfig{{Name: "gpu-c", MinNodes: intp(2), GPUsPerNode: 4}}})
		s := waitPool(t, p, "gpu-c", "2 instances", func(s broker.PoolState) bool { return len(live(s)) == 2 })
		if s.Pool.MinNodes != 2 || s.Pool.MaxNodes != 5 {
			t.Errorf("bounds %d..%d, want 2..5", s.Pool.MinNodes, s.Pool.MaxNodes)
		}
		if err := p.Terminate(t.Context(), "gpu-c", s.Instances[0].ID); !errors.Is(err, broker.ErrConflict) {
			t.Errorf("terminate below configured min: got %v, want ErrConflict", err)
		}
		var ve *broker.ValidationError
		if err := p.SetDesired(t.Context(), "gpu-c", 1); !errors.As(err, &ve) {
			t.Errorf("set below configured min: got %v, want a validation error", err)
		}
	})
}

func TestTerminateRefusesAnotherPoolsInstance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-x", max: 3, desired: 1, tags: map[string]string{cloud.TagPool: "gpu-x"}})
		createGroup(t, b, groupSpec{name: "gpu-y", max: 3, desired: 1, tags: map[string]string{cloud.TagPool: "gpu-y"}})
		p := newProvider(t, b, cloud.Config{Discover: true})
		y := waitPool(t, p, "gpu-y", "1 instance", func(s broker.PoolState) bool { return len(live(s)) == 1 })
		err := p.Terminate(t.Context(), "gpu-x", y.Instances[0].ID)
		if !errors.Is(err, broker.ErrConflict) {
			t.Errorf("terminate another pool's instance: got %v, want ErrConflict", err)
		}
		for _, n := range []string{"gpu-x", "gpu-y"} {
			if s := poolByName(t, p, n); s.Desired != 1 || len(live(s)) != 1 {
				t.Errorf("pool %s: desired %d, %d live after the refused terminate", n, s.Desired, len(live(s)))
			}
		}
	})
}
