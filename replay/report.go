package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// WriteJSON prints the report as JSON: trace, world, the headline load's
// policies, and the curve over loads.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText prints the choices, the world, one table per load and the
// curve, for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "TRACE %s\n", r.Trace.File)
	for _, c := range r.Trace.Choices {
		fmt.Fprintf(&b, "  - %s\n", c)
	}
	fmt.Fprintf(&b, "\nWORLD\n")
	for _, rule := range r.World.Rules {
		fmt.Fprintf(&b, "  %s\n", rule)
	}
	fmt.Fprintf(&b, "  - policy: %s\n", policyLine(r))
	fmt.Fprintf(&b, "  - %s\n", policyChangesLine(r.World.PolicyChanges))
	fmt.Fprintf(&b, "  - %s\n", ruleOffNote)
	for _, lr := range r.Loads {
		fmt.Fprintf(&b, "\nLOAD %gx: peak concurrent demand %d GPUs (p95 %d, mean %.0f), pools' max %d GPUs\n", lr.Load, lr.PeakDemandGPUs, lr.P95DemandGPUs, lr.MeanDemandGPUs, lr.CapacityGPUs)
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, tableHeader("\t")+"\t\n")
		for _, p := range lr.Policies {
			fmt.Fprint(tw, tableRow(p, "\t")+"\t\n")
		}
		if lr.RuleOff != nil {
			fmt.Fprint(tw, tableRow(*lr.RuleOff, "\t")+"\t\n")
		}
		tw.Flush()
	}
	fmt.Fprintf(&b, "\nCURVE\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, r.curveHeader("\t")+"\t\n")
	for _, lr := range r.Loads {
		fmt.Fprint(tw, r.curveRow(lr, "\t")+"\t\n")
	}
	tw.Flush()
	if r.Trace.Seeds > 1 {
		r.writeSummaryText(&b)
	}
	r.writeShapesText(&b)
	fmt.Fprintf(&b, "\n%s at the headline load %gx\n", map[bool]string{false: "GOAL", true: "FLEET: gpubroker vs the static split"}[r.Fleet > 0], r.Headline)
	for _, g := range r.Goals() {
		fmt.Fprintf(&b, "  - %s\n", g)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ruleOffNote says what the rule-off figures are.
const ruleOffNote = "the row \"gpubroker (rule off)\", when replayed (--rule-off), is gpubroker with consolidation.max_work_lost unbounded; the baselines have no such rule. Work lost is redone: it is in every policy's GPU-hours"

// PolicyChanges compares p with serve's defaults (broker.DefaultPolicy)
// field by field, as the JSON report names them, and returns one
// "field value (default value)" per difference, sorted by field.
func PolicyChanges(p broker.Policy) []string {
	var got, def map[string]any
	for _, x := range []struct {
		p   broker.Policy
		dst *map[string]any
	}{{p, &got}, {broker.DefaultPolicy(), &def}} {
		b, err := json.Marshal(x.p)
		if err == nil {
			err = json.Unmarshal(b, x.dst)
		}
		if err != nil { // a Policy always marshals; say so rather than hide it
			return []string{fmt.Sprintf("policy not comparable with the defaults: %s", err)}
		}
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	for k := range def {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		g, _ := json.Marshal(got[k])
		d, _ := json.Marshal(def[k])
		if string(g) != string(d) {
			out = append(out, fmt.Sprintf("%s %s (default %s)", k, g, d))
		}
	}
	return out
}

// policyChangesLine says whether the replayed policy is serve's default
// one, and if not, what differs.
func policyChangesLine(changes []string) string {
	if len(changes) == 0 {
		return "policy is serve's defaults (no --config, or one that changes nothing): what serve would have done"
	}
	return "policy differs from serve's defaults in: " + strings.Join(changes, "; ")
}

func policyLine(r *Report) string {
	p := r.World.Policy
	return fmt.Sprintf("scale-down after %s at or under %.0f%% GPU allocation, expander %s, preemption %t, ownership transfer %t, drain timeout %s, consolidation max work lost %s, cordon-and-wait %t, YARN drain by attrition %t",
		p.ScaleDownUnneeded, 100*p.ScaleDownUtilisation, p.Expander, p.Preemption, p.OwnershipTransfer, p.DrainTimeout, p.MaxWorkLost, p.CordonAndWait, p.YARNDrainByAttrition)
}

func tableHeader(sep string) string {
	return strings.Join([]string{"policy", "GPU-h", "work GPU-h", "GPU-h/work", "idle GPU-h", "LS p50 s", "LS p95 s", "LS p99 s", "BE p95 s",
		"YARN p95 s", "K8s p95 s", "unserved", "unfinished", "not done GPU-h", "restarts", "kills", "kills not preempt", "their lost GPU-h",
		"LS/G kills", "migrations", "lost GPU-h", "attrition", "launch", "hand-over", "peak nodes", "note"}, sep)
}

func tableRow(p Result, sep string) string {
	return strings.Join([]string{p.Name, f0(p.GPUHours), f0(p.CompletedWorkGPUHours), f3(p.ProvisionedPerWork), f0(p.GPUHours - p.AllocatedGPUHours),
		f0(p.WaitP50["LS"]), f0(p.WaitP95["LS"]), f0(p.WaitP99["LS"]), f0(p.WaitP95["BE"]),
		f0(p.WaitP95["yarn"]), f0(p.WaitP95["k8s"]),
		itoa(p.Unserved), itoa(p.Unfinished), f0(p.NotDoneGPUHours), itoa(p.Restarts), itoa(p.Kills), itoa(p.KillsNotPreemption),
		f0(p.KillsNotPreemptionGPUHours), itoa(p.LSKills), itoa(p.Migrations), f0(p.WorkLostGPUHours), itoa(p.Attritions),
		itoa(p.Launches), itoa(p.Handovers), itoa(p.PeakNodes), p.Note}, sep)
}

// curveHeader heads the curve: per load, each policy's GPU-hours per
// GPU-hour of work and LS p95 wait, then the goal's columns; a fleet's
// curve has its GPU use and hand-overs instead (nothing is bought).
func (r *Report) curveHeader(sep string) string {
	var cols []string
	cols = append(cols, "load", "peak demand", "p95 demand", "capacity")
	if r.Fleet > 0 {
		for _, n := range FleetPolicies {
			cols = append(cols, n+" GPU use", n+" LS p95 s", n+" BE p95 s")
		}
		return strings.Join(append(cols, "hand-overs", "kills not preempt"), sep)
	}
	for _, n := range Policies {
		cols = append(cols, n+" GPU-h/work", n+" LS p95 s")
	}
	cols = append(cols, "GPU-h/work (goal <= 1.15)", "LS p95 vs per-side (goal <= 0.70x)", "kills not preempt")
	return strings.Join(cols, sep)
}

func (r *Report) curveRow(lr LoadResult, sep string) string {
	cols := []string{fmt.Sprintf("%gx", lr.Load), itoa(lr.PeakDemandGPUs), itoa(lr.P95DemandGPUs), itoa(lr.CapacityGPUs)}
	if r.Fleet > 0 {
		for _, n := range FleetPolicies {
			if p, ok := lr.find(n); ok {
				cols = append(cols, fmt.Sprintf("%.1f%%", 100*p.AllocationRatio), f0(p.WaitP95["LS"]), f0(p.WaitP95["BE"]))
			} else {
				cols = append(cols, "-", "-", "-")
			}
		}
		gb, _ := lr.find(PolicyBroker)
		return strings.Join(append(cols, itoa(gb.Handovers), itoa(gb.KillsNotPreemption)), sep)
	}
	for _, n := range Policies {
		if p, ok := lr.find(n); ok {
			cols = append(cols, f3(p.ProvisionedPerWork), f0(p.WaitP95["LS"]))
		} else {
			cols = append(cols, "-", "-")
		}
	}
	g := lr.goal()
	cols = append(cols, g.ratio, g.lsCA, g.kills)
	return strings.Join(cols, sep)
}

func (lr LoadResult) find(name string) (Result, bool) {
	for _, p := range lr.Policies {
		if p.Name == name {
			return p, true
		}
	}
	return Result{}, false
}

type goalCols struct {
	ratio, lsCA, kills     string
	ratioOK, lsCAOK, kilOK bool
	haveGB, haveCA         bool
}

// The goal (issue 27): GPU-hours provisioned per GPU-hour of completed
// work at most goalRatio, no work-losing kill outside a preemption, and
// an LS p95 wait (re-queues included) at most goalLS times the per-side
// autoscaler's.
const (
	goalRatio = 1.15
	goalLS    = 0.70
)

func (lr LoadResult) goal() goalCols {
	g := goalCols{ratio: "-", lsCA: "-", kills: "-"}
	gb, ok := lr.find(PolicyBroker)
	if !ok {
		return g
	}
	g.haveGB = true
	g.ratio = f3(gb.ProvisionedPerWork)
	g.ratioOK = gb.ProvisionedPerWork > 0 && gb.ProvisionedPerWork <= goalRatio
	g.kills = itoa(gb.KillsNotPreemption)
	g.kilOK = gb.KillsNotPreemption == 0
	if ca, ok := lr.find(PolicyPerSide); ok {
		g.haveCA = true
		if ca.WaitP95["LS"] > 0 {
			r := gb.WaitP95["LS"] / ca.WaitP95["LS"]
			g.lsCA = ratio(r)
			g.lsCAOK = r <= goalLS
		} else {
			g.lsCA = "n/a (0)"
			g.lsCAOK = gb.WaitP95["LS"] == 0
		}
	}
	return g
}

// Goals says, at the headline load, whether gpubroker met each part of the
// goal: at most 1.15 GPU-hours provisioned per GPU-hour of completed work,
// no work-losing kill outside a preemption, and an LS p95 wait (re-queues
// included) at most 0.70x the per-side autoscaler's.
func (r *Report) Goals() []string {
	lr := r.Loads[len(r.Loads)-1]
	if r.Fleet > 0 {
		return lr.fleetComparison(r.Fleet)
	}
	g := lr.goal()
	yes := map[bool]string{true: "met", false: "NOT met"}
	if !g.haveGB {
		return []string{"not assessed: the goal is gpubroker's; replay it"}
	}
	out := []string{
		fmt.Sprintf("GPU-hours provisioned per GPU-hour of completed work: %s (goal: %.2f or less): %s", g.ratio, goalRatio, yes[g.ratioOK]),
		fmt.Sprintf("work-losing kills outside a preemption: %s (goal: 0): %s", g.kills, yes[g.kilOK]),
	}
	if g.haveCA {
		out = append(out, fmt.Sprintf("LS p95 wait (re-queues included) vs the per-side autoscaler: %s (goal: %.2fx or less): %s", g.lsCA, goalLS, yes[g.lsCAOK]))
	}
	return out
}

// WriteMarkdown writes report.md: the choices, the world, the tables, the
// curve, the goal, and links to the plots.
func (r *Report) WriteMarkdown(w io.Writer, plots []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# gpubroker replay of %s\n\n", r.Trace.File)
	fmt.Fprintf(&b, "Trace: Alibaba openb GPU cluster trace (Weng et al., \"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent\", USENIX ATC 2023).\n\n")
	fmt.Fprintf(&b, "## How the trace was read\n\n")
	for _, c := range r.Trace.Choices {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	fmt.Fprintf(&b, "\n## World model (the same for every policy)\n\n")
	for _, rule := range r.World.Rules {
		fmt.Fprintf(&b, "%s\n", rule)
	}
	fmt.Fprintf(&b, "- policy: %s\n", policyLine(r))
	fmt.Fprintf(&b, "- %s\n", policyChangesLine(r.World.PolicyChanges))
	fmt.Fprintf(&b, "- %s\n", ruleOffNote)
	for _, lr := range r.Loads {
		fmt.Fprintf(&b, "\n## Load %gx\n\nPeak concurrent demand %d GPUs (p95 %d, mean %.0f) if every task started on arrival; pools' max %d GPUs.\n\n", lr.Load, lr.PeakDemandGPUs, lr.P95DemandGPUs, lr.MeanDemandGPUs, lr.CapacityGPUs)
		rows := lr.Policies
		if lr.RuleOff != nil {
			rows = append(slices.Clip(rows), *lr.RuleOff)
		}
		b.WriteString(mdTable(tableHeader("|"), len(rows), func(i int) string { return tableRow(rows[i], "|") }))
	}
	fmt.Fprintf(&b, "\n## Curve over loads\n\n")
	b.WriteString(mdTable(r.curveHeader("|"), len(r.Loads), func(i int) string { return r.curveRow(r.Loads[i], "|") }))
	r.writeShapesMarkdown(&b, "## What-if node shapes")
	fmt.Fprintf(&b, "\n## %s at the headline load %gx\n\n", map[bool]string{false: "Goal", true: "Fleet: gpubroker vs the static split"}[r.Fleet > 0], r.Headline)
	for _, g := range r.Goals() {
		fmt.Fprintf(&b, "- %s\n", g)
	}
	if len(plots) > 0 {
		fmt.Fprintf(&b, "\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", p, p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdTable(header string, rows int, row func(int) string) string {
	var b strings.Builder
	cols := strings.Split(header, "|")
	fmt.Fprintf(&b, "| %s |\n|", strings.Join(cols, " | "))
	for i := range cols {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for i := range rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(strings.Split(row(i), "|"), " | "))
	}
	return b.String()
}

// ratio prints a ratio of waits; tiny ones as "<0.01x".
func ratio(r float64) string {
	if r < 0.01 {
		return "<0.01x"
	}
	return fmt.Sprintf("%.2fx", r)
}

func f0(x float64) string { return fmt.Sprintf("%.0f", x) }
func f3(x float64) string { return fmt.Sprintf("%.3f", x) }
func itoa(i int) string   { return fmt.Sprintf("%d", i) }

// durS renders seconds as a duration for captions.
func durS(s float64) string { return (time.Duration(s) * time.Second).String() }

// fleetComparison compares gpubroker's hand-overs with the static split
// of the same fleet at one load: the fleet's GPU use, waits by class and
// side, hand-overs and the work lost. A fleet buys nothing, so the
// GPU-hours per GPU-hour of work goal does not apply.
func (lr LoadResult) fleetComparison(nodes int) []string {
	gb, okB := lr.find(PolicyBroker)
	st, okS := lr.find(PolicyStaticFleet)
	if !okB || !okS {
		return []string{"not assessed: a fleet replay compares gpubroker with static-fleet; replay both"}
	}
	pct := func(r Result) string { return fmt.Sprintf("%.1f%%", 100*r.AllocationRatio) }
	wait := func(k string) string {
		return fmt.Sprintf("%s p95 wait %s (static split %s)", k, durS(gb.WaitP95[k]), durS(st.WaitP95[k]))
	}
	return []string{
		fmt.Sprintf("a fleet of %d nodes (%d GPUs): nothing bought or terminated; GPU use of the fleet %s with gpubroker, %s with the static split", nodes, lr.CapacityGPUs, pct(gb), pct(st)),
		wait("LS") + "; " + wait("BE") + "; " + wait("yarn") + "; " + wait("k8s"),
		fmt.Sprintf("hand-overs %d; tasks never served %d (static split %d); work lost %.0f GPU-h (static split %.0f), work-losing kills outside a preemption %d",
			gb.Handovers, gb.Unserved, st.Unserved, gb.WorkLostGPUHours, st.WorkLostGPUHours, gb.KillsNotPreemption),
	}
}
