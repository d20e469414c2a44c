package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
)

// cloudPoolJSON is one pool in "gpubroker inspect cloud --json".
type cloudPoolJSON struct {
	Name          string            `json:"name"`
	Group         string            `json:"group"`
	Min           int               `json:"min"`
	Max           int               `json:"max"`
	Desired       int               `json:"desired"`
	InService     int               `json:"in_service"`
	Pending       int               `json:"pending"`
	GPUsPerNode   int               `json:"gpus_per_node"`
	GPUModel      string            `json:"gpu_model,omitempty"`
	Sides         broker.PoolSides  `json:"sides"`
	Labels        map[string]string `json:"labels,omitempty"`
	Taints        []broker.Taint    `json:"taints,omitempty"`
	BackoffUntil  *time.Time        `json:"backoff_until,omitempty"`
	BackoffReason string            `json:"backoff_reason,omitempty"`
	Instances     []broker.Instance `json:"instances"`
}

// runInspectCloud prints the pools the broker sees: "gpubroker inspect
// cloud [--config FILE] [--endpoint URL] [--region R] [--json]".
func runInspectCloud(ctx context.Context, e env, args []string) error {
	fs := newFlags("inspect cloud", e)
	configPath := fs.String("config", "", "gpubroker YAML configuration whose cloud section and pools to use")
	endpoint := fs.String("endpoint", "", "autoscaling and EC2 endpoint URL (a simulator or moto); overrides cloud.endpoint")
	region := fs.String("region", "", "AWS region; overrides cloud.region (default: the AWS default chain)")
	discover := fs.Bool("discover", true, "also list groups tagged "+cloud.TagPool)
	asJSON := fs.Bool("json", false, "print JSON: {\"pools\": [...]}")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("takes no arguments, got %q", fs.Args())
	}
	cfg := cloud.Config{Discover: *discover}
	if *configPath != "" {
		c, err := loadConfig(*configPath)
		if err != nil {
			return err
		}
		cfg = cloudConfigFrom(c)
		cfg.Discover = cfg.Discover || *discover
	}
	if *endpoint != "" {
		cfg.Endpoint = *endpoint
	}
	if *region != "" {
		cfg.Region = *region
	}
	// inspect is interactive: fail fast instead of waiting out long retries.
	cfg.MaxAttempts, cfg.MaxBackoff = 3, 2*time.Second

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	p, err := cloud.New(ctx, cfg)
	if err != nil {
		return asUsage(err)
	}
	reports, err := p.Report(ctx)
	if err != nil {
		return fmt.Errorf("inspect cloud: %w", err)
	}
	if *asJSON {
		return printCloudJSON(e, reports)
	}
	return printCloudTable(e, reports)
}

// cloudConfigFrom maps the configuration file's cloud section and AWS pools
// to the provider's configuration.
func cloudConfigFrom(c *config) cloud.Config {
	cfg := cloud.Config{Region: c.file.Cloud.Region, Endpoint: c.file.Cloud.Endpoint}
	for _, p := range c.pools {
		if p.Provider != "" && p.Provider != "aws" {
			continue
		}
		pc := cloud.PoolConfig{
			Name: p.Name, Group: p.Group, GPUModel: p.GPUModel, GPUsPerNode: p.GPUsPerNode,
			Sides: p.Sides, PricePerHour: p.PricePerHour, ExpanderPriority: p.ExpanderPriority,
			Labels: p.Labels, Taints: p.Taints,
		}
		if p.MinNodes > 0 {
			pc.MinNodes = &p.MinNodes
		}
		if p.MaxNodes > 0 {
			pc.MaxNodes = &p.MaxNodes
		}
		cfg.Pools = append(cfg.Pools, pc)
	}
	cfg.Discover = len(cfg.Pools) == 0
	return cfg
}

// asUsage turns configuration validation errors into usage errors (exit 2).
func asUsage(err error) error {
	var ve *broker.ValidationError
	if errors.As(err, &ve) {
		return usagef("%s: %s", ve.Field, ve.Problem)
	}
	return err
}

func printCloudJSON(e env, reports []cloud.PoolReport) error {
	out := struct {
		Pools []cloudPoolJSON `json:"pools"`
	}{Pools: make([]cloudPoolJSON, 0, len(reports))}
	for _, r := range reports {
		j := cloudPoolJSON{
			Name: r.Pool.Name, Group: r.Pool.Group, Min: r.Pool.MinNodes, Max: r.Pool.MaxNodes,
			Desired: r.Desired, InService: r.InService, Pending: r.Pending,
			GPUsPerNode: r.Pool.GPUsPerNode, GPUModel: r.Pool.GPUModel, Sides: r.Pool.Sides,
			Labels: r.Pool.Labels, Taints: r.Pool.Taints, BackoffReason: r.BackoffReason,
			Instances: r.Instances,
		}
		if !r.BackoffUntil.IsZero() {
			t := r.BackoffUntil.UTC()
			j.BackoffUntil = &t
		}
		out.Pools = append(out.Pools, j)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

func printCloudTable(e env, reports []cloud.PoolReport) error {
	if len(reports) == 0 {
		fmt.Fprintln(e.stdout, "no pools: name groups in the configuration or tag them "+cloud.TagPool+"=<name>")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tGROUP\tMIN\tMAX\tDESIRED\tIN-SERVICE\tPENDING\tGPUS/NODE\tMODEL\tBACKOFF")
	for _, r := range reports {
		b := "-"
		if !r.BackoffUntil.IsZero() {
			b = "until " + r.BackoffUntil.UTC().Format(time.RFC3339) + ": " + r.BackoffReason
		}
		model := r.Pool.GPUModel
		if model == "" {
			model = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Pool.Name, r.Pool.Group, r.Pool.MinNodes,
			r.Pool.MaxNodes, r.Desired, r.InService, r.Pending, r.Pool.GPUsPerNode, model, oneLine(b))
	}
	return tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
