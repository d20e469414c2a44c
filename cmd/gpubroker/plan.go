package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"text/tabwriter"
)

// runPlan observes once and prints the plan with its reasons, acting on
// nothing: a dry run of one tick.
func runPlan(ctx context.Context, e env, args []string) error {
	fs := newFlags("plan", e)
	cfgPath := fs.String("config", "", "YAML configuration `file` (required)")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usagef("--config is required")
	}
	c, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if c.file.Database.URL == "" {
		// Keep the password out of the file: deployments pass it from a Secret.
		c.file.Database.URL = e.getenv("GPUBROKER_DATABASE_URL")
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := wire(ctx, c, log, true)
	if err != nil {
		return err
	}
	defer w.st.Close()
	rt, err := w.newRuntime()
	if err != nil {
		return err
	}
	plan, err := rt.DryRun(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ACTIONS (%d)\n", len(plan.Actions))
	for _, a := range plan.Actions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Kind, a.Pool, a.Node, a.Reason)
	}
	fmt.Fprintf(tw, "\nWAITING (%d)\n", len(plan.Waits))
	for _, wt := range plan.Waits {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", wt.Demand, wt.Reason, wt.Detail)
	}
	return tw.Flush()
}
