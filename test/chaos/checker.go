package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// The invariants the checker holds the product to.
const (
	InvPoolMax     = "pool-max"     // never above a pool's max nodes
	InvPoolMin     = "pool-min"     // never below a pool's min nodes
	InvClusterMax  = "cluster-max"  // never above the cluster GPU max
	InvBothSides   = "both-sides"   // no node schedulable on both sides
	InvWorkKilled  = "work-killed"  // no running GPU work killed outside a recorded preemption
	InvDoubleBuy   = "double-buy"   // no demand served by two open scale-ups
	InvOpEnds      = "op-ends"      // every op reaches a terminal state within its bound
	InvLedgerLost  = "ledger-lost"  // every demand that appeared is pending or closed with a reason
	InvLedgerFinal = "ledger-final" // at the end, demand pending in the clusters is pending in the ledger
	InvOpsFinal    = "ops-terminal" // at the end, every op is terminal
)

// Limits are the bounds the product was configured with.
type Limits struct {
	Pools          map[string]PoolLimit
	ClusterMaxGPUs int
	// OpBound is how long an op may stay open.
	OpBound time.Duration
}

// PoolLimit is one pool's bounds.
type PoolLimit struct{ Min, Max, GPUsPerNode int }

// Sample is one look at the world: the cloud, both clusters, the work that
// was killed since the previous sample, and the store.
type Sample struct {
	At    time.Time
	Pools []PoolSample
	Nodes []NodeSample
	// Kills is running work that ended without finishing since the
	// previous sample.
	Kills []Kill
	// LostToFaults are nodes whose work an injected fault (a GPU fallen
	// off the bus) destroyed: work ending there is not the broker's kill.
	LostToFaults map[string]bool
	// Store is nil when the database could not be read this time.
	Store *StoreSample
}

// PoolSample is a cloud group: its desired capacity and its live
// (pending or in-service) instances.
type PoolSample struct {
	Name          string
	Desired, Live int
}

// NodeSample is a machine as both clusters list it.
type NodeSample struct {
	Name string
	// K8sSchedulable: listed, not cordoned, no owner taint (in both of
	// the Kubernetes reads around the YARN read).
	K8sSchedulable bool
	// YARNSchedulable: RUNNING with GPUs.
	YARNSchedulable bool
}

// Kill is running work that ended without finishing.
type Kill struct {
	Source broker.Source
	// Key is the pod UID or the container id; Name the pod's ns/name;
	// App the YARN application.
	Key, Name, App string
	Node           string
	Why            string
}

func (k Kill) String() string {
	return fmt.Sprintf("%s %s %s on %s (%s)", k.Source, k.Name, k.Key, k.Node, k.Why)
}

// StoreSample is what the store says.
type StoreSample struct {
	// OpenOps are the ops not yet terminal.
	OpenOps []broker.Op
	// Open are the demand IDs pending in the ledger.
	Open map[string]bool
	// Closed are the demand IDs closed so far, with their latest reason.
	Closed map[string]string
	// Preempted are the workload keys, names and apps recorded as victims
	// of preemptions so far.
	Preempted map[string]bool
}

// Breach is an invariant that did not hold.
type Breach struct {
	Invariant string
	At        time.Time
	Detail    string
}

func (b Breach) Error() string {
	return fmt.Sprintf("invariant %s breached at %s: %s", b.Invariant, b.At.Format("15:04:05.000"), b.Detail)
}

// Checker checks samples against the invariants. It keeps what it has
// seen (demand that appeared, kills not yet checked against a store).
type Checker struct {
	lim    Limits
	checks map[string]int
	seen   map[string]time.Time // demand ID → first seen open
	// unchecked are kills seen while the store could not be read.
	unchecked []Kill
	lost      map[string]bool
}

// NewChecker returns a checker for lim.
func NewChecker(lim Limits) *Checker {
	return &Checker{lim: lim, checks: map[string]int{}, seen: map[string]time.Time{}, lost: map[string]bool{}}
}

// Checks returns how many times each invariant was checked.
func (c *Checker) Checks() map[string]int {
	out := make(map[string]int, len(c.checks))
	for k, v := range c.checks {
		out[k] = v
	}
	return out
}

func (c *Checker) count(inv string, n int) { c.checks[inv] += n }

