package replay

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/workload"
)

// TraceError is bad input in a trace or node list: it names the line (1 is
// the header) and the column, so an operator converting their own job log
// can find the cell.
type TraceError struct {
	File    string
	Line    int
	Column  string
	Problem string
}

func (e *TraceError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s line %d: %s", e.File, e.Line, e.Problem)
	}
	return fmt.Sprintf("%s line %d column %q: %s", e.File, e.Line, e.Column, e.Problem)
}

// QoS is the trace's quality-of-service class: internal/workload's, whose
// Priority maps it onto the unified priority scale (Guaranteed and LS
// high and never preempted, Burstable and BE low and preemptible), one
// mapping for the replay, the demo and the chaos soak.
type QoS = workload.QoS

// The trace's QoS classes, highest priority first.
const (
	QoSGuaranteed = workload.QoSGuaranteed
	QoSLS         = workload.QoSLS // latency-sensitive
	QoSBurstable  = workload.QoSBurstable
	QoSBE         = workload.QoSBE // best-effort
)

// QoSClasses lists the classes in report order.
var QoSClasses = []QoS{QoSLS, QoSBE, QoSBurstable, QoSGuaranteed}

// Task is one GPU task of the trace, ready to replay.
type Task struct {
	// Name is the trace's pod name; it decides the side.
	Name string
	// Arrival is the creation time since the trace's start, before --load.
	Arrival time.Duration
	// Run is how long the task runs once placed: deletion - scheduled.
	Run time.Duration
	// GPUs is num_gpu, or 1 for a fractional share of one GPU.
	GPUs int
	// Models are the allowed GPU models (gpu_spec); empty means any.
	Models []string
	QoS    QoS
	// Censored is set for a task still running at the trace's end: its run
	// time is a lower bound.
	Censored bool
}

// TraceStats counts what reading the trace decided, for the report's head.
type TraceStats struct {
	File       string `json:"file"`
	Rows       int    `json:"rows"`
	CPUOnly    int    `json:"skipped_cpu_only"`
	NeverRan   int    `json:"skipped_never_scheduled"`
	Censored   int    `json:"still_running_at_end"`
	Fractional int    `json:"fractional_rounded_up"`
	Tasks      int    `json:"gpu_tasks"`
	// ByQoS counts the replayed tasks per class.
	ByQoS map[string]int `json:"by_qos"`
	// Span is the time from the first to the last arrival, before --load.
	SpanS float64 `json:"arrival_span_s"`
	// GPUHours is the work of all replayed tasks (GPUs x run time).
	GPUHours float64 `json:"work_gpu_hours"`
	// Derived says how the trace was derived from others (DeriveSizes),
	// when it was.
	Derived string `json:"derived,omitempty"`
}

