package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
)

// k8sPodJSON is one pending GPU pod in "gpubroker inspect k8s --json".
type k8sPodJSON struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	Priority      int64  `json:"priority"`
	PriorityClass string `json:"priority_class,omitempty"`
	GPUs          int    `json:"gpus"`
	Request       string `json:"request"`
	Tenant        string `json:"tenant,omitempty"`
	Counted       bool   `json:"counted"`
	Reason        string `json:"reason"`
	Detail        string `json:"detail,omitempty"`
	Constraints   any    `json:"constraints"`
}

// k8sNodeJSON is one GPU node in "gpubroker inspect k8s --json".
type k8sNodeJSON struct {
	Name            string `json:"name"`
	GPUsAllocatable int    `json:"gpus_allocatable"`
	GPUsAllocated   int    `json:"gpus_allocated"`
	GPUModel        string `json:"gpu_model,omitempty"`
	Pool            string `json:"pool,omitempty"`
	Phase           string `json:"phase"`
	Owner           string `json:"owner"`
	Ready           bool   `json:"ready"`
	Unschedulable   bool   `json:"unschedulable"`
	GPUsAdvertised  bool   `json:"gpus_advertised"`
	Reason          string `json:"reason,omitempty"`
	Pods            int    `json:"pods"`
}

