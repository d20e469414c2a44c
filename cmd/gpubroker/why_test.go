package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// whyServer is the real API on a seeded store: a pod and a YARN app that
// wait, with decisions, and a viewer token.
func whyServer(t *testing.T) (url, token string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "ml", MaxGPUs: 16, Weight: 1, Namespaces: []string{"ml"}, YARNQueues: []string{"root.ml"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: now.Add(-12 * time.Minute), Demand: []broker.Demand{
		{Source: broker.SourceK8s, Key: "uid-1", Name: "ml/trainer-0", Tenant: "ml", Queue: "ml", Priority: 1000, GPUsPerUnit: 2, Units: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: now.Add(-3 * time.Minute), Demand: []broker.Demand{
		{Source: broker.SourceYARN, Key: "application_1700000000000_0042/1", Name: "nightly-asr", Tenant: "ml", Queue: "root.ml", Priority: 50, GPUsPerUnit: 1, Units: 4}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWaitReasons(ctx, []broker.Wait{{Demand: "k8s/uid-1", Reason: broker.WaitInFlight, Detail: "node ip-10-0-1-16 is booting for it"},
		{Demand: "yarn/application_1700000000000_0042/1", Reason: broker.WaitQuota, Detail: "tenant ml uses 16 of its 16 GPUs"}}); err != nil {
		t.Fatal(err)
	}
	detail, _ := json.Marshal(broker.Action{Kind: broker.ActScaleUp, Pool: "gpu-training-group", Target: 1, Serves: []string{"k8s/uid-1"}})
	if err := st.RecordDecisions(ctx, []broker.Decision{
		{At: now.Add(-11 * time.Minute), Tick: 1, Kind: "wait", Demand: "k8s/uid-1", Tenant: "ml", Reason: "pool-max: gpu-training-group is at its max of 0 nodes"},
		{At: now.Add(-10 * time.Minute), Tick: 4, Kind: "scale-up", Demand: "k8s/uid-1", Pool: "gpu-training-group", Reason: "1 pod of ml needs 2 GPUs; ordering 1 node", Detail: detail},
		{At: now.Add(-2 * time.Minute), Tick: 9, Kind: "wait", Demand: "yarn/application_1700000000000_0042/1", Tenant: "ml", Reason: "over-quota: tenant ml uses 16 of its 16 GPUs"},
	}); err != nil {
		t.Fatal(err)
	}
	token, _, err = st.CreateToken(ctx, "why-test", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, token
}

func TestWhyPrintsTheHistory(t *testing.T) {
	url, token := whyServer(t)
	code, out, errOut := runCLI(t, nil, "why", "--server", url, "--token", token, "pod", "ml/trainer-0")
	if code != 0 {
		t.Fatalf("why pod: exit %d: %s", code, errOut)
	}
	for _, s := range []string{"ml/trainer-0 (k8s/uid-1): tenant ml, priority 1000, 1×2 GPUs",
		"pending for 12m", "waits because in-flight: node ip-10-0-1-16 is booting for it",
		"wait      pool-max: gpu-training-group is at its max of 0 nodes",
		"scale-up  pool gpu-training-group: 1 pod of ml needs 2 GPUs; ordering 1 node"} {
		if !strings.Contains(out, s) {
			t.Errorf("why pod: output lacks %q:\n%s", s, out)
		}
	}
	if strings.Index(out, "pool-max") > strings.Index(out, "ordering 1 node") {
		t.Errorf("decisions are not oldest first:\n%s", out)
	}

	// The server and token from the environment; a YARN application id.
	code, out, errOut = runCLI(t, map[string]string{"GPUBROKER_SERVER": url, "GPUBROKER_TOKEN": token}, "why", "application_1700000000000_0042")
	if code != 0 || !strings.Contains(out, "nightly-asr (yarn/application_1700000000000_0042/1)") ||
		!strings.Contains(out, "over-quota: tenant ml uses 16 of its 16 GPUs") {
		t.Fatalf("why application: exit %d %s\n%s", code, errOut, out)
	}

	code, out, _ = runCLI(t, nil, "why", "--server", url, "--token", token, "--json", "k8s/uid-1")
	var a whyAnswer
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || len(a.Demands) != 1 || len(a.Demands[0].Decisions) != 2 {
		t.Fatalf("why --json: exit %d %q", code, out)
	}
}

func TestWhyExplainsFailures(t *testing.T) {
	url, token := whyServer(t)
	code, _, errOut := runCLI(t, nil, "why", "--server", url, "--token", token, "pod", "ml/nobody")
	if code != 1 || !strings.Contains(errOut, "404") || !strings.Contains(errOut, "no demand k8s/ml/nobody in the ledger or its history") {
		t.Errorf("unknown pod: exit %d %q", code, errOut)
	}
	code, _, errOut = runCLI(t, nil, "why", "--server", url, "--token", "gpb_wrong", "pod", "ml/trainer-0")
	if code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "unknown or revoked") {
		t.Errorf("bad token: exit %d %q", code, errOut)
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"why", "--server", url, "--token", token}, "name the demand"},
		{nil, []string{"why", "--server", url, "--token", token, "pod", "trainer-0"}, "pod needs NAMESPACE/NAME"},
		{nil, []string{"why", "--server", url, "--token", token, "trainer-0"}, `cannot tell which demand "trainer-0" names`},
		{nil, []string{"why", "--token", token, "pod", "ml/x"}, "--server is required (or set GPUBROKER_SERVER)"},
		{map[string]string{"GPUBROKER_SERVER": url}, []string{"why", "pod", "ml/x"}, "--token is required (or set GPUBROKER_TOKEN)"},
		{nil, []string{"why", "--server", "ftp://x", "--token", token, "pod", "ml/x"}, "--server must be an http:// or https:// address"},
	} {
		code, _, errOut := runCLI(t, c.env, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d %q, want 2 with %q", c.args, code, errOut, c.want)
		}
	}
}
