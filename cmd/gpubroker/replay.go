package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/replay"
)

// runReplay replays a job trace against gpubroker's planner and the
// baselines (package replay) and prints the comparison.
func runReplay(_ context.Context, e env, args []string) error {
	fs := newFlags("replay", e)
	tracePath := fs.String("trace", "", "openb pod list `file` (default $GPUBROKER_OPENB)")
	nodesPath := fs.String("nodes", "", "openb node list `file` (default: openb_node_list_gpu_node.csv beside the trace)")
	cfgPath := fs.String("config", "", "YAML configuration `file`: its policy, and its pools if it has any")
	policies := fs.String("policies", strings.Join(replay.Policies, ","), "comma-separated `policies` to compare")
	yarnShare := fs.Float64("yarn-share", 0.5, "share of tasks assigned to YARN (by a hash of the name)")
	loads := fs.String("load", "1,10,100,1000", "comma-separated arrival-rate `factors`; the last is the headline")
	seed := fs.Int64("seed", 0, "salt of the task-to-side hash")
	outDir := fs.String("out", "", "write report.md and SVG plots into this `directory`")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	ckpt := fs.Duration("checkpoint-interval", replayCheckpoint, "model running work as checkpointing this often (openb tasks are training jobs; 0: unknown, an eviction loses all work since the start)")
	ruleOff := fs.Bool("rule-off", true, "also replay gpubroker with consolidation.max_work_lost unbounded, to report the work lost with the rule on and off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *tracePath == "" {
		*tracePath = e.getenv("GPUBROKER_OPENB")
	}
	if *tracePath == "" {
		return usagef("--trace is required (or set GPUBROKER_OPENB to openb_pod_list_default.csv)")
	}
	cfg := replay.Config{Policy: replayPolicy(), YARNShare: *yarnShare, Seed: *seed, Headroom: 1, RuleOff: *ruleOff}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Policies = append(cfg.Policies, p)
		}
	}
	for _, l := range strings.Split(*loads, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
		if err != nil {
			return usagef("--load: %q is not a number", l)
		}
		cfg.Loads = append(cfg.Loads, x)
	}
	if *cfgPath != "" {
		c, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		cfg.Policy, cfg.Pools = c.policy, c.pools
	}
	cfg.World = replay.DefaultWorld(cfg.Policy)
	cfg.World.CheckpointInterval = *ckpt

	f, err := os.Open(*tracePath)
	if err != nil {
		return usagef("--trace: %s", err)
	}
	defer f.Close()
	cfg.Tasks, cfg.Stats, err = replay.ReadTrace(*tracePath, f)
	if err != nil {
		return inputError(err)
	}
	if len(cfg.Pools) == 0 {
		if *nodesPath == "" {
			*nodesPath = filepath.Join(filepath.Dir(*tracePath), "openb_node_list_gpu_node.csv")
		}
		nf, err := os.Open(*nodesPath)
		if err != nil {
			return usagef("--nodes: %s (give the node list, or a --config with pools)", err)
		}
		defer nf.Close()
		cfg.NodeTypes, err = replay.ReadNodes(*nodesPath, nf)
		if err != nil {
			return inputError(err)
		}
	}
	rep, err := replay.Run(cfg)
	if err != nil {
		return inputError(err)
	}
	if *outDir != "" {
		if err := writeReplayFiles(*outDir, rep, cfg.Tasks); err != nil {
			return err
		}
	}
	if *asJSON {
		return rep.WriteJSON(e.stdout)
	}
	return rep.WriteText(e.stdout)
}

// replayCheckpoint is the checkpoint interval the replay models by
// default: openb's tasks are training jobs, and 30 minutes is a common
// checkpoint period for them (the trace itself records none).
const replayCheckpoint = 30 * time.Minute

// replayPolicy is the policy the replay uses without --config: serve's
// defaults (broker.DefaultPolicy), so a plain replay answers "what would
// serve do with this trace". Tuned policies are replayed with --config
// (docs/replay-tuned.yaml), and the report names every value that differs
// from the defaults.
func replayPolicy() broker.Policy {
	return broker.DefaultPolicy()
}

// inputError turns bad trace or configuration input into a usage error
// (exit status 2) that names the line and column or the field.
func inputError(err error) error {
	var te *replay.TraceError
	var ve *broker.ValidationError
	switch {
	case errors.As(err, &te):
		return usagef("%s", te)
	case errors.As(err, &ve):
		return usagef("--%s: %s", ve.Field, ve.Problem)
	}
	return err
}

// writeReplayFiles writes report.md and the plots of the headline load.
func writeReplayFiles(dir string, rep *replay.Report, tasks []replay.Task) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create report directory %q: %w", dir, err)
	}
	lr := rep.Loads[len(rep.Loads)-1]
	type plot struct {
		name  string
		write func(f *os.File) error
	}
	plots := []plot{
		{"capacity.svg", func(f *os.File) error { return replay.WriteCapacityPlot(f, lr, tasks) }},
		{"wait-cdf-ls.svg", func(f *os.File) error { return replay.WriteWaitCDF(f, lr, "LS") }},
		{"wait-cdf-be.svg", func(f *os.File) error { return replay.WriteWaitCDF(f, lr, "BE") }},
	}
	var names []string
	for _, p := range plots {
		if err := writeFileWith(filepath.Join(dir, p.name), p.write); err != nil {
			return err
		}
		names = append(names, p.name)
	}
	return writeFileWith(filepath.Join(dir, "report.md"), func(f *os.File) error { return rep.WriteMarkdown(f, names) })
}

func writeFileWith(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %q: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %q: %w", path, err)
	}
	return nil
}
