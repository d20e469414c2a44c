package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// QoS is the trace's quality-of-service class.
type QoS string

// The trace's QoS classes.
const (
	QoSGuaranteed QoS = "Guaranteed"
	QoSLS         QoS = "LS" // latency-sensitive
	QoSBurstable  QoS = "Burstable"
	QoSBE         QoS = "BE" // best-effort
)

// Priority maps a QoS class onto the unified priority scale, and says
// whether work of that class may be preempted.
func (q QoS) Priority() (priority int64, preemptible bool) {
	switch q {
	case QoSGuaranteed:
		return 1000000, false
	case QoSLS:
		return 10000, false
	case QoSBurstable:
		return 1000, true
	default:
		return 0, true
	}
}

// Weighted is one outcome of a categorical distribution.
type Weighted[T any] struct {
	Value  T
	Weight float64
}

// Profile is a fitted workload distribution.
type Profile struct {
	// InterArrivalMu and InterArrivalSigma are the log-normal parameters of
	// the positive gaps between arrivals, in log-seconds.
	InterArrivalMu, InterArrivalSigma float64
	// SimultaneousFrac is the share of arrivals at the same second as the
	// previous one.
	SimultaneousFrac float64
	// GPUs is the mix of GPUs per task.
	GPUs []Weighted[int]
	// DurationMu and DurationSigma are the log-normal parameters of run
	// times, in log-seconds.
	DurationMu, DurationSigma float64
	// QoS is the mix of QoS classes.
	QoS []Weighted[QoS]
}

// OpenB returns the profile fitted to openb_pod_list_default.csv (GPU
// tasks only): 7,064 tasks over 149 days.
func OpenB() Profile {
	return Profile{
		InterArrivalMu: 5.0248, InterArrivalSigma: 1.7895, SimultaneousFrac: 0.0166,
		GPUs:       []Weighted[int]{{1, 6989}, {2, 16}, {4, 15}, {8, 44}},
		DurationMu: 6.5660, DurationSigma: 1.9104,
		QoS: []Weighted[QoS]{{QoSLS, 4011}, {QoSBE, 2948}, {QoSBurstable, 99}, {QoSGuaranteed, 6}},
	}
}

// OpenBMultiGPU50 is OpenB with the GPU mix of openb_pod_list_multigpu50.csv,
// where about half of the GPU time goes to multi-GPU tasks: a livelier demo.
func OpenBMultiGPU50() Profile {
	p := OpenB()
	p.GPUs = []Weighted[int]{{1, 6989}, {2, 222}, {4, 206}, {8, 556}}
	return p
}

// Task is one unit of generated or replayed work.
type Task struct {
	Name string
	// Arrival is the time since the start of the workload.
	Arrival     time.Duration
	GPUs        int
	Duration    time.Duration
	QoS         QoS
	Priority    int64
	Preemptible bool
	Side        broker.Source
}

// Generator draws tasks from a profile. It is deterministic for a seed.
type Generator struct {
	p     Profile
	rng   *rand.Rand
	speed float64
	now   time.Duration
	n     int
}

// NewGenerator returns a generator; speed compresses time (60 makes one
// trace minute pass in one second) for arrivals and run times alike.
func NewGenerator(p Profile, seed uint64, speed float64) (*Generator, error) {
	if !(speed > 0) {
		return nil, broker.Invalid("speed", "must be positive, got %g", speed)
	}
	if len(p.GPUs) == 0 || len(p.QoS) == 0 {
		return nil, broker.Invalid("profile", "needs a GPU mix and a QoS mix")
	}
	return &Generator{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), speed: speed}, nil
}

// Next returns the next task, arriving after the previous one.
func (g *Generator) Next() Task {
	if g.n > 0 && g.rng.Float64() >= g.p.SimultaneousFrac {
		gap := math.Exp(g.p.InterArrivalMu + g.p.InterArrivalSigma*g.rng.NormFloat64())
		g.now += time.Duration(gap / g.speed * float64(time.Second))
	}
	g.n++
	dur := math.Exp(g.p.DurationMu + g.p.DurationSigma*g.rng.NormFloat64())
	name := fmt.Sprintf("task-%06d", g.n)
	q := pick(g.rng, g.p.QoS)
	prio, pre := q.Priority()
	return Task{
		Name: name, Arrival: g.now, GPUs: pick(g.rng, g.p.GPUs),
		Duration: max(time.Duration(dur/g.speed*float64(time.Second)), time.Millisecond),
		QoS:      q, Priority: prio, Preemptible: pre, Side: SideOf(name),
	}
}

