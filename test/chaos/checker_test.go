package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

var (
	t0     = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	limits = Limits{Pools: map[string]PoolLimit{"a": {Min: 1, Max: 3, GPUsPerNode: 4}, "b": {Min: 0, Max: 4, GPUsPerNode: 4}},
		ClusterMaxGPUs: 24, OpBound: time.Minute}
)

// healthy is a sample in which every invariant holds.
func healthy() Sample {
	return Sample{At: t0,
		Pools: []PoolSample{{Name: "a", Desired: 3, Live: 3}, {Name: "b", Desired: 2, Live: 2}},
		Nodes: []NodeSample{{Name: "n1", K8sSchedulable: true}, {Name: "n2", YARNSchedulable: true}, {Name: "n3"}},
		Kills: []Kill{{Source: broker.SourceK8s, Key: "uid-1", Name: "ml/p1", Node: "n1", Why: "evicted"}},
		Store: &StoreSample{
			OpenOps: []broker.Op{
				{ID: 1, Kind: broker.ActScaleUp, Pool: "a", Serves: []string{"k8s/uid-2"}, State: broker.OpRunning, CreatedAt: t0.Add(-time.Second)},
				{ID: 2, Kind: broker.ActScaleUp, Pool: "b", Serves: []string{"k8s/uid-3"}, State: broker.OpPending, CreatedAt: t0.Add(-50 * time.Second)},
			},
			Open:      map[string]bool{"k8s/uid-2": true, "k8s/uid-3": true, "yarn/application_1_0001/1": true},
			Closed:    map[string]string{},
			Preempted: map[string]bool{"uid-1": true},
		}}
}

// TestCheckerHealthyHolds: a sample within every bound passes, so the
// breaches below come from the breaching field alone.
func TestCheckerHealthyHolds(t *testing.T) {
	c := NewChecker(limits)
	if bs := c.Check(healthy()); len(bs) != 0 {
		t.Fatalf("breaches on a healthy sample: %v", bs)
	}
	if bs := c.Final(healthy(), nil); len(bs) != 2 {
		t.Fatalf("final on two open ops: %v, want two ops-terminal breaches", bs)
	}
}

// TestCheckerBreaches feeds the checker one breaching state per invariant
// and asserts it reports that invariant.
func TestCheckerBreaches(t *testing.T) {
	cases := []struct {
		inv    string
		mutate func(s *Sample)
	}{
		{InvPoolMax, func(s *Sample) { s.Pools[0].Desired = 4 }},
		{InvPoolMax, func(s *Sample) { s.Pools[0].Live = 4 }},
		{InvPoolMin, func(s *Sample) { s.Pools[0].Desired = 0 }},
		{InvClusterMax, func(s *Sample) { s.Pools[1] = PoolSample{Name: "b", Desired: 4, Live: 4} }},
		{InvBothSides, func(s *Sample) { s.Nodes[2] = NodeSample{Name: "n3", K8sSchedulable: true, YARNSchedulable: true} }},
		{InvWorkKilled, func(s *Sample) {
			s.Kills = append(s.Kills, Kill{Source: broker.SourceYARN, Key: "container_1_0001_01_000001", App: "application_1_0001", Node: "n2", Why: "lost"})
		}},
		{InvDoubleBuy, func(s *Sample) { s.Store.OpenOps[1].Serves = []string{"k8s/uid-3", "k8s/uid-2"} }},
		{InvOpEnds, func(s *Sample) { s.Store.OpenOps[1].CreatedAt = t0.Add(-2 * time.Minute) }},
	}
	for _, tc := range cases {
		s := healthy()
		tc.mutate(&s)
		bs := NewChecker(limits).Check(s)
		if len(bs) != 1 || bs[0].Invariant != tc.inv {
			t.Errorf("%s: breaches %v, want exactly one of %s", tc.inv, bs, tc.inv)
		}
	}
}

// TestCheckerLedgerLost: demand seen pending that later is neither
// pending nor closed with a reason is lost; closed with one is not.
func TestCheckerLedgerLost(t *testing.T) {
	c := NewChecker(limits)
	if bs := c.Check(healthy()); len(bs) != 0 {
		t.Fatal(bs)
	}
	s := healthy()
	s.At = t0.Add(time.Second)
	delete(s.Store.Open, "yarn/application_1_0001/1")
	s.Store.Closed["k8s/uid-9"] = "scheduled"
	bs := c.Check(s)
	if len(bs) != 1 || bs[0].Invariant != InvLedgerLost {
		t.Fatalf("breaches %v, want one ledger-lost", bs)
	}
	s.Store.Closed["yarn/application_1_0001/1"] = "finished"
	if bs := c.Check(s); len(bs) != 0 {
		t.Fatalf("closed with a reason: %v", bs)
	}
}

// TestCheckerKillsWaitForTheStore: a kill seen while the store is down is
// checked against the preemptions once it answers, and breaches then.
func TestCheckerKillsWaitForTheStore(t *testing.T) {
	c := NewChecker(limits)
	s := healthy()
	s.Kills = []Kill{{Source: broker.SourceK8s, Key: "uid-7", Name: "ml/p7", Node: "n1", Why: "evicted"}}
	s.Store = nil
	if bs := c.Check(s); len(bs) != 0 {
		t.Fatalf("without a store: %v", bs)
	}
	s = healthy()
	s.Kills = nil
	bs := c.Check(s)
	if len(bs) != 1 || bs[0].Invariant != InvWorkKilled {
		t.Fatalf("breaches %v, want the deferred kill", bs)
	}
	// Work on a node an injected fault destroyed is not the broker's kill.
	c = NewChecker(limits)
	s = healthy()
	s.Kills = []Kill{{Source: broker.SourceK8s, Key: "uid-8", Node: "n9", Why: "node terminated"}}
	s.LostToFaults = map[string]bool{"n9": true}
	if bs := c.Check(s); len(bs) != 0 {
		t.Fatalf("kill on a faulted node: %v", bs)
	}
}

// TestCheckerFinal: at the end an open op breaches ops-terminal (an
// attrition does not), and demand pending in a cluster but not in the
// ledger breaches ledger-final; a YARN app's prefix matches its requests.
func TestCheckerFinal(t *testing.T) {
	s := healthy()
	attr, _ := json.Marshal(map[string]bool{"attrition": true})
	s.Store.OpenOps = []broker.Op{{ID: 3, Kind: broker.ActScaleDown, Node: "n1", State: broker.OpRunning, Data: attr, CreatedAt: t0.Add(-time.Hour)}}
	c := NewChecker(limits)
	if bs := c.Final(s, []string{"k8s/uid-2", "yarn/application_1_0001/"}); len(bs) != 0 {
		t.Fatalf("final: %v", bs)
	}
	s.Store.OpenOps = append(s.Store.OpenOps, broker.Op{ID: 4, Kind: broker.ActTransfer, Node: "n2", State: broker.OpRunning})
	bs := c.Final(s, []string{"k8s/uid-4", "yarn/application_1_0002/"})
	got := map[string]int{}
	for _, b := range bs {
		got[b.Invariant]++
	}
	if got[InvOpsFinal] != 1 || got[InvLedgerFinal] != 2 || len(bs) != 3 {
		t.Fatalf("final breaches %v, want one ops-terminal and two ledger-final", bs)
	}
	if bs := c.Final(Sample{At: t0}, nil); len(bs) != 1 {
		t.Fatalf("final without a store: %v", bs)
	}
}
