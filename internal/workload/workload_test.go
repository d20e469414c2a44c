package workload

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// tracePath finds the openb trace: GPUBROKER_OPENB, or ../shared beside the
// repository (where CI and developers have it).
func tracePath(t *testing.T) string {
	if p := os.Getenv("GPUBROKER_OPENB"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../../shared/data/openb/openb_pod_list_default.csv")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the openb trace is needed to check the fit: %v; set GPUBROKER_OPENB to openb_pod_list_default.csv", err)
	}
	return p
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tol)
	}
}

// TestProfileIsFittedToTheTrace refits the trace and checks that OpenB()
// holds the fitted values, so the demo's constants are the trace's.
func TestProfileIsFittedToTheTrace(t *testing.T) {
	f, err := os.Open(tracePath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, err := ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 7064 {
		t.Fatalf("GPU tasks in the trace: %d, want 7064", len(tasks))
	}
	fit, err := Fit(tasks)
	if err != nil {
		t.Fatal(err)
	}
	want := OpenB()
	within(t, "inter-arrival mu", fit.InterArrivalMu, want.InterArrivalMu, 0.001)
	within(t, "inter-arrival sigma", fit.InterArrivalSigma, want.InterArrivalSigma, 0.001)
	within(t, "simultaneous", fit.SimultaneousFrac, want.SimultaneousFrac, 0.001)
	within(t, "duration mu", fit.DurationMu, want.DurationMu, 0.001)
	within(t, "duration sigma", fit.DurationSigma, want.DurationSigma, 0.001)
	if len(fit.GPUs) != len(want.GPUs) || len(fit.QoS) != len(want.QoS) {
		t.Fatalf("mixes: %v %v, want %v %v", fit.GPUs, fit.QoS, want.GPUs, want.QoS)
	}
	for i := range fit.GPUs {
		if fit.GPUs[i] != want.GPUs[i] {
			t.Errorf("GPU mix %v, want %v", fit.GPUs[i], want.GPUs[i])
		}
	}
	for i := range fit.QoS {
		if fit.QoS[i] != want.QoS[i] {
			t.Errorf("QoS mix %v, want %v", fit.QoS[i], want.QoS[i])
		}
	}
	// The hash split is about even on the trace's names.
	yarn := 0
	for _, task := range tasks {
		if task.Side == broker.SourceYARN {
			yarn++
		}
	}
	within(t, "YARN share", float64(yarn)/float64(len(tasks)), 0.5, 0.03)
}

// TestGeneratorReproducesItsProfile draws tasks and refits them.
func TestGeneratorReproducesItsProfile(t *testing.T) {
	p := OpenBMultiGPU50()
	g, err := NewGenerator(p, 42, 1)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]Task, 50000)
	for i := range tasks {
		tasks[i] = g.Next()
		if i > 0 && tasks[i].Arrival < tasks[i-1].Arrival {
			t.Fatal("arrivals must not go back in time")
		}
	}
	fit, err := Fit(tasks)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "inter-arrival mu", fit.InterArrivalMu, p.InterArrivalMu, 0.05)
	within(t, "inter-arrival sigma", fit.InterArrivalSigma, p.InterArrivalSigma, 0.05)
	within(t, "duration mu", fit.DurationMu, p.DurationMu, 0.05)
	within(t, "duration sigma", fit.DurationSigma, p.DurationSigma, 0.05)
	within(t, "simultaneous", fit.SimultaneousFrac, p.SimultaneousFrac, 0.005)
	var total float64
	for _, w := range p.GPUs {
		total += w.Weight
	}
	for _, w := range fit.GPUs {
		var want float64
		for _, pw := range p.GPUs {
			if pw.Value == w.Value {
				want = pw.Weight / total
			}
		}
		within(t, fmt.Sprintf("share of %d-GPU tasks", w.Value), w.Weight/50000, want, 0.01)
	}
	// Same seed, same tasks.
	g2, _ := NewGenerator(p, 42, 1)
	for i := 0; i < 100; i++ {
		if g2.Next() != tasks[i] {
			t.Fatalf("task %d differs for the same seed", i)
		}
	}
}

func TestGeneratorSpeedAndErrors(t *testing.T) {
	slow, _ := NewGenerator(OpenB(), 1, 1)
	fast, _ := NewGenerator(OpenB(), 1, 60)
	var a, b Task
	for i := 0; i < 1000; i++ {
		a, b = slow.Next(), fast.Next()
	}
	ratio := float64(a.Arrival) / float64(b.Arrival)
	within(t, "time compression", ratio, 60, 0.5)
	if b.Duration < time.Millisecond {
		t.Fatal("durations must stay positive")
	}
	if _, err := NewGenerator(OpenB(), 1, 0); err == nil {
		t.Fatal("speed 0 must be refused")
	}
	if _, err := ReadTrace(strings.NewReader("name,cpu\nx,1\n")); err == nil || !strings.Contains(err.Error(), "num_gpu") {
		t.Fatalf("a trace without num_gpu: %v", err)
	}
}
