package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// simsEnv, set to "<nodes>,<demands>", makes the test binary serve yarnsim
// and awssim instead of running tests (see TestMain): the benchmarks run
// the HTTP simulators in a child process, so the benchmark process's peak
// RSS and CPU time are the broker's (and the in-process k8ssim's), not the
// simulators'.
const simsEnv = "GPUBROKER_BENCH_SIMS"

// simsAddrs is the child's first line on stdout: where it serves.
type simsAddrs struct {
	YARN string `json:"yarn"`
	AWS  string `json:"aws"`
}

// procStats is what the child answers to a "stats" line: its CPU time
// (user and system) and its peak RSS.
type procStats struct {
	CPU time.Duration `json:"cpu_ns"`
	HWM int64         `json:"hwm_bytes"`
}

// serveSims builds the YARN and AWS halves of the world, serves them on
// loopback ports, prints their addresses and answers "stats" lines on
// stdin until stdin closes (the parent ended). It returns the exit code.
func serveSims(spec string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bench sims:", err)
		return 1
	}
	n, d, ok := strings.Cut(spec, ",")
	nodes, err1 := strconv.Atoi(n)
	demands, err2 := strconv.Atoi(d)
	if !ok || err1 != nil || err2 != nil {
		return fail(fmt.Errorf("%s=%q: want <nodes>,<demands>", simsEnv, spec))
	}
	ysim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		return fail(err)
	}
	// YARN: half the nodes and half the demand.
	for i := 0; i < nodes/2; i++ {
		if err := ysim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("yarn-%05d", i), GPUs: 8}); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < demands/2; i++ {
		q := "root.a"
		if i%2 == 1 {
			q = "root.b"
		}
		// Big asks that do not fit: they stay pending.
		if _, err := ysim.Submit(yarnsim.AppSpec{Name: fmt.Sprintf("app-%d", i), Queue: q, Priority: int64(i % 5),
			Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 16}}}); err != nil {
			return fail(err)
		}
	}
	yurl, err := ysim.Start("127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	// AWS: the pool's group, empty (16-GPU asks fit no 8-GPU node, so the
	// plan buys nothing and every tick measures observe-persist-plan).
	aws := awssim.New(awssim.Config{})
	endpoint, err := aws.Start("127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	if err := aws.CreateGroup(awssim.GroupSpec{Name: "gpu", Min: 0, Max: 2 * nodes}); err != nil {
		return fail(err)
	}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(simsAddrs{YARN: yurl, AWS: endpoint}); err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "stats" {
			continue
		}
		var st procStats
		var err error
		if st.CPU, err = selfCPU(); err == nil {
			st.HWM, err = selfHWM()
		}
		if err != nil {
			return fail(err)
		}
		if err := out.Encode(st); err != nil {
			return fail(err)
		}
	}
	return 0 // stdin closed: the parent is done
}

// sims is the child process serving yarnsim and awssim.
type sims struct {
	simsAddrs
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder
}

// startSims starts the child for a world of nodes × demands and waits
// until it serves; the child ends when the test does.
func startSims(tb testing.TB, nodes, demands int) *sims {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", simsEnv, nodes, demands))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &sims{cmd: cmd, in: in, out: json.NewDecoder(outR)}
	tb.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("bench sims: %v", err)
		}
	})
	if err := s.out.Decode(&s.simsAddrs); err != nil {
		tb.Fatalf("bench sims: read addresses: %v", err)
	}
	return s
}

// stats asks the child for its CPU time and peak RSS.
func (s *sims) stats(tb testing.TB) procStats {
	tb.Helper()
	if _, err := io.WriteString(s.in, "stats\n"); err != nil {
		tb.Fatalf("bench sims: ask stats: %v", err)
	}
	var st procStats
	if err := s.out.Decode(&st); err != nil {
		tb.Fatalf("bench sims: read stats: %v", err)
	}
	return st
}

// selfCPU is the CPU time (user and system) this process has used. Unlike
// wall time it does not grow when other processes load the machine.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// selfHWM is this process's peak resident set size in bytes (Linux
// /proc/self/status VmHWM).
func selfHWM() (int64, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
