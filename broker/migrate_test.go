package broker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func migrateOn(p *Policy) { p.Migrate = MigrateCheckpointed }

// migrations returns plan's migrate actions.
func migrations(plan Plan) []Action {
	var out []Action
	for _, a := range plan.Actions {
		if a.Kind == ActMigrate {
			out = append(out, a)
		}
	}
	return out
}

// TestMigrate: consolidation moves checkpointed work off an underused node
// only with a checkpoint newer than the max wait, never an AM, never a
// gang partly, never a tenant that opted out, never past the hourly
// budget, and only where the work lands on another node of the pool.
func TestMigrate(t *testing.T) {
	two := []PoolState{gpuPool(gtg, 3)}
	under := underused(10 * time.Minute)
	yarnNode := func(name string, ws ...Workload) Node {
		return gpuNode(name, gtg, OwnerYARN, 4, 0, under, work(ws...))
	}
	// fuller: 3 of 4 GPUs busy with long work, 1 free for the moved task.
	fuller := gpuNode("fuller", gtg, OwnerYARN, 4, 0, work(job("long", 3, 0, true, yarnWork, batch, app("application_1_0009", false))))
	fresh := func(key string, opts ...func(*Workload)) Workload {
		return job(key, 1, 0, true, append([]func(*Workload){yarnWork, batch, checkpoint(time.Minute), app("application_1_"+key, false)}, opts...)...)
	}
	cases := []struct {
		name    string
		snap    *Snapshot
		policy  Policy
		migrate bool
		kept    string // a phrase the node's kept note must hold when it is not migrated
	}{
		{name: "off by default: the busy YARN node is kept",
			snap: snap(two, []Node{yarnNode("y1", fresh("a")), fuller}, nil), policy: refPolicy(),
			kept: "idle reclaim never stops YARN work"},
		{name: "a task checkpointed a minute ago moves to the fuller node",
			snap: snap(two, []Node{yarnNode("y1", fresh("a")), fuller}, nil), policy: refPolicy(migrateOn), migrate: true},
		{name: "never without a known checkpoint",
			snap: snap(two, []Node{yarnNode("y1", fresh("a", checkpoint(-1))), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "no known checkpoint"},
		{name: "never when the newest checkpoint is older than the max wait",
			snap: snap(two, []Node{yarnNode("y1", fresh("a", checkpoint(61*time.Minute))), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "older than the 1h0m0s a migration waits for the next"},
		{name: "a longer max wait allows it",
			snap:   snap(two, []Node{yarnNode("y1", fresh("a", checkpoint(61*time.Minute))), fuller}, nil),
			policy: refPolicy(migrateOn, func(p *Policy) { p.MigrateMaxWait = Duration(2 * time.Hour) }), migrate: true},
		{name: "never an ApplicationMaster",
			snap: snap(two, []Node{yarnNode("y1", fresh("a"), job("am", 0, 0, true, yarnWork, batch, checkpoint(time.Minute), app("application_1_a", true))), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "is an ApplicationMaster"},
		{name: "never a gang partly",
			snap: snap(two, []Node{yarnNode("y1", fresh("a", app("application_1_0009", false))), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "a gang is never moved partly"},
		{name: "never a tenant that opted out",
			snap:   snap(two, []Node{yarnNode("y1", fresh("a")), fuller}, nil),
			policy: refPolicy(migrateOn, func(p *Policy) { p.NoMigrateTenants = []string{"research"} }),
			kept:   "opted out of migration"},
		{name: "never past the hourly budget",
			snap:   snap(two, []Node{yarnNode("y1", fresh("a")), fuller}, nil, func(s *Snapshot) { s.MigratedLastHour = 20 }),
			policy: refPolicy(migrateOn), kept: "exceeds the migration budget"},
		{name: "never when the work does not land elsewhere",
			snap: snap(two, []Node{yarnNode("y1", fresh("a", func(w *Workload) { w.GPUs = 2 })), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "does not fit on other yarn nodes"},
		{name: "never below the pool minimum",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(2, 5))}, []Node{yarnNode("y1", fresh("a")), fuller}, nil), policy: refPolicy(migrateOn),
			kept: "at its minimum"},
		{name: "Kubernetes work past max_work_lost moves too, right after its checkpoint",
			snap: snap(two, []Node{gpuNode("k1", gtg, OwnerK8s, 4, 0, under, work(job("train", 1, 0, true, batch, checkpoint(2*time.Minute), started(5*time.Hour)))),
				gpuNode("kfull", gtg, OwnerK8s, 4, 0, work(job("long", 3, 0, true, batch)))}, nil),
			policy: refPolicy(migrateOn, func(p *Policy) { p.MaxWorkLost = Duration(time.Minute) }), migrate: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan := MakePlan(tc.snap, tc.policy)
			ms := migrations(plan)
			if !tc.migrate {
				if len(ms) > 0 {
					t.Fatalf("migrated %+v", ms)
				}
				node := tc.snap.Nodes[0].Name
				if r := keptReason(plan, node); !strings.Contains(r, tc.kept) {
					t.Fatalf("kept note for %s %q, want it to say %q (plan %+v)", node, r, tc.kept, plan)
				}
				return
			}
			if len(ms) != 1 {
				t.Fatalf("migrations %+v, want one (plan %+v)", ms, plan)
			}
			m := ms[0]
			if m.Node != tc.snap.Nodes[0].Name || len(m.Victims) != 1 || len(m.Landing) != 1 || m.Landing[0] != tc.snap.Nodes[1].Name {
				t.Fatalf("migration %+v, want node %s's task landing on %s", m, tc.snap.Nodes[0].Name, tc.snap.Nodes[1].Name)
			}
			if m.GPUHoursLost <= 0 || m.GPUHoursLost > 0.1 {
				t.Fatalf("migration loses %.3f GPU-hours, want at most the 5 min window on 1 GPU", m.GPUHoursLost)
			}
		})
	}
}

// TestMigrateLandsAcrossPools: work whose constraints the side observed
// lands on a fuller node of any pool of its side they match; work whose
// constraints are unknown only on its own pool; constraints that exclude
// the other pool's model, labels or YARN partition keep it off that pool.
func TestMigrateLandsAcrossPools(t *testing.T) {
	const other = "gpu-h100-group"
	pools := []PoolState{gpuPool(gtg, 1), gpuPool(other, 1, model("H100"))}
	under := underused(10 * time.Minute)
	task := func(c *Constraints, opts ...func(*Workload)) Workload {
		return job("a", 1, 0, true, append([]func(*Workload){batch, checkpoint(2 * time.Minute), started(5 * time.Hour), func(w *Workload) { w.Constraints = c }}, opts...)...)
	}
	fullerIn := func(owner Owner, opts ...func(*Node)) Node {
		n := gpuNode("fuller", other, owner, 4, 0, append([]func(*Node){work(job("long", 3, 0, true, batch))}, opts...)...)
		n.GPUModel = "H100"
		return n
	}
	gpuTol := []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}}
	cases := []struct {
		name    string
		nodes   []Node
		migrate bool
	}{
		{name: "any GPU, tolerating the GPU taint: lands on the other pool's node",
			nodes: []Node{gpuNode("k1", gtg, OwnerK8s, 4, 0, under, work(task(&Constraints{Tolerations: gpuTol}))), fullerIn(OwnerK8s)}, migrate: true},
		{name: "constraints unknown: only its own pool, where nothing has room",
			nodes: []Node{gpuNode("k1", gtg, OwnerK8s, 4, 0, under, work(task(nil))), fullerIn(OwnerK8s)}},
		{name: "pinned to its model: not onto H100",
			nodes: []Node{gpuNode("k1", gtg, OwnerK8s, 4, 0, under, work(task(&Constraints{GPUModels: []string{"A100"}, Tolerations: gpuTol}))), fullerIn(OwnerK8s)}},
		{name: "not tolerating the other node's taint",
			nodes: []Node{gpuNode("k1", gtg, OwnerK8s, 4, 0, under, work(task(&Constraints{Tolerations: gpuTol}))),
				fullerIn(OwnerK8s, func(n *Node) { n.Taints = append(n.Taints, Taint{Key: "team", Value: "vision", Effect: "NoSchedule"}) })}},
		{name: "YARN: the same partition lands on the other pool's node",
			nodes: []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, under, work(task(&Constraints{}, yarnWork))), fullerIn(OwnerYARN, work(job("long", 3, 0, true, batch, yarnWork)))}, migrate: true},
		{name: "YARN: not into another partition",
			nodes: []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, under, work(task(&Constraints{}, yarnWork))),
				fullerIn(OwnerYARN, work(job("long", 3, 0, true, batch, yarnWork)), func(n *Node) { n.Partition = "gpu" })}},
		{name: "never onto the other side's node",
			nodes: []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, under, work(task(&Constraints{}, yarnWork))), fullerIn(OwnerK8s)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := snap(pools, tc.nodes, nil)
			plan := MakePlan(s, refPolicy(migrateOn, func(p *Policy) { p.MaxWorkLost = Duration(time.Minute) }))
			ms := migrations(plan)
			if !tc.migrate {
				if len(ms) > 0 {
					t.Fatalf("migrated %+v", ms)
				}
				if r := keptReason(plan, tc.nodes[0].Name); !strings.Contains(r, "does not fit on other") {
					t.Fatalf("kept note %q, want it to say the work does not fit elsewhere (plan %+v)", r, plan)
				}
				return
			}
			if len(ms) != 1 || ms[0].Node != tc.nodes[0].Name || !slices.Equal(ms[0].Landing, []string{"fuller"}) {
				t.Fatalf("migrations %+v, want %s's task landing on fuller (plan %+v)", ms, tc.nodes[0].Name, plan)
			}
		})
	}
}

