package replay

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// summaries is the report's Summary, or, after Run alone, the one seed's
// results in its shape.
func (r *Report) summaries() []Summary {
	if len(r.Summary) > 0 {
		return r.Summary
	}
	var out []Summary
	for _, lr := range r.Loads {
		for _, p := range lr.Policies {
			out = append(out, summarise(lr.Load, p.Name, p.Note, []Result{p}))
		}
	}
	return out
}

func summaryHeader(sep string) string {
	return strings.Join([]string{"policy", "GPU-h provisioned", "completed work GPU-h", "GPU-h per work GPU-h", "LS p95 wait s", "BE p95 wait s",
		"work not done GPU-h", "work-losing kills", "of them not preemptions", "their GPU-h lost", "LS/Guaranteed kills", "zero-loss migrations", "note"}, sep)
}

func summaryRow(s Summary, sep string) string {
	return strings.Join([]string{s.Policy, sp(s.GPUHours, "%.0f"), sp(s.WorkGPUHours, "%.0f"), sp(s.PerWork, "%.3f"), sp(s.LSP95, "%.0f"), sp(s.BEP95, "%.0f"),
		sp(s.NotDone, "%.0f"), sp(s.Kills, "%.0f"), sp(s.KillsNotPreemption, "%.0f"), sp(s.KillsNotPreemptionLost, "%.0f"), sp(s.LSKills, "%.0f"),
		sp(s.Migrations, "%.0f"), s.Note}, sep)
}

// fleetHeader and fleetRow are a fleet replay's table: what the same
// owned nodes give with and without hand-overs (nothing is bought, so the
// GPU-hours are the fleet's whatever the policy).
func fleetHeader(sep string) string {
	return strings.Join([]string{"policy", "GPU use", "LS p95 wait s", "BE p95 wait s", "YARN p95 wait s", "K8s p95 wait s",
		"hand-overs", "work not done GPU-h", "work lost GPU-h", "work-losing kills not preemptions", "note"}, sep)
}

func fleetRow(s Summary, sep string) string {
	pct := Spread{Mean: 100 * s.GPUUse.Mean, Min: 100 * s.GPUUse.Min, Max: 100 * s.GPUUse.Max}
	return strings.Join([]string{s.Policy, sp(pct, "%.1f%%"), sp(s.LSP95, "%.0f"), sp(s.BEP95, "%.0f"), sp(s.YARNP95, "%.0f"), sp(s.K8sP95, "%.0f"),
		sp(s.Handovers, "%.0f"), sp(s.NotDone, "%.0f"), sp(s.Lost, "%.0f"), sp(s.KillsNotPreemption, "%.0f"), s.Note}, sep)
}

// sp prints a figure over seeds: the mean, and the range when the seeds
// differ.
func sp(s Spread, f string) string {
	m := fmt.Sprintf(f, s.Mean)
	lo, hi := fmt.Sprintf(f, s.Min), fmt.Sprintf(f, s.Max)
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s [%s–%s]", m, lo, hi)
}

// tablesIntro says what the tables are, from the report itself.
func (r *Report) tablesIntro() string {
	seeds := max(1, r.Trace.Seeds)
	seedText := fmt.Sprintf("seed %d", r.Trace.Seed)
	if seeds > 1 {
		seedText = fmt.Sprintf("seeds %d to %d (each splits the tasks between the sides anew); mean [lowest–highest]", r.Trace.Seed, r.Trace.Seed+int64(seeds)-1)
	}
	place := r.World.Placement
	ck := "checkpoints unknown"
	if r.World.CheckpointInterval > 0 {
		ck = fmt.Sprintf("work checkpoints every %s", r.World.CheckpointInterval)
	}
	fleet := ""
	if r.Fleet > 0 {
		fleet = fmt.Sprintf("; a fleet of %d owned nodes (the node list's mix), split between the sides by their work at the start", r.Fleet)
	}
	return fmt.Sprintf("%s, %d GPU tasks, %.0f GPU-hours of work; %s; schedulers %s; %s; %s%s.",
		filepath.Base(r.Trace.File), r.Trace.Tasks, r.Trace.GPUHours, seedText, place, ck, policyChangesLine(r.World.PolicyChanges), fleet)
}

