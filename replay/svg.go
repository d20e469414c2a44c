package replay

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The plots are SVG written by hand: a frame, ticks, one polyline per
// series and a legend. No dependency, and the files diff as text.

const (
	plotW, plotH         = 900, 420
	padL, padR, padT, pB = 70, 170, 40, 50
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#555555"}

type series struct {
	name   string
	color  string
	dashed bool
	xs, ys []float64
}

type axes struct {
	title, xlabel, ylabel string
	x0, x1, y0, y1        float64
	logX                  bool
	xticks                []float64
	xtickLabel            func(float64) string
}

func (a axes) px(x float64) float64 {
	w := float64(plotW - padL - padR)
	if a.logX {
		return float64(padL) + w*(math.Log10(x)-math.Log10(a.x0))/(math.Log10(a.x1)-math.Log10(a.x0))
	}
	return float64(padL) + w*(x-a.x0)/(a.x1-a.x0)
}

func (a axes) py(y float64) float64 {
	h := float64(plotH - padT - pB)
	return float64(padT) + h*(1-(y-a.y0)/(a.y1-a.y0))
}

func writePlot(w io.Writer, a axes, ss []series) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", padL, esc(a.title))
	x0, x1, y0, y1 := a.px(a.x0), a.px(a.x1), a.py(a.y0), a.py(a.y1)
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", x0, y1, x1-x0, y0-y1)
	for _, t := range a.xticks {
		x := a.px(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, y1, x, y0)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+16, esc(a.xtickLabel(t)))
	}
	for _, t := range niceTicks(a.y0, a.y1, 6) {
		y := a.py(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, trimFloat(t))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, plotH-10, esc(a.xlabel))
	fmt.Fprintf(&b, `<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", (y0+y1)/2, (y0+y1)/2, esc(a.ylabel))
	for i, s := range ss {
		var pts strings.Builder
		for j := range s.xs {
			x, y := s.xs[j], s.ys[j]
			if a.logX && x < a.x0 {
				x = a.x0
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", a.px(min(max(x, a.x0), a.x1)), a.py(min(max(y, a.y0), a.y1)))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5,4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", s.color, dash, strings.TrimSpace(pts.String()))
		ly := float64(padT) + 18*float64(i) + 10
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", x1+12, ly, x1+36, ly, s.color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x1+42, ly+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2g", x)
}

// niceTicks returns about n round ticks from lo to hi.
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step/1e6; t += step {
		out = append(out, t)
	}
	return out
}

// WriteCapacityPlot draws, at load lr, the GPUs each policy provisioned and
// the GPUs demanded (running plus pending, under gpubroker) over the busy
// part of the replay: until the last arrival plus a tenth.
func WriteCapacityPlot(w io.Writer, lr LoadResult, tasks []Task) error {
	var lastArr time.Duration
	for _, t := range tasks {
		lastArr = max(lastArr, time.Duration(float64(t.Arrival)/lr.Load))
	}
	end := lastArr + lastArr/10
	if end <= 0 {
		end = time.Hour
	}
	hours := end.Hours()
	const bins = 600
	binned := func(sm []sample, val func(sample) int) ([]float64, []float64) {
		xs := make([]float64, bins)
		ys := make([]float64, bins)
		j := 0
		cur := 0
		for i := range bins {
			lo := time.Duration(float64(end) * float64(i) / bins)
			hi := time.Duration(float64(end) * float64(i+1) / bins)
			mx := cur
			for j < len(sm) && sm[j].at < hi {
				cur = val(sm[j])
				mx = max(mx, cur)
				j++
			}
			_ = lo
			xs[i] = float64(i+1) / bins * hours
			ys[i] = float64(mx)
		}
		return xs, ys
	}
	var ss []series
	ymax := 1.0
	for i, p := range lr.Policies {
		xs, ys := binned(p.series, func(s sample) int { return s.prov })
		ss = append(ss, series{name: p.Name + " provisioned", color: colors[i%len(colors)], xs: xs, ys: ys})
		ymax = max(ymax, slices.Max(ys))
	}
	if gb, ok := lr.find(PolicyBroker); ok {
		xs, ys := binned(gb.series, func(s sample) int { return s.demand })
		ss = append(ss, series{name: "demand (gpubroker run)", color: "#000000", dashed: true, xs: xs, ys: ys})
		ymax = max(ymax, slices.Max(ys))
	}
	a := axes{
		title:  fmt.Sprintf("GPUs provisioned and demanded over time, load %gx (max per %.1f-minute bin)", lr.Load, hours*60/bins),
		xlabel: "hours since the first arrival", ylabel: "GPUs",
		x0: 0, x1: hours, y0: 0, y1: ymax * 1.05,
		xticks: niceTicks(0, hours, 8), xtickLabel: trimFloat,
	}
	return writePlot(w, a, ss)
}

// WriteWaitCDF draws the cumulative distribution of waits of one QoS class
// under each policy, on a log time axis (waits under a second at 1 s).
func WriteWaitCDF(w io.Writer, lr LoadResult, class string) error {
	var ss []series
	xmax := 10.0
	for i, p := range lr.Policies {
		ws := p.waits[class]
		if len(ws) == 0 {
			continue
		}
		var xs, ys []float64
		for j, x := range ws {
			if j+1 < len(ws) && ws[j+1] == x {
				continue
			}
			xs = append(xs, max(x, 1))
			ys = append(ys, float64(j+1)/float64(len(ws)))
		}
		xmax = max(xmax, slices.Max(xs))
		ss = append(ss, series{name: p.Name, color: colors[i%len(colors)], xs: append([]float64{1}, xs...), ys: append([]float64{0}, ys...)})
	}
	xmax = math.Pow(10, math.Ceil(math.Log10(xmax)))
	var ticks []float64
	for t := 1.0; t <= xmax; t *= 10 {
		ticks = append(ticks, t)
	}
	a := axes{
		title:  fmt.Sprintf("Wait from arrival to first placement, %s tasks, load %gx", class, lr.Load),
		xlabel: "wait (log scale; under 1 s shown at 1 s)", ylabel: "fraction of tasks",
		x0: 1, x1: xmax, y0: 0, y1: 1, logX: true, xticks: ticks, xtickLabel: func(t float64) string { return durS(t) },
	}
	return writePlot(w, a, ss)
}
