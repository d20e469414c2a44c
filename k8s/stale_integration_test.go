package k8s

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// waitStale polls Observe until it fails with ErrStale and logs how long
// that took (a figure, not an assertion: the bound is StaleAfter plus one
// probe interval).
func waitStale(t *testing.T, ctx context.Context, o *Observer, since time.Time) error {
	t.Helper()
	var err error
	waitFor(t, ctx, "Observe to fail with ErrStale", func() (bool, error) {
		_, err = o.Observe(ctx)
		if err != nil && !errors.Is(err, broker.ErrStale) {
			return false, err
		}
		return err != nil, nil
	})
	t.Logf("stale after %s (StaleAfter %s): %v", time.Since(since).Round(time.Millisecond), o.cfg.StaleAfter, err)
	return err
}

// TestObserveStaleWhenRBACRevoked: the broker's service account loses its
// ClusterRoleBinding; its watches cannot resync any more, and Observe fails
// with ErrStale instead of serving the last cache as if it were current.
// Restoring the binding makes it fresh again.
func TestObserveStaleWhenRBACRevoked(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "stale-test-observer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "persistentvolumes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates", "resourceslices"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "stale-test-observer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "stale-test-broker"}}}
	bind := func() {
		t.Helper()
		if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	bind()
	t.Cleanup(func() {
		env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	rc := rest.CopyConfig(env.RESTConfig)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "stale-test-broker"}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the binding to take effect", func() (bool, error) {
		_, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	o, err := NewObserver(client, Config{StaleAfter: 2 * time.Second}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	if err := o.Start(octx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Observe(ctx); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	revoked := time.Now()
	if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStale(t, ctx, o, revoked)
	bind()
	waitFor(t, ctx, "Observe to be fresh again", func() (bool, error) {
		_, err := o.Observe(ctx)
		return err == nil, nil
	})
}

// proxy forwards TCP connections to the API server until closed; closing
// it cuts every connection, so the apiserver is unreachable.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestObserveStaleWhenAPIServerUnreachable: the connection to the API
// server is cut and new ones are refused; client-go retries its watches
// quietly, but Observe fails with ErrStale within the bound, and recovers
// once the API server is reachable again.
func TestObserveStaleWhenAPIServerUnreachable(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, err := urlHost(env.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "127.0.0.1:0", u)
	addr := p.ln.Addr().String()
	rc := rest.CopyConfig(env.RESTConfig)
	rc.Host = "https://" + addr
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewObserver(client, Config{StaleAfter: 2 * time.Second}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	if err := o.Start(octx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Observe(ctx); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	cut := time.Now()
	p.close()
	waitStale(t, ctx, o, cut)
	p = startProxy(t, addr, u)
	defer p.close()
	waitFor(t, ctx, "Observe to be fresh again", func() (bool, error) {
		_, err := o.Observe(ctx)
		return err == nil, nil
	})
}

func urlHost(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func evictionFor(p *corev1.Pod, uid *types.UID) *policyv1.Eviction {
	return &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: uid}}}
}

// TestEvictSparesRecreatedPodOnRealAPIServer: between the plan and the
// eviction the victim is deleted and a pod of the same name takes its
// place; the eviction carries the victim's UID, so the API server refuses
// it and the successor keeps running.
func TestEvictSparesRecreatedPodOnRealAPIServer(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "evict-uid")
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: "evict-uid-node", GPUs: 4, Model: "H100", Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.Client.CoreV1().Nodes().Delete(context.Background(), "evict-uid-node", metav1.DeleteOptions{})
	})
	// The victim is bound to a node no one runs: KWOK, seeing its
	// deletion late, would delete "train" by name, the successor too,
	// which is KWOK's shortcut, not what a kubelet does (it acts on the
	// pods it runs, by UID).
	victim, err := env.Client.CoreV1().Pods("evict-uid").Create(ctx, readyPod("evict-uid", "train", "evict-uid-gone", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := env.Client.CoreV1().Pods("evict-uid").Delete(ctx, "train", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the victim to be gone", func() (bool, error) {
		_, err := env.Client.CoreV1().Pods("evict-uid").Get(ctx, "train", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	successor, err := env.Client.CoreV1().Pods("evict-uid").Create(ctx, readyPod("evict-uid", "train", "evict-uid-node", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	act, err := NewActuator(env.Client, integrationConfig, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSide(env.Client, nil, act, time.Second)
	if err := s.Evict(ctx, "evict-uid-node", broker.Workload{Key: string(victim.UID), Name: "evict-uid/train"}); err != nil {
		t.Fatalf("evict the gone victim: %v", err)
	}
	got, err := env.Client.CoreV1().Pods("evict-uid").Get(ctx, "train", metav1.GetOptions{})
	if err != nil || got.UID != successor.UID || got.DeletionTimestamp != nil {
		t.Fatalf("successor after the eviction: %v %+v; it must not be evicted", err, got.ObjectMeta)
	}
	// The UID precondition itself, as the API server enforces it.
	other := victim.UID
	err = env.Client.PolicyV1().Evictions("evict-uid").Evict(ctx, evictionFor(got, &other))
	if !apierrors.IsConflict(err) {
		t.Fatalf("eviction with a stale UID precondition: %v, want 409 Conflict", err)
	}
	if err := s.Evict(ctx, "evict-uid-node", broker.Workload{Key: string(successor.UID), Name: "evict-uid/train"}); err != nil {
		t.Fatalf("evict the successor by its own UID: %v", err)
	}
	waitFor(t, ctx, "the successor to be evicted", func() (bool, error) {
		p, err := env.Client.CoreV1().Pods("evict-uid").Get(ctx, "train", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil, nil
	})
	// The evicted pod, and only it, gets the Preempted event, even when
	// it is gone before the event is written.
	evs, err := env.Client.CoreV1().Events("evict-uid").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var preempted []string
	for _, e := range evs.Items {
		if e.Reason == EventPreempted {
			preempted = append(preempted, string(e.InvolvedObject.UID))
		}
	}
	if len(preempted) != 1 || preempted[0] != string(successor.UID) {
		t.Fatalf("Preempted events on pods %v, want one on the evicted %s", preempted, successor.UID)
	}
}

// TestStoppedKubeletNodeIsDownNotInFlight: a Ready GPU node with a pod on
// it loses its kubelet; once the node lifecycle controller marks it
// Ready=Unknown and taints it unreachable, Observe reports it down since the
// Ready transition, never as a registered node on its way.
func TestStoppedKubeletNodeIsDownNotInFlight(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "kubelet-stops")
	const node = "kubelet-stops-node"
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: node, GPUs: 4, Model: "H100", Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	if _, err := env.Client.CoreV1().Pods("kubelet-stops").Create(ctx, readyPod("kubelet-stops", "train", node, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := startObserver(t, ctx, env)
	waitFor(t, ctx, "the node active with its pod", func() (bool, error) {
		obs, err := o.Observe(ctx)
		if err != nil {
			return false, err
		}
		n, ok := findNode(obs, node)
		return ok && n.Phase == broker.PhaseActive && len(n.Work) == 1, nil
	})
	stopped := time.Now()
	if err := env.StopKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	var n broker.Node
	waitFor(t, ctx, "the node reported down", func() (bool, error) {
		obs, err := o.Observe(ctx)
		if err != nil {
			return false, err
		}
		var ok bool
		n, ok = findNode(obs, node)
		if ok && n.Down == "" && n.Phase == broker.PhaseRegistered && time.Since(stopped) > 2*time.Minute {
			return false, errors.New("the stopped node is reported registered (in flight), not down")
		}
		return ok && n.Down != "", nil
	})
	t.Logf("down %s after the kubelet stopped: %s", time.Since(stopped).Round(time.Second), n.Down)
	k, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := readyCondition(k)
	if cond == nil || cond.Status != corev1.ConditionUnknown || !n.DownSince.Equal(cond.LastTransitionTime.Time) {
		t.Fatalf("down since %s, Ready condition %+v: want Unknown since DownSince", n.DownSince, cond)
	}
	if n.Phase == broker.PhaseRegistered || len(n.Work) != 1 {
		t.Fatalf("phase %s with %d pods; a down node is not in flight and keeps its work", n.Phase, len(n.Work))
	}
}