// WriteTables writes the comparison as Markdown, one table per load over
// the seeds replayed, with the goal at each load: what `make replay` puts
// in the README.
func (r *Report) WriteTables(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", r.tablesIntro())
	sums := r.summaries()
	for _, lr := range r.Loads {
		fmt.Fprintf(&b, "\n**Load %gx**: peak concurrent demand %d GPUs, p95 %d, mean %.0f (if every task started on arrival); pools' max %d GPUs.\n\n",
			lr.Load, lr.PeakDemandGPUs, lr.P95DemandGPUs, lr.MeanDemandGPUs, lr.CapacityGPUs)
		var rows []Summary
		for _, s := range sums {
			if s.Load == lr.Load {
				rows = append(rows, s)
			}
		}
		if r.Fleet > 0 {
			b.WriteString(mdTable(fleetHeader("|"), len(rows), func(i int) string { return fleetRow(rows[i], "|") }))
			continue
		}
		b.WriteString(mdTable(summaryHeader("|"), len(rows), func(i int) string { return summaryRow(rows[i], "|") }))
		b.WriteString("\n")
		for _, g := range seedGoals(rows) {
			fmt.Fprintf(&b, "- %s\n", g)
		}
	}
	// The same trace with other node shapes, when replayed (--what-if-shapes).
	r.writeShapesMarkdown(&b, "**What-if node shapes.**")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSummaryText is the seeds' summary for a terminal.
func (r *Report) writeSummaryText(b *strings.Builder) {
	fmt.Fprintf(b, "\nSEEDS %d to %d: mean [lowest-highest]\n", r.Trace.Seed, r.Trace.Seed+int64(r.Trace.Seeds)-1)
	sums := r.summaries()
	for _, lr := range r.Loads {
		fmt.Fprintf(b, "load %gx\n", lr.Load)
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', tabwriter.AlignRight)
		head, row := summaryHeader, summaryRow
		if r.Fleet > 0 {
			head, row = fleetHeader, fleetRow
		}
		fmt.Fprint(tw, head("\t")+"\t\n")
		for _, s := range sums {
			if s.Load == lr.Load {
				fmt.Fprint(tw, row(s, "\t")+"\t\n")
			}
		}
		tw.Flush()
	}
}

// seedGoals is the goal for gpubroker over the seeds of one load, on the
// means.
func seedGoals(rows []Summary) []string {
	var gb, ca *Summary
	for i := range rows {
		switch rows[i].Policy {
		case PolicyBroker:
			gb = &rows[i]
		case PolicyPerSide:
			ca = &rows[i]
		}
	}
	if gb == nil {
		return nil
	}
	yes := map[bool]string{true: "met", false: "NOT met"}
	out := []string{
		fmt.Sprintf("goal, GPU-hours per GPU-hour of completed work %.2f or less: gpubroker %.3f, %s", goalRatio, gb.PerWork.Mean, yes[gb.PerWork.Mean > 0 && gb.PerWork.Mean <= goalRatio]),
		fmt.Sprintf("goal, no work-losing kill outside a preemption: gpubroker %s (%s GPU-h lost), %s", sp(gb.KillsNotPreemption, "%.0f"), sp(gb.KillsNotPreemptionLost, "%.0f"), yes[gb.KillsNotPreemption.Max == 0]),
	}
	if ca != nil && ca.LSP95.Mean > 0 {
		r := gb.LSP95.Mean / ca.LSP95.Mean
		out = append(out, fmt.Sprintf("goal, LS p95 wait (re-queues included) %.2fx the per-side autoscaler's or less: %s, %s", goalLS, ratio(r), yes[r <= goalLS]))
	}
	return out
}