// TestMigrateBudgetWithinOnePlan: two nodes each worth one migration and a
// budget of one: one plan migrates one of them.
func TestMigrateBudgetWithinOnePlan(t *testing.T) {
	under := underused(10 * time.Minute)
	n := func(name, key string) Node {
		return gpuNode(name, gtg, OwnerYARN, 4, 0, under, work(job(key, 1, 0, true, yarnWork, batch, checkpoint(time.Minute))))
	}
	full := gpuNode("full", gtg, OwnerYARN, 4, 0, work(job("long", 2, 0, true, yarnWork, batch)))
	plan := MakePlan(snap([]PoolState{gpuPool(gtg, 3)}, []Node{n("y1", "a"), n("y2", "b"), full}, nil),
		refPolicy(migrateOn, func(p *Policy) { p.MaxMigrationsPerHour = 1 }))
	if ms := migrations(plan); len(ms) != 1 {
		t.Fatalf("migrations %+v, want one within the budget of 1", ms)
	}
}

// TestMigratePlanProperties: on random clusters, every migration the
// planner plans moves only work with a checkpoint newer than the max wait
// (or a service replica), never an ApplicationMaster, never part of an
// application that has work on another node, never a tenant that opted
// out, and all of them together stay within the hourly budget.
func TestMigratePlanProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		window := time.Duration(rapid.IntRange(1, 10).Draw(rt, "wait_min")) * time.Minute
		budget := rapid.IntRange(1, 6).Draw(rt, "budget")
		last := rapid.IntRange(0, 6).Draw(rt, "last_hour")
		pol := refPolicy(migrateOn, func(p *Policy) {
			p.MigrateMaxWait, p.MaxMigrationsPerHour = Duration(window), budget
			p.NoMigrateTenants = []string{"optout"}
			p.MaxWorkLost = Duration(time.Duration(rapid.IntRange(0, 20).Draw(rt, "max_lost_min")) * time.Minute)
		})
		nNodes := rapid.IntRange(2, 8).Draw(rt, "nodes")
		var nodes []Node
		for i := range nNodes {
			owner := rapid.SampledFrom([]Owner{OwnerYARN, OwnerK8s}).Draw(rt, "owner")
			src, _ := owner.Side()
			var ws []Workload
			for j := range rapid.IntRange(0, 3).Draw(rt, "tasks") {
				w := job(fmt.Sprintf("t%d-%d", i, j), rapid.IntRange(0, 2).Draw(rt, "gpus"), 0, true, batch)
				w.Source = src
				w.CheckpointAge = time.Duration(rapid.IntRange(-1, 15).Draw(rt, "ckpt_min")) * time.Minute
				if w.CheckpointAge < 0 {
					w.CheckpointAge = -1
				}
				w.App = fmt.Sprintf("app-%d", rapid.IntRange(0, 5).Draw(rt, "app"))
				w.AM = src == SourceYARN && rapid.IntRange(0, 5).Draw(rt, "am") == 0
				w.Tenant = rapid.SampledFrom([]string{"research", "optout"}).Draw(rt, "tenant")
				if rapid.IntRange(0, 4).Draw(rt, "service") == 0 {
					w.Class = WorkService
				}
				ws = append(ws, w)
			}
			opts := []func(*Node){work(ws...)}
			if rapid.Bool().Draw(rt, "underused") {
				opts = append(opts, underused(10*time.Minute))
			}
			nodes = append(nodes, gpuNode(fmt.Sprintf("n%d", i), gtg, owner, 4, 0, opts...))
		}
		s := snap([]PoolState{gpuPool(gtg, nNodes, bounds(0, 10))}, nodes, nil, func(s *Snapshot) { s.MigratedLastHour = last })
		plan := MakePlan(s, pol)
		moved := 0
		for _, m := range migrations(plan) {
			moved += len(m.Victims)
			for _, v := range m.Victims {
				if v.AM {
					rt.Fatalf("migration %s moves ApplicationMaster %s", m.Node, v.Key)
				}
				if v.Tenant == "optout" {
					rt.Fatalf("migration %s moves %s of a tenant that opted out", m.Node, v.Key)
				}
				if v.Class != WorkService && (v.CheckpointAge < 0 || v.CheckpointAge > window) {
					rt.Fatalf("migration %s moves %s with checkpoint age %s (window %s)", m.Node, v.Key, v.CheckpointAge, window)
				}
				for _, n := range nodes {
					if n.Name == m.Node || v.Class == WorkService {
						continue
					}
					if slices.ContainsFunc(n.Work, func(x Workload) bool { return x.App == v.App && !x.AM && !x.System }) {
						rt.Fatalf("migration %s moves %s of %s, which also runs on %s", m.Node, v.Key, v.App, n.Name)
					}
				}
			}
		}
		if moved > budget-last && moved > 0 {
			rt.Fatalf("migrations restart %d tasks, budget %d with %d in the last hour", moved, budget, last)
		}
	})
}
