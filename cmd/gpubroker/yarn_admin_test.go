package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func TestYARNDecommissionAndRecommission(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	exclude := filepath.Join(t.TempDir(), "exclude.xml")
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: exclude, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := admin.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.RunOn("a", "gpu-1", 1, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--rm", srv.URL, "--admin", addr, "--exclude", exclude, "--poll", "20ms"}

	code, out, errOut := runCLI(t, nil, append([]string{"yarn", "decommission", "gpu-1", "--timeout", "10m"}, conn...)...)
	if code != 0 {
		t.Fatalf("decommission: exit %d: %s%s", code, out, errOut)
	}
	if !strings.Contains(out, "gpu-1: DECOMMISSIONING, running: 1 containers") || !strings.HasSuffix(out, "gpu-1: DECOMMISSIONED\n") || strings.Contains(out, "cut off") {
		t.Fatalf("decommission output:\n%s", out)
	}
	if b, _ := os.ReadFile(exclude); !strings.Contains(string(b), "<timeout>600</timeout>") {
		t.Fatalf("exclude file:\n%s", b)
	}

	// The NodeManager restarts (still excluded: it stays DECOMMISSIONED)
	// only after the recommission takes it out of the file.
	code, out, errOut = runCLI(t, nil, append([]string{"yarn", "recommission", "gpu-1", "--wait", "0"}, conn...)...)
	if code != 0 || !strings.Contains(out, "recommissioned") {
		t.Fatalf("recommission: exit %d: %s%s", code, out, errOut)
	}
	if err := admin.RestartNodeManager(t.Context(), "gpu-1"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, append([]string{"yarn", "recommission", "gpu-1", "--wait", "1m"}, conn...)...)
	if code != 0 || out != "gpu-1: RUNNING\n" {
		t.Fatalf("recommission --wait: exit %d: %q %s", code, out, errOut)
	}

	for _, args := range [][]string{
		{"yarn"},
		{"yarn", "drain", "gpu-1"},
		{"yarn", "decommission"},
		append([]string{"yarn", "decommission", "gpu-1", "--timeout", "0s"}, conn...),
		{"yarn", "decommission", "gpu-1", "--rm", srv.URL},
	} {
		if code, _, _ := runCLI(t, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestYARNCommandsGoThroughTheJournal: with a database configured, the
// commands journal a manual operation and the leading broker's executor
// carries it out (the command itself touches neither the exclude file nor
// the RM), so the leader sees and keeps it.
func TestYARNCommandsGoThroughTheJournal(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	exclude := filepath.Join(t.TempDir(), "exclude.xml")
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: exclude, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := admin.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	url := pg.NewDatabase(t, store.Migrate)
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	code, out, errOut := runCLI(t, map[string]string{"GPUBROKER_DATABASE_URL": url},
		"yarn", "decommission", "gpu-1", "--timeout", "10m", "--no-wait")
	if code != 0 || !strings.Contains(out, "gpu-1: journaled as op ") {
		t.Fatalf("decommission: exit %d: %s%s", code, out, errOut)
	}
	ops, err := st.OpenOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Kind != broker.ActTransfer || ops[0].Node != "gpu-1" || ops[0].To != broker.OwnerNone {
		t.Fatalf("journal: %+v, want one manual drain of gpu-1", ops)
	}
	if _, err := os.Stat(exclude); err == nil {
		t.Fatal("the command wrote the exclude file itself instead of leaving it to the leader")
	}
	// A second command on the same node is refused while the first is open.
	if code, _, errOut := runCLI(t, map[string]string{"GPUBROKER_DATABASE_URL": url},
		"yarn", "recommission", "gpu-1", "--wait", "0"); code == 0 || !strings.Contains(errOut, "open operation") {
		t.Fatalf("second command: exit %d: %s", code, errOut)
	}

	// The leader: the broker assembled as serve assembles it.
	m, err := app.Open(ctx, app.Config{Store: st, Cloud: app.CloudConfig{NodePool: noPools{}},
		YARN: app.YARNConfig{RM: []string{srv.URL}, AdminAddress: []string{addr}, ExcludeFile: exclude,
			RestartNodeManager: admin.RestartNodeManager,
			// yarnsim launches a container as it allocates it: the
			// cordon's hold may be a second here.
			CordonHold: time.Second},
		Period: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ex, _ := yarn.NewExcludeFile(exclude)
	rt, err := m.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Run(rctx, nil) }()
	defer func() { rcancel(); <-done }()

	waitOp := func(id int64) broker.Op {
		t.Helper()
		for {
			op, err := st.GetOp(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if op.State.Terminal() {
				return op
			}
			select {
			case <-ctx.Done():
				t.Fatalf("op %d still %s at %s: %s", id, op.State, op.Step, op.LastError)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if op := waitOp(ops[0].ID); op.State != broker.OpDone {
		t.Fatalf("decommission op: %+v", op)
	}
	hs, _ := ex.Hosts()
	// The command's 10m bounds the leader's wait; the RM gets no timeout
	// that could kill anything (issue 30): -1, the idle host leaving at once.
	if len(hs) != 1 || hs[0].Name != "gpu-1" || hs[0].Timeout >= 0 {
		t.Fatalf("exclude file after the leader's decommission: %+v, want gpu-1 without a timeout", hs)
	}
	if s := sim.NodeState("gpu-1"); s != "DECOMMISSIONED" {
		t.Fatalf("gpu-1 is %s after the decommission op", s)
	}

	// Recommission follows the op until the leader has it RUNNING again
	// (the restart hook brings the stopped NodeManager back).
	code, out, errOut = runCLI(t, map[string]string{"GPUBROKER_DATABASE_URL": url},
		"yarn", "recommission", "gpu-1", "--wait", "1m", "--poll", "20ms")
	if code != 0 || !strings.Contains(out, " done") {
		t.Fatalf("recommission: exit %d: %s%s", code, out, errOut)
	}
	if s := sim.NodeState("gpu-1"); s != "RUNNING" {
		t.Fatalf("gpu-1 is %s after the recommission op", s)
	}
	if ok, _ := ex.Contains("gpu-1"); ok {
		t.Fatal("gpu-1 still excluded")
	}
}

// noPools is a provider with no groups, enough for a tick loop to run.
type noPools struct{}

func (noPools) Pools(context.Context) ([]broker.PoolState, error) { return nil, nil }
func (noPools) SetDesired(context.Context, string, int) error     { return nil }
func (noPools) Terminate(context.Context, string, string) error   { return nil }
