package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// whyBody is the decoded answer of /why.
type whyBody struct {
	Query   string `json:"query"`
	Demands []struct {
		ID          string  `json:"id"`
		Name        string  `json:"name"`
		Tenant      string  `json:"tenant"`
		State       string  `json:"state"`
		LastSeen    string  `json:"last_seen"`
		WaitReason  string  `json:"wait_reason"`
		CloseReason string  `json:"close_reason"`
		WaitSeconds float64 `json:"wait_seconds"`
		Decisions   []struct {
			Kind   string `json:"kind"`
			Reason string `json:"reason"`
		} `json:"decisions"`
	} `json:"demands"`
}

func decodeWhy(t *testing.T, r resp) whyBody {
	t.Helper()
	var b whyBody
	if err := json.Unmarshal([]byte(r.raw), &b); err != nil {
		t.Fatalf("decode %s: %v", r.raw, err)
	}
	return b
}

func (e *env) seedWhy() {
	e.t.Helper()
	e.seed()
	serves := func(kind broker.ActionKind, ids ...string) json.RawMessage {
		b, _ := json.Marshal(broker.Action{Kind: kind, Pool: "gpu-training-group", Serves: ids, Reason: "r"})
		return b
	}
	if err := e.st.RecordDecisions(context.Background(), []broker.Decision{
		{At: e.now.Add(-9 * time.Minute), Tick: 3, Kind: "wait", Demand: "k8s/p1", Tenant: "ml", Reason: "pool-max: gpu-training-group is at its max"},
		// An action naming another demand first still belongs to p1's history.
		{At: e.now.Add(-8 * time.Minute), Tick: 4, Kind: "scale-up", Demand: "k8s/p9", Pool: "gpu-training-group",
			Reason: "2 pods need GPUs; ordering 1 node", Detail: serves(broker.ActScaleUp, "k8s/p9", "k8s/p1")},
		{At: e.now.Add(-7 * time.Minute), Tick: 5, Kind: "wait", Demand: "k8s/p1", Tenant: "ml", Reason: "in-flight: node ip-10-0-0-3 is booting for it"},
		// Not about p1.
		{At: e.now.Add(-7 * time.Minute), Tick: 5, Kind: "scale-up", Demand: "k8s/p2", Reason: "vision needs 4 GPUs", Detail: serves(broker.ActScaleUp, "k8s/p2")},
		{At: e.now.Add(-30 * time.Second), Tick: 9, Kind: "wait", Demand: "yarn/application_1_0001/1", Tenant: "ml", Reason: "over-quota: tenant ml uses 16 of its 16 GPUs"},
	}); err != nil {
		e.t.Fatal(err)
	}
}

