package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// yarnAppJSON is one app in "gpubroker inspect yarn --json".
type yarnAppJSON struct {
	ID                string `json:"id"`
	Name              string `json:"name"`
	User              string `json:"user"`
	State             string `json:"state"`
	Queue             string `json:"queue"`
	Priority          int64  `json:"priority"`
	PendingContainers int    `json:"pending_containers"`
	PendingGPUs       int    `json:"pending_gpus"`
	RunningContainers int    `json:"running_containers"`
	// Tenant and UnifiedPriority are set when --config maps the queue.
	Tenant          string         `json:"tenant,omitempty"`
	UnifiedPriority *int64         `json:"unified_priority,omitempty"`
	Requests        []yarn.Request `json:"requests"`
}

// yarnNodeJSON is one node in "gpubroker inspect yarn --json".
type yarnNodeJSON struct {
	Host          string   `json:"host"`
	ID            string   `json:"id"`
	State         string   `json:"state"`
	GPUsTotal     int      `json:"gpus_total"`
	GPUsUsed      int      `json:"gpus_used"`
	GPUsAvailable int      `json:"gpus_available"`
	Containers    int      `json:"containers"`
	Labels        []string `json:"labels,omitempty"`
}

type yarnInspectJSON struct {
	RM          string         `json:"rm"`
	At          time.Time      `json:"at"`
	Scheduler   string         `json:"scheduler"`
	PendingGPUs int            `json:"pending_gpus"`
	Apps        []yarnAppJSON  `json:"apps"`
	Nodes       []yarnNodeJSON `json:"nodes"`
	Queues      []yarn.Queue   `json:"queues"`
	// Kerberos says as whom the broker authenticated (yarn.kerberos).
	Kerberos *yarn.KerberosStatus `json:"kerberos,omitempty"`
}