// Check checks one sample and returns the breaches, none when all hold.
func (c *Checker) Check(s Sample) []Breach {
	var out []Breach
	breach := func(inv, format string, args ...any) {
		out = append(out, Breach{Invariant: inv, At: s.At, Detail: fmt.Sprintf(format, args...)})
	}
	gpus, desiredGPUs := 0, 0
	for _, p := range s.Pools {
		lim, ok := c.lim.Pools[p.Name]
		if !ok {
			continue
		}
		c.count(InvPoolMax, 1)
		c.count(InvPoolMin, 1)
		if p.Desired > lim.Max || p.Live > lim.Max {
			breach(InvPoolMax, "pool %s: desired %d, live %d instances; max %d", p.Name, p.Desired, p.Live, lim.Max)
		}
		if p.Desired < lim.Min {
			breach(InvPoolMin, "pool %s: desired %d; min %d", p.Name, p.Desired, lim.Min)
		}
		gpus += p.Live * lim.GPUsPerNode
		desiredGPUs += p.Desired * lim.GPUsPerNode
	}
	c.count(InvClusterMax, 1)
	if gpus > c.lim.ClusterMaxGPUs || desiredGPUs > c.lim.ClusterMaxGPUs {
		breach(InvClusterMax, "cluster: %d GPUs live, %d desired; max %d", gpus, desiredGPUs, c.lim.ClusterMaxGPUs)
	}
	for _, n := range s.Nodes {
		c.count(InvBothSides, 1)
		if n.K8sSchedulable && n.YARNSchedulable {
			breach(InvBothSides, "node %s is schedulable on Kubernetes and on YARN", n.Name)
		}
	}
	for n := range s.LostToFaults {
		c.lost[n] = true
	}
	kills := append(c.unchecked, s.Kills...)
	c.unchecked = nil
	if s.Store == nil {
		// The victims are in the store: check these kills when it answers.
		c.unchecked = kills
		return out
	}
	st := s.Store
	for _, k := range kills {
		c.count(InvWorkKilled, 1)
		switch {
		case c.lost[k.Node]:
		case st.Preempted[k.Key], k.Name != "" && st.Preempted[k.Name], k.App != "" && st.Preempted[k.App]:
		default:
			breach(InvWorkKilled, "%s was killed and no preemption names it", k)
		}
	}
	serving := map[string]broker.Op{}
	for _, op := range st.OpenOps {
		c.count(InvOpEnds, 1)
		if age := s.At.Sub(op.CreatedAt); !attrition(op) && age > c.lim.OpBound {
			breach(InvOpEnds, "op %d (%s, pool %q, node %q, step %s) open for %s, bound %s; last error %q",
				op.ID, op.Kind, op.Pool, op.Node, op.Step, age.Round(time.Second), c.lim.OpBound, op.LastError)
		}
		if op.Kind != broker.ActScaleUp {
			continue
		}
		for _, d := range op.Serves {
			c.count(InvDoubleBuy, 1)
			if prev, ok := serving[d]; ok {
				breach(InvDoubleBuy, "demand %s is served by open scale-ups %s and %s", d, describeScaleUp(prev), describeScaleUp(op))
			}
			serving[d] = op
		}
	}
	for id := range st.Open {
		if _, ok := c.seen[id]; !ok {
			c.seen[id] = s.At
		}
	}
	ids := make([]string, 0, len(c.seen))
	for id := range c.seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c.count(InvLedgerLost, 1)
		if !st.Open[id] && st.Closed[id] == "" {
			breach(InvLedgerLost, "demand %s (first seen %s) is neither pending nor closed with a reason",
				id, c.seen[id].Format("15:04:05.000"))
		}
	}
	return out
}

// Final checks the end state, once the faults and the workload have
// stopped and the broker had time to settle: every op is terminal, and
// every demand pending in the clusters is pending in the ledger. pending
// are demand IDs, or ID prefixes ending in "/" (a YARN app's requests).
func (c *Checker) Final(s Sample, pending []string) []Breach {
	var out []Breach
	if s.Store == nil {
		return []Breach{{Invariant: InvOpsFinal, At: s.At, Detail: "the store could not be read at the end"}}
	}
	for _, op := range s.Store.OpenOps {
		c.count(InvOpsFinal, 1)
		if !attrition(op) {
			out = append(out, Breach{Invariant: InvOpsFinal, At: s.At, Detail: fmt.Sprintf("op %d (%s, pool %q, node %q) still %s at step %s; last error %q",
				op.ID, op.Kind, op.Pool, op.Node, op.State, op.Step, op.LastError)})
		}
	}
	open := make([]string, 0, len(s.Store.Open))
	for id := range s.Store.Open {
		open = append(open, id)
	}
	slices.Sort(open)
	for _, p := range pending {
		c.count(InvLedgerFinal, 1)
		found := s.Store.Open[p]
		if strings.HasSuffix(p, "/") {
			i, _ := slices.BinarySearch(open, p)
			found = i < len(open) && strings.HasPrefix(open[i], p)
		}
		if !found {
			out = append(out, Breach{Invariant: InvLedgerFinal, At: s.At, Detail: fmt.Sprintf("demand %s is pending in its cluster but not in the ledger", p)})
		}
	}
	return out
}

// attrition reports an attrition op: it ends when its node's work does,
// without a deadline of its own (README), so no bound applies.
func attrition(op broker.Op) bool {
	return broker.OpDataOf(&op).Attrition
}

// describeScaleUp names a scale-up op with what a double buy needs to be
// understood: its pool, target, step and the demand it serves.
func describeScaleUp(op broker.Op) string {
	return fmt.Sprintf("%d (pool %q, target %d, step %s, created %s, serves %v; %s)", op.ID, op.Pool, op.Target, op.Step,
		op.CreatedAt.Format("15:04:05.000"), op.Serves, op.Reason)
}