func pick[T any](rng *rand.Rand, ws []Weighted[T]) T {
	var total float64
	for _, w := range ws {
		total += w.Weight
	}
	x := rng.Float64() * total
	for _, w := range ws {
		if x < w.Weight {
			return w.Value
		}
		x -= w.Weight
	}
	return ws[len(ws)-1].Value
}

// SideOf assigns a task to YARN or Kubernetes by an FNV-1a hash of its name.
func SideOf(name string) broker.Source {
	h := fnv.New32a()
	h.Write([]byte(name))
	if h.Sum32()%2 == 0 {
		return broker.SourceYARN
	}
	return broker.SourceK8s
}

// ReadTrace parses an openb pod list (openb_pod_list_default.csv) and
// returns its GPU tasks, by arrival. Tasks without a run time (never
// scheduled or never deleted) get Duration 0.
func ReadTrace(r io.Reader) ([]Task, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read trace header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, need := range []string{"name", "num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("trace has no %q column (has %v)", need, header)
		}
	}
	var tasks []Task
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		gpus, err := strconv.Atoi(rec[col["num_gpu"]])
		if err != nil {
			return nil, fmt.Errorf("trace line %d: num_gpu %q: %w", line, rec[col["num_gpu"]], err)
		}
		if gpus == 0 {
			continue
		}
		created, err := strconv.ParseInt(rec[col["creation_time"]], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: creation_time: %w", line, err)
		}
		t := Task{Name: rec[col["name"]], Arrival: time.Duration(created) * time.Second, GPUs: gpus, QoS: QoS(rec[col["qos"]])}
		sched, e1 := strconv.ParseInt(rec[col["scheduled_time"]], 10, 64)
		del, e2 := strconv.ParseInt(rec[col["deletion_time"]], 10, 64)
		if e1 == nil && e2 == nil && del > sched {
			t.Duration = time.Duration(del-sched) * time.Second
		}
		t.Priority, t.Preemptible = t.QoS.Priority()
		t.Side = SideOf(t.Name)
		tasks = append(tasks, t)
	}
	sort.SliceStable(tasks, func(i, j int) bool { return tasks[i].Arrival < tasks[j].Arrival })
	return tasks, nil
}

// Fit estimates a profile from trace tasks (maximum likelihood for the
// log-normals, frequencies for the mixes).
func Fit(tasks []Task) (Profile, error) {
	if len(tasks) < 2 {
		return Profile{}, errors.New("fit needs at least two tasks")
	}
	var p Profile
	var gaps, durs []float64
	zero := 0
	for i := 1; i < len(tasks); i++ {
		gap := (tasks[i].Arrival - tasks[i-1].Arrival).Seconds()
		if gap <= 0 {
			zero++
			continue
		}
		gaps = append(gaps, math.Log(gap))
	}
	p.SimultaneousFrac = float64(zero) / float64(len(tasks)-1)
	gpus := map[int]float64{}
	qos := map[QoS]float64{}
	for _, t := range tasks {
		gpus[t.GPUs]++
		qos[t.QoS]++
		if t.Duration > 0 {
			durs = append(durs, math.Log(t.Duration.Seconds()))
		}
	}
	p.InterArrivalMu, p.InterArrivalSigma = meanStd(gaps)
	p.DurationMu, p.DurationSigma = meanStd(durs)
	for _, k := range sortedKeys(gpus) {
		p.GPUs = append(p.GPUs, Weighted[int]{k, gpus[k]})
	}
	for _, q := range []QoS{QoSLS, QoSBE, QoSBurstable, QoSGuaranteed} {
		if qos[q] > 0 {
			p.QoS = append(p.QoS, Weighted[QoS]{q, qos[q]})
		}
	}
	return p, nil
}

func meanStd(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)))
}

func sortedKeys(m map[int]float64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