// runInspectYARN prints what the broker sees of YARN: "gpubroker inspect
// yarn --rm URL[,URL] [--config FILE] [--user U] [--all] [--json]".
func runInspectYARN(ctx context.Context, e env, args []string) error {
	fs := newFlags("inspect yarn", e)
	rms := fs.String("rm", "", "ResourceManager web addresses, comma-separated for HA (default: yarn.rm of --config)")
	configPath := fs.String("config", "", "gpubroker YAML configuration: yarn section and tenants (adds tenant and unified priority)")
	user := fs.String("user", "", "user.name for simple authentication (default: yarn.user or "+yarn.DefaultUser+")")
	all := fs.Bool("all", false, "list every ACCEPTED/RUNNING app, not only those waiting for GPUs")
	asJSON := fs.Bool("json", false, "print one JSON document: {\"apps\": [...], \"nodes\": [...], ...}")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("takes no arguments, got %q", fs.Args())
	}
	cfg := yarn.Config{User: *user}
	var krb *yarn.Kerberos
	var qm *yarn.QueueMap
	var tenants map[string]int64
	if *configPath != "" {
		c, err := loadConfig(*configPath)
		if err != nil {
			return err
		}
		cfg.RMs = c.file.YARN.RM
		if cfg.User == "" {
			cfg.User = c.file.YARN.User
		}
		if d := c.file.YARN.Timeout.D(); d > 0 {
			cfg.Timeout = d
		}
		if kc := yarnKerberos(c.file.YARN.Kerberos, e.getenv); kc != nil {
			if krb, err = yarn.NewKerberos(*kc); err != nil {
				return fmt.Errorf("inspect yarn: %w", err)
			}
			defer krb.Close()
			cfg.Transport, cfg.User = yarn.NewSPNEGOTransport(krb, nil), "-"
		}
		m := yarnQueueMap(c)
		qm = &m
		tenants = map[string]int64{}
		for _, t := range c.tenants {
			tenants[t.Name] = t.BasePriority
		}
	}
	if *rms != "" {
		cfg.RMs = strings.Split(*rms, ",")
	}
	if len(cfg.RMs) == 0 {
		return usagef("--rm: name the ResourceManager, e.g. --rm http://rm1:8088,http://rm2:8088 (or yarn.rm in --config)")
	}
	client, err := yarn.NewClient(cfg)
	if err != nil {
		return asUsage(err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	obs, err := client.Observe(ctx)
	if err != nil {
		return fmt.Errorf("inspect yarn: %w", err)
	}
	var ks *yarn.KerberosStatus
	if krb != nil {
		st := krb.Status()
		ks = &st
	}

	out := yarnInspectJSON{
		RM: obs.RM, At: obs.At, Scheduler: obs.Scheduler, PendingGPUs: obs.PendingGPUs(),
		Apps: []yarnAppJSON{}, Nodes: []yarnNodeJSON{}, Queues: obs.Queues, Kerberos: ks,
	}
	for _, a := range obs.Apps {
		if !*all && a.PendingGPUs() == 0 {
			continue
		}
		aj := yarnAppJSON{
			ID: a.ID, Name: a.Name, User: a.User, State: a.State, Queue: a.QueuePath, Priority: a.Priority,
			PendingContainers: a.PendingContainers(), PendingGPUs: a.PendingGPUs(),
			RunningContainers: a.RunningContainers, Requests: a.Requests,
		}
		if aj.Requests == nil {
			aj.Requests = []yarn.Request{}
		}
		if qm != nil {
			if t, ok := qm.Tenant(a.QueuePath); ok {
				aj.Tenant = t.Name
				p := tenants[t.Name] + a.Priority
				aj.UnifiedPriority = &p
			}
		}
		out.Apps = append(out.Apps, aj)
	}
	for _, n := range obs.Nodes {
		out.Nodes = append(out.Nodes, yarnNodeJSON{
			Host: n.Host, ID: n.ID, State: n.State, GPUsTotal: n.GPUsTotal, GPUsUsed: n.GPUsUsed,
			GPUsAvailable: n.GPUsAvailable, Containers: n.Containers, Labels: n.Labels,
		})
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return printYARNTable(e, out)
}

func yarnQueueMap(c *config) yarn.QueueMap {
	ts := map[string]broker.Tenant{}
	for _, t := range c.tenants {
		ts[t.Name] = t
	}
	return yarn.NewQueueMap(ts)
}

func printYARNTable(e env, out yarnInspectJSON) error {
	fmt.Fprintf(e.stdout, "RM %s (%s), %d GPUs pending, at %s\n", out.RM, out.Scheduler, out.PendingGPUs, out.At.Format(time.RFC3339))
	if k := out.Kerberos; k != nil {
		fmt.Fprintf(e.stdout, "Kerberos: authenticated as %s (%s) to %s by %s", k.Principal, k.Source, k.Server, k.Via)
		if k.AuthenticatedAs != "" {
			fmt.Fprintf(e.stdout, "; the RM knows us as %s", k.AuthenticatedAs)
		}
		fmt.Fprintln(e.stdout)
	}
	fmt.Fprintln(e.stdout)
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "APP\tQUEUE\tTENANT\tPRIORITY\tSTATE\tPENDING_CONTAINERS\tGPUS_PER_CONTAINER\tPENDING_GPUS")
	for _, a := range out.Apps {
		tenant, prio := "-", fmt.Sprint(a.Priority)
		if a.Tenant != "" {
			tenant = a.Tenant
			prio = fmt.Sprintf("%d (unified %d)", a.Priority, *a.UnifiedPriority)
		}
		var per []string
		for _, r := range a.Requests {
			per = append(per, fmt.Sprint(r.GPUsPerContainer))
		}
		if len(per) == 0 {
			per = []string{"-"}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\n", a.ID, a.Queue, tenant, prio, a.State,
			a.PendingContainers, strings.Join(per, ","), a.PendingGPUs)
	}
	if len(out.Apps) == 0 {
		fmt.Fprintln(w, "(no app waits for GPUs)")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	w = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATE\tGPUS_TOTAL\tGPUS_USED\tGPUS_FREE\tCONTAINERS\tLABELS")
	for _, n := range out.Nodes {
		labels := strings.Join(n.Labels, ",")
		if labels == "" {
			labels = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", n.Host, n.State, n.GPUsTotal, n.GPUsUsed, n.GPUsAvailable, n.Containers, labels)
	}
	if len(out.Nodes) == 0 {
		fmt.Fprintln(w, "(no NodeManagers)")
	}
	return w.Flush()
}