// runInspectK8s prints pending GPU demand and GPU nodes: "gpubroker inspect
// k8s --kubeconfig FILE [--config FILE] [--tenant ns=tenant]... [--json]".
func runInspectK8s(ctx context.Context, e env, args []string) error {
	fs := newFlags("inspect k8s", e)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: kubernetes.kubeconfig from --config, else in-cluster)")
	configPath := fs.String("config", "", "gpubroker YAML configuration for tenants, GPU model label and scheduler names")
	var tenants []string
	fs.Func("tenant", "map a namespace to a tenant, NAMESPACE=TENANT (repeatable)", func(s string) error {
		tenants = append(tenants, s)
		return nil
	})
	modelLabel := fs.String("gpu-model-label", "", "node label holding the GPU model (default "+k8s.DefaultGPUModelLabel+")")
	asJSON := fs.Bool("json", false, "print JSON: {\"pods\": [...], \"nodes\": [...]}")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("takes no arguments, got %q", fs.Args())
	}
	cfg := k8s.Config{GPUModelLabel: *modelLabel}
	// Tenants map namespaces through broker.NewTenantIndex, as in serve:
	// the configuration's tenants, and one tenant per --tenant mapping.
	var known []broker.Tenant
	if *configPath != "" {
		c, err := loadConfig(*configPath)
		if err != nil {
			return err
		}
		if *kubeconfig == "" {
			*kubeconfig = c.file.Kubernetes.Kubeconfig
		}
		if cfg.GPUModelLabel == "" {
			cfg.GPUModelLabel = c.file.Kubernetes.GPUModelLabel
		}
		cfg.SchedulerNames = c.file.Kubernetes.SchedulerNames
		known = slices.Clone(c.tenants)
	}
	for _, m := range tenants {
		ns, tenant, ok := strings.Cut(m, "=")
		if !ok || ns == "" || tenant == "" {
			return usagef("--tenant %q: want NAMESPACE=TENANT", m)
		}
		if !broker.ValidName(ns) || !broker.ValidName(tenant) {
			return usagef("--tenant %q: namespace and tenant must be lowercase DNS labels", m)
		}
		known = mapNamespace(known, ns, tenant)
	}
	idx := broker.NewTenantIndex(known)

	var rc *rest.Config
	var err error
	if *kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return usagef("--kubeconfig: %s", err)
	}
	rc.UserAgent = "gpubroker-inspect"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return usagef("--kubeconfig: %s", err)
	}
	o, err := k8s.NewObserver(client, cfg, nil)
	if err != nil {
		return asUsage(err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := o.Start(ctx); err != nil {
		return fmt.Errorf("inspect k8s: watch %s: %w", rc.Host, err)
	}
	obs, err := o.Observe(ctx)
	if err != nil {
		return fmt.Errorf("inspect k8s: %w", err)
	}
	obs = k8s.MapTenants(obs, idx)
	if *asJSON {
		return printK8sJSON(e, obs)
	}
	return printK8sTable(e, obs)
}

// mapNamespace gives namespace ns to tenant (a new record if no tenant has
// that name), taking it from any other tenant, so a --tenant flag wins over
// the configuration.
func mapNamespace(tenants []broker.Tenant, ns, tenant string) []broker.Tenant {
	found := false
	for i := range tenants {
		t := &tenants[i]
		t.Namespaces = slices.DeleteFunc(slices.Clone(t.Namespaces), func(n string) bool { return n == ns })
		if t.Name == tenant {
			t.Namespaces, found = append(t.Namespaces, ns), true
		}
	}
	if !found {
		tenants = append(tenants, broker.Tenant{Name: tenant, Namespaces: []string{ns}})
	}
	return tenants
}

func k8sNodesJSON(obs k8s.Observation) []k8sNodeJSON {
	out := make([]k8sNodeJSON, 0, len(obs.Nodes))
	for _, n := range obs.Nodes {
		d := obs.NodeDetails[n.Name]
		out = append(out, k8sNodeJSON{
			Name: n.Name, GPUsAllocatable: n.GPUsTotal, GPUsAllocated: n.GPUsAllocated, GPUModel: n.GPUModel,
			Pool: n.Pool, Phase: string(n.Phase), Owner: string(n.Owner), Ready: d.Ready,
			Unschedulable: d.Unschedulable, GPUsAdvertised: d.GPUsAdvertised, Reason: d.Reason, Pods: len(n.Work),
		})
	}
	return out
}

func printK8sJSON(e env, obs k8s.Observation) error {
	out := struct {
		Pods  []k8sPodJSON    `json:"pods"`
		Nodes []k8sNodeJSON   `json:"nodes"`
		PDBs  []k8s.PDBReport `json:"pdbs"`
	}{Pods: make([]k8sPodJSON, 0, len(obs.Pods)), Nodes: k8sNodesJSON(obs), PDBs: obs.PDBs}
	if out.PDBs == nil {
		out.PDBs = []k8s.PDBReport{}
	}
	for _, p := range obs.Pods {
		out.Pods = append(out.Pods, k8sPodJSON{
			Namespace: p.Namespace, Name: p.Name, Priority: p.Priority, PriorityClass: p.PriorityClass,
			GPUs: p.GPUs, Request: p.Request.String(), Tenant: p.Tenant, Counted: p.Counted,
			Reason: p.Reason, Detail: p.Detail, Constraints: p.Constraints,
		})
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

func printK8sTable(e env, obs k8s.Observation) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	counted := 0
	for _, p := range obs.Pods {
		if p.Counted {
			counted++
		}
	}
	fmt.Fprintf(tw, "PENDING GPU PODS: %d, %d counted as demand\n", len(obs.Pods), counted)
	if len(obs.Pods) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tPOD\tPRIORITY\tGPUS\tTENANT\tCOUNTED\tWHY\tCONSTRAINTS")
		for _, p := range obs.Pods {
			why := p.Reason
			if p.Detail != "" {
				why += ": " + p.Detail
			}
			tenant := p.Tenant
			if tenant == "" {
				tenant = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%s\t%s\n", p.Namespace, p.Name, p.Priority, p.Request,
				tenant, p.Counted, oneLine(why), k8s.ConstraintsString(p.Constraints))
		}
	}
	fmt.Fprintf(tw, "\nGPU NODES: %d\n", len(obs.Nodes))
	if len(obs.Nodes) > 0 {
		fmt.Fprintln(tw, "NODE\tMODEL\tALLOCATABLE\tALLOCATED\tPHASE\tOWNER\tREADY\tPODS\tNOTE")
		for _, n := range k8sNodesJSON(obs) {
			model, note := n.GPUModel, n.Reason
			if model == "" {
				model = "-"
			}
			if note == "" {
				note = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%v\t%d\t%s\n", n.Name, model, n.GPUsAllocatable, n.GPUsAllocated,
				n.Phase, n.Owner, n.Ready, n.Pods, note)
		}
	}
	return tw.Flush()
}
