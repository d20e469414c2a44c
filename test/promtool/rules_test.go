package promtool

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	rulesFile     = "../../deploy/prometheus/gpubroker-rules.yaml"
	rulesTestFile = "../../deploy/prometheus/gpubroker-rules_test.yaml"
	rulesReadme   = "../../deploy/prometheus/README.md"
	dashboardFile = "../../deploy/grafana/gpubroker.json"
)

// The alerts the rules must have (issue 17): a source stale (YARN,
// Kubernetes; the cloud per pool), an op failed, a pool in backoff, demand
// waiting too long, a node unhealthy, the leader missing (and its loop
// stalled), both sides claiming a node.
var wantAlerts = []string{"GPUBrokerLeaderMissing", "GPUBrokerTickStalled", "GPUBrokerSourceStale",
	"GPUBrokerCloudPoolStale", "GPUBrokerOpFailed", "GPUBrokerPoolBackoff", "GPUBrokerDemandWaiting",
	"GPUBrokerNodeUnhealthy", "GPUBrokerRepairsPaused", "GPUBrokerNodeClaimedByBothSides", "GPUBrokerFleetHostMissing"}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// promtool runs the cached promtool with args and returns its output and
// exit error.
func promtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx := context.Background()
	bin, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// TestRulesPassPromtoolCheck: promtool (built from the Prometheus module)
// accepts the rule file, with its linter (duplicate rules, bad templates).
func TestRulesPassPromtoolCheck(t *testing.T) {
	out, err := promtool(t, "check", "rules", "--lint=all", "--lint-fatal", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(wantAlerts))) {
		t.Fatalf("promtool check rules found another number of rules than the %d alerts:\n%s", len(wantAlerts), out)
	}
}

// TestRulesUnitTests: promtool test rules passes on gpubroker-rules_test.yaml
// — every alert fires on its synthetic series with the expected labels and
// rendered annotations, and stays silent on blips, other labels' series and
// old values.
func TestRulesUnitTests(t *testing.T) {
	out, err := promtool(t, "test", "rules", rulesTestFile)
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules did not report success:\n%s", out)
	}
}

// TestRulesUnitTestsCatchABrokenRule: the unit tests fail when a rule is
// broken (the source-stale alert compares with 2, so it never fires), so
// they can fail at all.
func TestRulesUnitTestsCatchABrokenRule(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(b), "max by (source) (gpubroker_source_stale) == 1", "max by (source) (gpubroker_source_stale) == 2", 1)
	if broken == string(b) {
		t.Fatal("the source-stale rule's expression is not in the rule file")
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"gpubroker-rules.yaml": []byte(broken), "gpubroker-rules_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := promtool(t, "test", "rules", filepath.Join(dir, "gpubroker-rules_test.yaml"))
	if err == nil || !strings.Contains(out, "GPUBrokerSourceStale") {
		t.Fatalf("promtool test rules passed a broken rule (err %v):\n%s", err, out)
	}
}

// TestRulesAreComplete: the rule file has every alert of the issue, each
// with a severity, a summary and a description that name the alert's
// labels, and a runbook_url to its section in deploy/prometheus/README.md;
// the unit tests have, for each alert, a case where it fires and one where
// it must not.
func TestRulesAreComplete(t *testing.T) {
	readme, err := os.ReadFile(rulesReadme)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]rule{}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert; the rule file holds alerts only", r.Record)
			continue
		}
		got[r.Alert] = r
		switch r.Labels["severity"] {
		case "critical", "warning":
		default:
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s annotation", r.Alert, a)
			}
		}
		// Every label the expression keeps (by (...)) is named in the summary.
		if i := strings.Index(r.Expr, "by ("); i >= 0 {
			list := r.Expr[i+4:]
			list = list[:strings.IndexByte(list, ')')]
			for _, l := range strings.Split(list, ",") {
				if l = strings.TrimSpace(l); !strings.Contains(r.Annotations["summary"], "$labels."+l) {
					t.Errorf("%s: the summary does not name label %s", r.Alert, l)
				}
			}
		}
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "deploy/prometheus/README.md#"+anchor) {
			t.Errorf("%s: runbook_url %q does not point at its README section", r.Alert, r.Annotations["runbook_url"])
		}
		if !strings.Contains(string(readme), "\n### "+r.Alert+"\n") {
			t.Errorf("deploy/prometheus/README.md has no runbook section \"### %s\"", r.Alert)
		}
	}
	for _, a := range wantAlerts {
		if _, ok := got[a]; !ok {
			t.Errorf("the rule file lacks alert %s", a)
		}
	}

	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var ut struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &ut); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for a := range got {
		if !fires[a] || !silent[a] {
			t.Errorf("%s: the unit tests need a case where it fires (%v) and one where it does not (%v)", a, fires[a], silent[a])
		}
	}
}