// ReadTrace parses an openb pod list (see doc.go for the columns). Tasks
// without a GPU are skipped, as are tasks the trace never scheduled (no
// run time to replay); a task whose deletion time is the trace's last one
// was still running at the end and keeps its run time as a lower bound.
func ReadTrace(name string, r io.Reader) ([]Task, TraceStats, error) {
	st := TraceStats{File: name, ByQoS: map[string]int{}}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, st, &TraceError{File: name, Line: 1, Problem: "cannot read the header: " + err.Error()}
	}
	header = slices.Clone(header) // the reader reuses its record
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time"} {
		if _, ok := col[need]; !ok {
			return nil, st, &TraceError{File: name, Line: 1, Column: need, Problem: fmt.Sprintf("missing column (the header has %s)", strings.Join(header, ","))}
		}
	}
	spec, hasSpec := col["gpu_spec"]
	type row struct {
		t       Task
		deleted int64
	}
	var rows []row
	var last int64
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				return nil, st, &TraceError{File: name, Line: pe.Line, Problem: fmt.Sprintf("has %d fields, the header has %d", len(rec), len(header))}
			}
			if errors.As(err, &pe) {
				// A quoting error has a position in the line, not a field.
				return nil, st, &TraceError{File: name, Line: pe.Line, Problem: fmt.Sprintf("%s at character %d", pe.Err, pe.Column)}
			}
			return nil, st, &TraceError{File: name, Line: line, Problem: err.Error()}
		}
		st.Rows++
		bad := func(c, problem string) error {
			return &TraceError{File: name, Line: line, Column: c, Problem: problem}
		}
		integer := func(c string, allowEmpty bool) (int64, bool, error) {
			s := strings.TrimSpace(rec[col[c]])
			if s == "" {
				if allowEmpty {
					return 0, false, nil
				}
				return 0, false, bad(c, "is empty, want a whole number")
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return 0, false, bad(c, fmt.Sprintf("%q is not a non-negative whole number", s))
			}
			return v, true, nil
		}
		gpus, _, err := integer("num_gpu", false)
		if err != nil {
			return nil, st, err
		}
		milli, _, err := integer("gpu_milli", true)
		if err != nil {
			return nil, st, err
		}
		created, _, err := integer("creation_time", false)
		if err != nil {
			return nil, st, err
		}
		sched, hasSched, err := integer("scheduled_time", true)
		if err != nil {
			return nil, st, err
		}
		deleted, hasDel, err := integer("deletion_time", true)
		if err != nil {
			return nil, st, err
		}
		q := QoS(strings.TrimSpace(rec[col["qos"]]))
		switch q {
		case QoSLS, QoSBE, QoSBurstable, QoSGuaranteed:
		default:
			return nil, st, bad("qos", fmt.Sprintf("%q is not one of LS, BE, Burstable, Guaranteed", q))
		}
		if gpus == 0 {
			st.CPUOnly++
			continue
		}
		if !hasSched || !hasDel || deleted < sched {
			st.NeverRan++
			continue
		}
		if gpus == 1 && milli > 0 && milli < 1000 {
			st.Fractional++
		}
		if hasSched && sched < created {
			return nil, st, bad("scheduled_time", fmt.Sprintf("%d is before creation_time %d", sched, created))
		}
		t := Task{
			Name: rec[col["name"]], Arrival: time.Duration(created) * time.Second,
			Run: time.Duration(deleted-sched) * time.Second, GPUs: int(gpus), QoS: q,
		}
		if t.Name == "" {
			return nil, st, bad("name", "is empty")
		}
		if t.Run < time.Second {
			t.Run = time.Second // a task that ran is at least one second of work
		}
		if hasSpec {
			for _, m := range strings.Split(rec[spec], "|") {
				if m = strings.TrimSpace(m); m != "" {
					t.Models = append(t.Models, m)
				}
			}
		}
		last = max(last, deleted)
		rows = append(rows, row{t: t, deleted: deleted})
	}
	tasks := make([]Task, 0, len(rows))
	for _, r := range rows {
		r.t.Censored = r.deleted == last
		if r.t.Censored {
			st.Censored++
		}
		st.ByQoS[string(r.t.QoS)]++
		st.GPUHours += float64(r.t.GPUs) * r.t.Run.Hours()
		tasks = append(tasks, r.t)
	}
	slices.SortStableFunc(tasks, func(a, b Task) int { return cmp.Compare(a.Arrival, b.Arrival) })
	st.Tasks = len(tasks)
	if len(tasks) > 0 {
		st.SpanS = (tasks[len(tasks)-1].Arrival - tasks[0].Arrival).Seconds()
	}
	return tasks, st, nil
}

// NodeType is one kind of machine of the node list: a GPU model and a node
// size, with how many the list has.
type NodeType struct {
	Model string
	GPUs  int
	Count int
}

// ReadNodes parses an openb node list (sn, cpu_milli, memory_mib, gpu,
// model) into node types, ordered by model then size. Nodes without GPUs
// are skipped.
func ReadNodes(name string, r io.Reader) ([]NodeType, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, &TraceError{File: name, Line: 1, Problem: "cannot read the header: " + err.Error()}
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"gpu", "model"} {
		if _, ok := col[need]; !ok {
			return nil, &TraceError{File: name, Line: 1, Column: need, Problem: fmt.Sprintf("missing column (the header has %s)", strings.Join(header, ","))}
		}
	}
	count := map[NodeType]int{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &TraceError{File: name, Line: line, Problem: err.Error()}
		}
		s := strings.TrimSpace(rec[col["gpu"]])
		g, err := strconv.Atoi(s)
		if err != nil || g < 0 {
			return nil, &TraceError{File: name, Line: line, Column: "gpu", Problem: fmt.Sprintf("%q is not a non-negative whole number", s)}
		}
		if g == 0 {
			continue
		}
		m := strings.TrimSpace(rec[col["model"]])
		if m == "" {
			return nil, &TraceError{File: name, Line: line, Column: "model", Problem: "is empty"}
		}
		count[NodeType{Model: m, GPUs: g}]++
	}
	var out []NodeType
	for k, n := range count {
		k.Count = n
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b NodeType) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return a.GPUs - b.GPUs
	})
	return out, nil
}

// sideOf assigns a task to YARN or Kubernetes by an FNV-1a hash of the seed
// and the task's name: deterministic, and about yarnShare of the tasks go to
// YARN.
func sideOf(name string, seed int64, yarnShare float64) broker.Source {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(uint64(seed) >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(name))
	if float64(h.Sum64()%1000000) < yarnShare*1000000 {
		return broker.SourceYARN
	}
	return broker.SourceK8s
}