func TestWhyTellsADemandsHistory(t *testing.T) {
	e := newEnv(t)
	e.seedWhy()
	wantP1 := []string{"wait pool-max: gpu-training-group is at its max", "scale-up 2 pods need GPUs; ordering 1 node",
		"wait in-flight: node ip-10-0-0-3 is booting for it"}
	// By pod UID and by namespace/name, as `gpubroker why pod ml/p1` asks.
	for _, id := range []string{"k8s%2Fp1", "k8s%2Fml%2Fp1"} {
		r := e.call("GET", "/api/v1/demand/"+id+"/why", "viewer", nil)
		want(t, r, 200, "why "+id)
		b := decodeWhy(t, r)
		if len(b.Demands) != 1 || b.Demands[0].ID != "k8s/p1" || b.Demands[0].State != "pending" ||
			b.Demands[0].WaitReason != string(broker.WaitInFlight) || b.Demands[0].WaitSeconds < 500 ||
			strings.HasPrefix(b.Demands[0].LastSeen, "0001") {
			t.Fatalf("why %s: %s", id, r.raw)
		}
		var got []string
		for _, d := range b.Demands[0].Decisions {
			got = append(got, d.Kind+" "+d.Reason)
		}
		if strings.Join(got, "\n") != strings.Join(wantP1, "\n") {
			t.Errorf("why %s: decisions, oldest first:\n%s\nwant:\n%s", id, strings.Join(got, "\n"), strings.Join(wantP1, "\n"))
		}
	}
	// A YARN application id names each of its request priorities.
	for _, id := range []string{"application_1_0001", "yarn%2Fapplication_1_0001", "yarn%2Fapplication_1_0001%2F1"} {
		r := e.call("GET", "/api/v1/demand/"+id+"/why", "viewer", nil)
		want(t, r, 200, "why "+id)
		b := decodeWhy(t, r)
		if len(b.Demands) != 1 || b.Demands[0].ID != "yarn/application_1_0001/1" || len(b.Demands[0].Decisions) != 1 ||
			!strings.Contains(b.Demands[0].Decisions[0].Reason, "16 of its 16 GPUs") {
			t.Errorf("why %s: %s", id, r.raw)
		}
	}
	// Once the pod is scheduled the history stays, now closed.
	if _, err := e.st.ApplyObservation(context.Background(), store.Observation{Source: broker.SourceK8s, At: e.now,
		Demand: []broker.Demand{{Source: broker.SourceK8s, Key: "p2", Name: "vision/p2", Tenant: "vision", Queue: "vision", Priority: 100, GPUsPerUnit: 4, Units: 1}},
		Closed: map[string]store.CloseReason{"p1": store.CloseScheduled}}); err != nil {
		t.Fatal(err)
	}
	r := e.call("GET", "/api/v1/demand/k8s%2Fp1/why", "viewer", nil)
	want(t, r, 200, "why of closed demand")
	if b := decodeWhy(t, r); len(b.Demands) != 1 || b.Demands[0].State != "closed" || b.Demands[0].CloseReason != "scheduled" || len(b.Demands[0].Decisions) != 3 {
		t.Errorf("why of closed demand: %s", r.raw)
	}
}

func TestWhyRefusesUnknownBadAndOtherTenantsDemand(t *testing.T) {
	e := newEnv(t)
	e.seedWhy()
	r := e.call("GET", "/api/v1/demand/k8s%2Fno-such-pod/why", "viewer", nil)
	want(t, r, 404, "unknown demand")
	if msg := r.raw; !strings.Contains(msg, "no demand k8s/no-such-pod in the ledger or its history") || !strings.Contains(msg, "k8s/<namespace>/<pod>") {
		t.Errorf("404 does not say what was not found and which ids work: %s", msg)
	}
	wantInvalid(t, e.call("GET", "/api/v1/demand/mesos%2Fx/why", "viewer", nil), "id", "unknown source")
	wantInvalid(t, e.call("GET", "/api/v1/demand/p1/why", "viewer", nil), "id", "no source")
	wantInvalid(t, e.call("GET", "/api/v1/demand/k8s%2F%FF%FE/why", "viewer", nil), "id", "not UTF-8")
	wantInvalid(t, e.call("GET", "/api/v1/demand/k8s%2Fa%00b/why", "viewer", nil), "id", "a NUL")
	// A tenant-admin of ml sees ml's demand, not vision's.
	want(t, e.call("GET", "/api/v1/demand/k8s%2Fp1/why", "ml-admin", nil), 200, "ml-admin, own tenant")
	r = e.call("GET", "/api/v1/demand/k8s%2Fp2/why", "ml-admin", nil)
	want(t, r, 403, "ml-admin, tenant vision")
	if strings.Contains(r.raw, "decisions") {
		t.Errorf("a refused why leaks the history: %s", r.raw)
	}
	want(t, e.call("GET", "/api/v1/demand/k8s%2Fp1/why", "", nil), 401, "no token")
	want(t, e.call("GET", "/api/v1/demand/k8s%2Fp1/why", "agent", nil), 403, "agent")
}
