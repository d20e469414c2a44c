package broker

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// What limits a drain before it starts: disruption budgets that allow no
// eviction now, pods whose data lives on the node, and pods whose eviction
// fails their controller for good. The Kubernetes side observes them
// (k8s.classifyWork, the PDB informer); the planner reads them here so
// that it never chooses a node it cannot drain, and prices a victim whose
// eviction ends its whole Job as that Job's work.

// Budget is a PodDisruptionBudget that selects a pod, as the planner needs
// it: the Eviction API refuses (429) to evict a pod whose budget allows
// no disruption now, so a drain of its node would only wait.
type Budget struct {
	// Name is "namespace/name".
	Name string `json:"name"`
	// Allowed is the budget's status.disruptionsAllowed when observed.
	Allowed int `json:"allowed"`
}

// budgetBlock says why a drain of node n would be refused by disruption
// budgets now, or "" when none blocks: a budget that allows no disruption
// selects a pod the drain evicts, or a pod has more than one budget (the
// Eviction API refuses those outright). A budget that allows some
// disruptions does not block: the drain evicts one pod at a time, and the
// budget allows the next once the evicted pod's replacement is ready.
func budgetBlock(n *Node) string {
	var blocked []string
	for i := range n.Work {
		w := &n.Work[i]
		if w.System {
			continue
		}
		switch {
		case len(w.Budgets) > 1:
			names := make([]string, len(w.Budgets))
			for j, b := range w.Budgets {
				names[j] = b.Name
			}
			blocked = append(blocked, fmt.Sprintf("%s has %d PodDisruptionBudgets (%s), which the Eviction API refuses",
				w.label(), len(w.Budgets), strings.Join(names, ", ")))
		case len(w.Budgets) == 1 && w.Budgets[0].Allowed < 1:
			blocked = append(blocked, fmt.Sprintf("PodDisruptionBudget %s allows no disruption of %s now",
				w.Budgets[0].Name, w.label()))
		}
	}
	if len(blocked) == 0 {
		return ""
	}
	slices.Sort(blocked) // the order of a node's work is not meaningful
	return strings.Join(blocked, "; ")
}

// unmovable says why consolidation may never move w even though its
// controller would recreate it: its data lives on the node (local
// storage), or its eviction fails its controller for good (Fatal). Empty
// when neither.
func (w *Workload) unmovable() string {
	switch {
	case w.Fatal != "":
		return fmt.Sprintf("evicting %s would fail it for good: %s", w.label(), w.Fatal)
	case w.LocalStorage != "":
		return fmt.Sprintf("%s keeps data on the node (%s)", w.label(), w.LocalStorage)
	}
	return ""
}

// fatalLost is the work an eviction that fails w's controller for good
// throws away: the controller's whole run time (FatalSince, else the
// work's own start), whatever checkpoint the work wrote, since nothing
// restarts from it.
func (w *Workload) fatalLost(now time.Time) time.Duration {
	since := w.FatalSince
	if since.IsZero() {
		since = w.StartedAt
	}
	if since.IsZero() {
		return unknownWork
	}
	return max(now.Sub(since), 0)
}
