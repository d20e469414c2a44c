package replay

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gpubroker/gpubroker/broker"
)

// What-if node shapes: the same trace replayed with every pool of nodes
// larger than a shape also offered as nodes of that shape (same GPU
// model, as many GPUs at most), so an operator sees what smaller nodes
// would save in GPU-hours and cost in waits (each small node is another
// boot) before changing an autoscaling group's instance type.

// withShape returns pools plus, for every pool whose nodes have more than
// shape GPUs, a pool of shape-GPU nodes of the same model and sides whose
// max holds as many GPUs; work of up to shape GPUs may take either (the
// expander chooses), larger work only the listed nodes. shape <= 0 leaves
// pools as they are.
func withShape(pools []broker.Pool, shape int) []broker.Pool {
	if shape <= 0 {
		return pools
	}
	out := slices.Clip(pools) // appends copy: the caller's slice is left as it is
	for _, p := range pools {
		if p.GPUsPerNode <= shape {
			continue
		}
		s := p
		s.Name = sanitize(fmt.Sprintf("%s-as-%dgpu", p.Name, shape))
		s.Group = s.Name
		s.GPUsPerNode = shape
		s.MinNodes = 0
		s.MaxNodes = p.MaxNodes * p.GPUsPerNode / shape
		out = append(out, s)
	}
	return out
}

// ShapeSummary is gpubroker at one load over the seeds with one what-if
// shape (0: the pools as listed).
type ShapeSummary struct {
	Shape int `json:"shape_gpus"`
	Summary
}

// shapePolicies are the policies a what-if shape is replayed under: those
// that buy nodes (the static splits are sized from demand, whatever the
// shapes).
var shapePolicies = []string{PolicyBroker, PolicyPerSide, PolicySafeSide}

// RunShapes replays, once per shape (Config.Shape), gpubroker and those of
// the autoscalers c.Policies names over c's loads and seeds, and returns
// their summaries, shape by shape, so each is compared with the same
// shapes.
func RunShapes(c Config, seeds int, shapes []int) ([]ShapeSummary, error) {
	policies := []string{PolicyBroker}
	for _, p := range shapePolicies[1:] {
		if slices.Contains(c.Policies, p) {
			policies = append(policies, p)
		}
	}
	var out []ShapeSummary
	for _, n := range shapes {
		if n < 1 {
			return nil, broker.Invalid("what-if-shapes", "a node shape is a number of GPUs of at least 1, got %d", n)
		}
		cs := c
		cs.Shape, cs.Policies, cs.RuleOff = n, policies, false
		rep, err := RunSeeds(cs, seeds)
		if err != nil {
			return nil, err
		}
		for _, s := range rep.Summary {
			out = append(out, ShapeSummary{Shape: n, Summary: s})
		}
	}
	return out, nil
}

// shapeRows are the report's shape rows, load by load and policy by
// policy: the listed shapes first, then each what-if shape.
func (r *Report) shapeRows() []ShapeSummary {
	if len(r.Shapes) == 0 {
		return nil
	}
	var out []ShapeSummary
	for _, lr := range r.Loads {
		for _, p := range shapePolicies {
			for _, s := range r.summaries() {
				if s.Load == lr.Load && s.Policy == p {
					out = append(out, ShapeSummary{Summary: s})
				}
			}
			for _, s := range r.Shapes {
				if s.Load == lr.Load && s.Policy == p {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func shapeHeader(sep string) string {
	return strings.Join([]string{"load", "policy", "nodes", "GPU-h provisioned", "GPU-h per work GPU-h", "LS p95 wait s", "BE p95 wait s",
		"work not done GPU-h", "zero-loss migrations", "work-losing kills", "of them not preemptions", "of those migrations inside the window"}, sep)
}

func shapeRow(s ShapeSummary, sep string) string {
	nodes := "as listed"
	if s.Shape > 0 {
		nodes = fmt.Sprintf("also %d-GPU", s.Shape)
	}
	return strings.Join([]string{fmt.Sprintf("%gx", s.Load), s.Policy, nodes, sp(s.GPUHours, "%.0f"), sp(s.PerWork, "%.3f"), sp(s.LSP95, "%.0f"),
		sp(s.BEP95, "%.0f"), sp(s.NotDone, "%.0f"), sp(s.Migrations, "%.0f"), sp(s.Kills, "%.0f"), sp(s.KillsNotPreemption, "%.0f"), sp(s.MigrationKills, "%.0f")}, sep)
}

// shapesNote says what the shape rows are.
const shapesNote = "every pool of larger nodes also offered as nodes of the shape (same GPU model, as many GPUs at most), to gpubroker and to the autoscalers replayed: work that fits may take the smaller nodes, larger work the listed ones"

func (r *Report) writeShapesText(w io.Writer) {
	rows := r.shapeRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWHAT-IF NODE SHAPES: %s\n", shapesNote)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, shapeHeader("\t")+"\t\n")
	for _, s := range rows {
		fmt.Fprint(tw, shapeRow(s, "\t")+"\t\n")
	}
	tw.Flush()
}

// writeShapesMarkdown writes the shapes' table under heading (a Markdown
// heading line, or a bold line inside another document's section).
func (r *Report) writeShapesMarkdown(b *strings.Builder, heading string) {
	rows := r.shapeRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n\n%s.\n\n", heading, shapesNote)
	b.WriteString(mdTable(shapeHeader("|"), len(rows), func(i int) string { return shapeRow(rows[i], "|") }))
}
