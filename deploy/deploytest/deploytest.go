package deploytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/gpubroker/gpubroker/test/k8senv"
)

const fieldManager = "gpubroker-deploy-test"

// Load decodes every object of dir/*.yaml (deploy/kubernetes), in file
// order (the order kubectl apply -f uses).
func Load(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, objs...)
	}
	return out
}

// Decode reads a stream of YAML (or JSON) documents, such as the output of
// helm template, skipping empty ones.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode manifest %d: %w", len(out)+1, err)
		}
		if m == nil {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// warnings collects the API server's warnings (deprecated APIs, pod
// security violations); a clean manifest causes none.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// Cluster is a real control plane (test/k8senv) with the clients the
// checks need. One cluster can check several sets of manifests in turn.
type Cluster struct {
	dyn    dynamic.Interface
	client kubernetes.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

// StartCluster starts a control plane, stopped when t's test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx := context.Background()
	env, err := k8senv.Start(ctx, k8senv.Options{Logf: t.Logf, StartTimeout: 30 * time.Minute})
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	cfg := rest.CopyConfig(env.RESTConfig)
	c := &Cluster{warn: &warnings{}, client: env.Client}
	cfg.WarningHandler = c.warn
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return c
}

// apply server-side-applies obj, for real or as a dry run, and returns what
// the API server made of it (defaults filled in, admission run).
func (c *Cluster) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if obj.GetNamespace() != "" {
		ri = c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return ri.Apply(ctx, obj.GetName(), obj, opts)
}

func describe(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// Check runs gpubroker's objects through the real API server: objs (the
// Namespace gpubroker first, then the rest in apply order) must hold every
// kind an installation needs; each passes a server-side dry run without
// warnings (deprecated APIs, Pod Security violations of the namespace's
// "restricted" level); the broker Deployment has two replicas, its probes
// and the database Secret; the agent runs on nvidia nodes; and the RBAC
// objects, created for real, give the broker's and the agent's service
// accounts exactly the access the SubjectAccessReviews below expect. It
// also shows, on a broken copy, that the dry run and the warnings check
// can fail. Everything but the Namespace and the RBAC objects is left
// uncreated.
func (c *Cluster) Check(t *testing.T, objs []*unstructured.Unstructured) {
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret",
		"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "DaemonSet"} {
		if kinds[k] == 0 {
			t.Fatalf("no %s among the manifests (%v)", k, kinds)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The namespace is the only object the others need to exist: dry-run
	// it, then create it, then dry-run everything.
	if objs[0].GetKind() != "Namespace" {
		t.Fatalf("the first manifest must be the Namespace, got %s", describe(objs[0]))
	}
	if _, err := c.apply(ctx, objs[0], true); err != nil {
		t.Fatalf("dry run %s: %v", describe(objs[0]), err)
	}
	if _, err := c.apply(ctx, objs[0], false); err != nil {
		t.Fatalf("create %s: %v", describe(objs[0]), err)
	}
	c.warn.take()

	applied := map[string]*unstructured.Unstructured{}
	t.Run("server-side dry run", func(t *testing.T) {
		for _, o := range objs {
			got, err := c.apply(ctx, o, true)
			if err != nil {
				t.Errorf("dry run %s: %v", describe(o), err)
				continue
			}
			applied[o.GetKind()+"/"+o.GetName()] = got
			if w := c.warn.take(); len(w) > 0 {
				t.Errorf("dry run %s: warnings %q", describe(o), w)
			}
		}
		// Dry run stored nothing.
		if _, err := c.client.AppsV1().Deployments("gpubroker").Get(ctx, "gpubroker", metav1.GetOptions{}); err == nil {
			t.Error("a dry run created the Deployment")
		}
	})

	t.Run("broker deployment", func(t *testing.T) {
		d := applied["Deployment/gpubroker"]
		if d == nil {
			t.Fatal("Deployment gpubroker was not applied")
		}
		if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 2 {
			t.Fatalf("replicas %d, want 2", r)
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			t.Fatalf("containers %v", cs)
		}
		ctr := cs[0].(map[string]any)
		live, _, _ := unstructured.NestedString(ctr, "livenessProbe", "httpGet", "path")
		ready, _, _ := unstructured.NestedString(ctr, "readinessProbe", "httpGet", "path")
		if live != "/healthz" || ready != "/readyz" {
			t.Fatalf("probes: liveness %q, readiness %q", live, ready)
		}
		env, _, _ := unstructured.NestedSlice(ctr, "env")
		secret := ""
		for _, e := range env {
			if n, _, _ := unstructured.NestedString(e.(map[string]any), "name"); n == "GPUBROKER_DATABASE_URL" {
				secret, _, _ = unstructured.NestedString(e.(map[string]any), "valueFrom", "secretKeyRef", "name")
			}
		}
		if applied["Secret/"+secret] == nil {
			t.Fatalf("the database URL comes from Secret %q, which the manifests do not define", secret)
		}
		ds := applied["DaemonSet/gpubroker-agent"]
		if sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector"); sel["gpu.vendor"] != "nvidia" {
			t.Fatalf("agent nodeSelector %v", sel)
		}
	})

	t.Run("dry run rejects a broken manifest", func(t *testing.T) {
		// The check above can fail: the API server refuses unknown fields.
		var d *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				d = o.DeepCopy()
			}
		}
		if err := unstructured.SetNestedField(d.Object, int64(2), "spec", "replica"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.apply(ctx, d, true); err == nil || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("a Deployment with spec.replica was accepted: %v", err)
		}
		// And an agent with extra capabilities breaks the namespace's Pod
		// Security level, which the warnings check catches.
		var ds *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "DaemonSet" {
				ds = o.DeepCopy()
			}
		}
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		cs[0].(map[string]any)["securityContext"] = map[string]any{"capabilities": map[string]any{"add": []any{"NET_ADMIN"}}}
		if err := unstructured.SetNestedSlice(ds.Object, cs, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		c.warn.take()
		if _, err := c.apply(ctx, ds, true); err != nil {
			t.Fatal(err)
		}
		if w := c.warn.take(); len(w) == 0 || !strings.Contains(strings.Join(w, " "), "NET_ADMIN") {
			t.Fatalf("an agent with NET_ADMIN raised no Pod Security warning: %q", w)
		}
	})

	t.Run("least-privilege RBAC", func(t *testing.T) {
		for _, o := range objs {
			switch o.GetKind() {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
				if _, err := c.apply(ctx, o, false); err != nil {
					t.Fatalf("create %s: %v", describe(o), err)
				}
			}
		}
		type check struct {
			verb, group, resource, sub, ns string
			allowed                        bool
		}
		broker := []check{
			{"watch", "", "pods", "", "", true},
			{"list", "", "pods", "", "ml", true},
			{"watch", "", "nodes", "", "", true},
			{"patch", "", "nodes", "", "", true},
			{"update", "", "nodes", "", "", true},
			{"watch", "policy", "poddisruptionbudgets", "", "", true},
			{"watch", "scheduling.k8s.io", "priorityclasses", "", "", true},
			{"watch", "batch", "jobs", "", "", true},
			{"watch", "", "persistentvolumeclaims", "", "", true},
			{"watch", "", "persistentvolumes", "", "", true},
			{"watch", "resource.k8s.io", "resourceclaims", "", "", true},
			{"watch", "resource.k8s.io", "resourceclaimtemplates", "", "", true},
			{"watch", "resource.k8s.io", "resourceslices", "", "", true},
			{"update", "resource.k8s.io", "resourceclaims", "", "ml", false},
			{"delete", "batch", "jobs", "", "ml", false},
			{"create", "", "pods", "eviction", "ml", true},
			{"create", "", "events", "", "ml", true},
			// Nothing more.
			{"delete", "", "nodes", "", "", false},
			{"create", "", "nodes", "", "", false},
			{"delete", "", "pods", "", "ml", false},
			{"create", "", "pods", "", "ml", false},
			{"update", "", "pods", "", "ml", false},
			{"get", "", "secrets", "", "gpubroker", false},
			{"list", "", "secrets", "", "kube-system", false},
			{"update", "", "nodes", "status", "", false},
			{"create", "apps", "deployments", "", "ml", false},
			{"create", "policy", "poddisruptionbudgets", "", "ml", false},
			{"create", "scheduling.k8s.io", "priorityclasses", "", "", false},
			{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", false},
		}
		agent := []check{
			{"list", "", "pods", "", "", false},
			{"get", "", "nodes", "", "", false},
			{"get", "", "secrets", "", "gpubroker", false},
		}
		for sa, checks := range map[string][]check{"gpubroker": broker, "gpubroker-agent": agent} {
			for _, ch := range checks {
				sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:gpubroker:" + sa,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gpubroker", "system:authenticated"},
					ResourceAttributes: &authv1.ResourceAttributes{Verb: ch.verb, Group: ch.group, Resource: ch.resource,
						Subresource: ch.sub, Namespace: ch.ns},
				}}
				got, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Status.Allowed != ch.allowed {
					t.Errorf("%s may %s %s/%s/%s in %q: %t, want %t", sa, ch.verb, ch.group, ch.resource, ch.sub, ch.ns,
						got.Status.Allowed, ch.allowed)
				}
			}
		}
	})
}
