package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/replay"
)

// openbTrace finds the openb trace: GPUBROKER_OPENB, or shared/ beside the
// repository or a directory above it (a git worktree sits a level deeper).
func openbTrace(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUBROKER_OPENB"); p != "" {
		return p
	}
	for _, up := range []string{"../../../shared", "../../../../shared"} {
		p, _ := filepath.Abs(up + "/data/openb/openb_pod_list_default.csv")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("the openb trace is needed: not in ../shared/data/openb beside the repository or above it; set GPUBROKER_OPENB to openb_pod_list_default.csv")
	return ""
}

// The README's replay tables are docs/replay-tables.md's, and the reduced
// check run below them in that file is what the replay computes now: a
// change to the replay that moves its figures fails here until make replay
// has regenerated the file and the README from the same code.
func TestReplayTablesMatchAFreshRun(t *testing.T) {
	checkTablesFile(t, "../../docs/replay-tables.md", "make replay", tablesDocFor(replay.Config{}), false, replayPolicy(), replay.Policies)
}

// The same for the fleet replay's tables (docs/replay-fleet.md, make
// replay-fleet).
func TestReplayFleetTablesMatchAFreshRun(t *testing.T) {
	checkTablesFile(t, "../../docs/replay-fleet.md", "make replay-fleet", tablesDocFor(replay.Config{Fleet: 1}), true, replayPolicy(), replay.FleetPolicies)
}

// The same for the tables with checkpoint-aligned migration on
// (docs/replay-migrate.md, make replay-migrate: docs/replay-migrate.yaml's
// policy, gpubroker against the two per-side autoscalers).
func TestReplayMigrateTablesMatchAFreshRun(t *testing.T) {
	c, err := loadConfig("../../docs/replay-migrate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := tablesDocFor(replay.Config{Policy: c.policy})
	if doc.begin != replayMigrateBegin {
		t.Fatalf("docs/replay-migrate.yaml does not turn migration on: its tables would go to %s", doc.begin)
	}
	checkTablesFile(t, "../../docs/replay-migrate.md", "make replay-migrate", doc, false, c.policy, replayMigratePolicies)
}

func checkTablesFile(t *testing.T, path, regen string, doc tablesDoc, fleet bool, p broker.Policy, policies []string) {
	t.Helper()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tables, check, ok := splitTables(string(file), doc)
	if !ok {
		t.Fatalf("%s has no %s line: regenerate it with %s", path, doc.checkMark, regen)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), doc.begin+"\n"+tables+doc.end) {
		t.Errorf("the README's tables are not %s's: run %s", path, regen)
	}
	trace := openbTrace(t)
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, stats, err := replay.ReadTrace(trace, f)
	if err != nil {
		t.Fatal(err)
	}
	nf, err := os.Open(filepath.Join(filepath.Dir(trace), "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	nodes, err := replay.ReadNodes(nf.Name(), nf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := replayCheck(tasks, stats, nodes, fleet, p, policies)
	if err != nil {
		t.Fatal(err)
	}
	if got != check {
		t.Errorf("the replay computes other figures than %s holds: run %s.\nfresh check run:\n%s\nfile:\n%s", path, regen, got, check)
	}
}

// --seeds N replays N seeds and reports mean and range per load and
// policy; --tables writes them with the check run, --readme splices them
// between the markers and leaves the rest of the file alone.
func TestReplaySeedsAndTables(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\nb,1000,1024,2,1000,,BE,Running,60,900,60\nc,1000,1024,1,1000,,BE,Running,120,700,120\n")
	dir := t.TempDir()
	tables := filepath.Join(dir, "tables.md")
	readme := filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte("intro\n"+replayTablesBegin+"\nold\n"+replayTablesEnd+"\nrest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The check run reads the openb trace's first tasks: this trace's
	// three are all it has.
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "10", "--seeds", "2",
		"--policies", "per-side-autoscaler,static-peak", "--json", "--tables", tables, "--readme", readme)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Trace   map[string]any   `json:"trace"`
		Summary []replay.Summary `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Trace["seeds"] != 2.0 || len(rep.Summary) != 2 || rep.Summary[0].Seeds != 2 || rep.Summary[0].Policy != replay.PolicyPerSide {
		t.Fatalf("trace %v, summary %+v; want 2 seeds, one row per policy", rep.Trace, rep.Summary)
	}
	if s := rep.Summary[0].GPUHours; !(s.Min <= s.Mean && s.Mean <= s.Max && s.Mean > 0) {
		t.Errorf("GPU-hours over seeds %+v: mean outside its range", s)
	}
	file, err := os.ReadFile(tables)
	if err != nil {
		t.Fatal(err)
	}
	tab, check, ok := splitTables(string(file), tablesDocFor(replay.Config{}))
	if !ok || !strings.Contains(tab, "KILLS WORK") || !strings.Contains(check, "The check: the first 3 tasks") {
		t.Errorf("tables file:\n%s", file)
	}
	got, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + replayTablesBegin + "\n" + tab + replayTablesEnd + "\nrest\n"; string(got) != want {
		t.Errorf("README:\n%s\nwant:\n%s", got, want)
	}
	if code, _, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--readme", readme); code != 2 || !strings.Contains(errOut, "--readme needs --tables") {
		t.Errorf("--readme alone: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--placement", "random"); code != 2 || !strings.Contains(errOut, "placement") {
		t.Errorf("--placement random: exit %d, %s", code, errOut)
	}
}

// replay --fleet N compares gpubroker with the static split of N owned
// nodes by default; a buying policy with --fleet is a usage error.
func TestReplayFleetFlag(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\nb,1000,1024,2,1000,,BE,Running,60,900,60\nc,1000,1024,1,1000,,BE,Running,120,700,120\n")
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "1", "--fleet", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"FLEET: gpubroker vs the static split", "static-fleet", "a fleet of 2 owned nodes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, _, errOut = runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--fleet", "2", "--policies", "per-side-autoscaler")
	if code != 2 || !strings.Contains(errOut, "policies") || !strings.Contains(errOut, "does not apply to a fleet") {
		t.Errorf("--fleet with a buying policy: exit %d, %s", code, errOut)
	}
}
