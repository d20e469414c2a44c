package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/gpubroker/gpubroker/store"
)

// runPlan observes once and prints the plan with its reasons, acting on
// nothing and writing no configuration: a dry run of one tick.
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
	if err := schemaCurrent(ctx, c.file.Database.URL); err != nil {
		return err
	}
	cfg, err := appConfig(c, log, e.getenv)
	if err != nil {
		return err
	}
	// Observe and plan as serve's first tick would, over the store as its
	// seeding would leave it, writing nothing: no migration (run
	// "gpubroker migrate"), no seeding (serve does it).
	cfg.Preview = true
	m, err := openApp(ctx, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	rt, err := m.NewRuntime()
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

// schemaCurrent refuses a database whose schema is not fully migrated:
// plan never migrates it.
func schemaCurrent(ctx context.Context, url string) error {
	if url == "" {
		return usagef("no database: set database.url in the config file or GPUBROKER_DATABASE_URL")
	}
	m, err := store.NewMigrations(ctx, url, nil)
	if err != nil {
		return usagef("%s", err)
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	pending := 0
	for _, s := range st {
		if !s.Applied {
			pending++
		}
	}
	if pending > 0 {
		return usagef("the database schema lacks %d migration(s) (%s); plan does not migrate: run gpubroker migrate --config FILE first", pending, store.Address(url))
	}
	return nil
}
