package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	sizesPath := fs.String("sizes", "", "derive the trace from --trace and this sizes-only pod list `file` (e.g. openb_pod_list_multigpu50.csv): same-index rows take its GPU requests, its extra rows are added with the timeline of a --trace GPU task chosen by a hash of their name")
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
	placement := fs.String("placement", replay.PlacementSpread, "how both schedulers place work: `spread` (their defaults: LeastAllocated, CapacityScheduler heartbeats) or pack (MostAllocated, multi-node placement)")
	seeds := fs.Int("seeds", 1, "replay `N` seeds from --seed on (each splits the tasks between the sides anew) and report mean and range")
	fleet := fs.Int("fleet", 0, "replay a fleet of `N` owned nodes (the node list's mix scaled to N, nothing bought) and compare gpubroker's hand-overs with a static split of the same nodes (policies: "+strings.Join(replay.FleetPolicies, ", ")+")")
	tablesPath := fs.String("tables", "", "write the Markdown tables over the seeds, and a reduced check run a test repeats, to this `file` (make replay: docs/replay-tables.md)")
	shapes := fs.String("what-if-shapes", "", "comma-separated node `sizes` in GPUs (e.g. 1,2,4): also replay gpubroker with every pool of larger nodes offered as nodes of each size too, and report what it saves and costs in waits")
	readmePath := fs.String("readme", "", "splice the --tables file's tables into this `file` between "+replayTablesBegin+" and "+replayTablesEnd+" (with --fleet: "+replayFleetBegin+" and "+replayFleetEnd+"; with a --config whose consolidation.migrate is checkpointed: "+replayMigrateBegin+" and "+replayMigrateEnd+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *readmePath != "" && *tablesPath == "" {
		return usagef("--readme needs --tables: the README takes its tables from that file")
	}
	if *tracePath == "" {
		*tracePath = e.getenv("GPUBROKER_OPENB")
	}
	if *tracePath == "" {
		return usagef("--trace is required (or set GPUBROKER_OPENB to openb_pod_list_default.csv)")
	}
	cfg := replay.Config{Policy: replayPolicy(), YARNShare: *yarnShare, Seed: *seed, Headroom: 1, RuleOff: *ruleOff, Fleet: *fleet}
	if *fleet > 0 && !flagSet(fs, "policies") {
		*policies = strings.Join(replay.FleetPolicies, ",")
	}
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
	cfg.World.Placement = *placement

	f, err := os.Open(*tracePath)
	if err != nil {
		return usagef("--trace: %s", err)
	}
	defer f.Close()
	var trace io.Reader = f
	derived := ""
	if *sizesPath != "" {
		sf, err := os.Open(*sizesPath)
		if err != nil {
			return usagef("--sizes: %s", err)
		}
		defer sf.Close()
		if trace, derived, err = replay.DeriveSizes(*tracePath, f, *sizesPath, sf); err != nil {
			return inputError(err)
		}
	}
	cfg.Tasks, cfg.Stats, err = replay.ReadTrace(*tracePath, trace)
	if err != nil {
		return inputError(err)
	}
	cfg.Stats.Derived = derived
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
	var shapeSizes []int
	for _, v := range strings.Split(*shapes, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return usagef("--what-if-shapes: %q is not a node size in GPUs (a whole number of at least 1, e.g. --what-if-shapes 1,2,4)", v)
		}
		shapeSizes = append(shapeSizes, n)
	}
	if len(shapeSizes) > 0 && *fleet > 0 {
		return usagef("--what-if-shapes: a fleet's nodes are the ones it owns; replay shapes without --fleet")
	}
	rep, err := replay.RunSeeds(cfg, *seeds)
	if err != nil {
		return inputError(err)
	}
	if len(shapeSizes) > 0 {
		if rep.Shapes, err = replay.RunShapes(cfg, *seeds, shapeSizes); err != nil {
			return inputError(err)
		}
	}
	if *tablesPath != "" {
		if err := writeReplayTables(*tablesPath, *readmePath, rep, cfg); err != nil {
			return err
		}
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

// The markers around the replay tables in the README and the check run in
// the tables file.
const (
	replayTablesBegin = "<!-- replay-tables:begin -->"
	replayTablesEnd   = "<!-- replay-tables:end -->"
	replayCheckMark   = "<!-- replay-check: a reduced replay TestReplayTablesMatchAFreshRun repeats; make replay regenerates it -->"
	// A fleet replay's (make replay-fleet).
	replayFleetBegin     = "<!-- replay-fleet:begin -->"
	replayFleetEnd       = "<!-- replay-fleet:end -->"
	replayFleetCheckMark = "<!-- replay-check: a reduced fleet replay TestReplayFleetTablesMatchAFreshRun repeats; make replay-fleet regenerates it -->"
	// A replay with checkpoint-aligned migration on (make replay-migrate:
	// --config docs/replay-migrate.yaml).
	replayMigrateBegin     = "<!-- replay-migrate:begin -->"
	replayMigrateEnd       = "<!-- replay-migrate:end -->"
	replayMigrateCheckMark = "<!-- replay-check: a reduced replay with migration on TestReplayMigrateTablesMatchAFreshRun repeats; make replay-migrate regenerates it -->"
)

// tablesDoc is where a replay's tables go: the README's markers and the
// tables file's check mark: a fleet replay's, a replay's with migration
// on, or the pools' one with serve's defaults.
type tablesDoc struct{ begin, end, checkMark string }

func tablesDocFor(cfg replay.Config) tablesDoc {
	switch {
	case cfg.Fleet > 0:
		return tablesDoc{replayFleetBegin, replayFleetEnd, replayFleetCheckMark}
	case cfg.Policy.Migrate == broker.MigrateCheckpointed:
		return tablesDoc{replayMigrateBegin, replayMigrateEnd, replayMigrateCheckMark}
	}
	return tablesDoc{replayTablesBegin, replayTablesEnd, replayCheckMark}
}

// The reduced check run: the trace's first replayCheckTasks tasks at
// replayCheckLoad, seed 0, the policies and the policy the tables were
// replayed with, and the default world. IMPORTANT: a change to what the replay computes changes
// it, so the test that repeats it fails until make replay regenerates the
// tables (and the README) from the same code.
const (
	replayCheckTasks = 300
	replayCheckLoad  = 100
	// replayCheckFleet is the fleet check run's nodes (replay-fleet).
	replayCheckFleet = 6
)

// replayMigratePolicies are the policies make replay-migrate compares
// (its --policies): gpubroker with migration on against the killing and
// the safe per-side autoscaler; the static splits are in make replay's.
var replayMigratePolicies = []string{replay.PolicyBroker, replay.PolicyPerSide, replay.PolicySafeSide}

// replayCheck replays the reduced check run of tasks (the whole trace, as
// read) under policy p, comparing policies, and returns its tables.
func replayCheck(tasks []replay.Task, stats replay.TraceStats, nodes []replay.NodeType, fleet bool, p broker.Policy, policies []string) (string, error) {
	c := replay.Config{Policy: p, World: replay.DefaultWorld(p), Policies: policies, YARNShare: 0.5, Headroom: 1,
		Loads: []float64{replayCheckLoad}, NodeTypes: nodes, Tasks: tasks[:min(len(tasks), replayCheckTasks)]}
	if fleet {
		c.Fleet = replayCheckFleet
	}
	c.World.CheckpointInterval = replayCheckpoint
	c.Stats = stats
	c.Stats.Tasks, c.Stats.GPUHours = len(c.Tasks), 0
	for _, t := range c.Tasks {
		c.Stats.GPUHours += float64(t.GPUs) * t.Run.Hours()
	}
	rep, err := replay.RunSeeds(c, 1)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The check: the first %d tasks at load %gx.\n\n", len(c.Tasks), float64(replayCheckLoad))
	if err := rep.WriteTables(&b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeReplayTables writes the tables over the seeds and the check run
// below them to path and, when readme is set, splices the tables into it.
func writeReplayTables(path, readme string, rep *replay.Report, cfg replay.Config) error {
	var b strings.Builder
	if err := rep.WriteTables(&b); err != nil {
		return err
	}
	tables := b.String()
	doc := tablesDocFor(cfg)
	check, err := replayCheck(cfg.Tasks, cfg.Stats, cfg.NodeTypes, cfg.Fleet > 0, cfg.Policy, cfg.Policies)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(tables+"\n"+doc.checkMark+"\n\n"+check), 0o644); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if readme == "" {
		return nil
	}
	old, err := os.ReadFile(readme)
	if err != nil {
		return fmt.Errorf("read %q: %w", readme, err)
	}
	out, err := spliceTables(string(old), tables, doc)
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
		return fmt.Errorf("write %q: %w", readme, err)
	}
	return nil
}

// spliceTables replaces what lies between the README's markers with tables.
func spliceTables(readme, tables string, doc tablesDoc) (string, error) {
	i := strings.Index(readme, doc.begin)
	j := strings.Index(readme, doc.end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s markers to put the tables between", doc.begin, doc.end)
	}
	return readme[:i] + doc.begin + "\n" + tables + readme[j:], nil
}

// splitTables splits a tables file into its tables and its check run.
func splitTables(file string, doc tablesDoc) (tables, check string, ok bool) {
	tables, check, ok = strings.Cut(file, "\n"+doc.checkMark+"\n\n")
	return tables, check, ok
}
