package engine

import "github.com/gpubroker/gpubroker/broker"

// StopReporter is implemented by side actions that can say how a victim
// their Evict reported done actually stopped (YARN: after
// GRACEFUL_SHUTDOWN, after FORCEFUL_SHUTDOWN, or its whole application
// killed), so the preemption's op records what it stopped rather than
// what it planned.
type StopReporter interface {
	HowStopped(w broker.Workload) string
}

// howStopped is the record of victim w, stopped by act's Evict.
func howStopped(act SideActions, w broker.Workload) string {
	if r, ok := act.(StopReporter); ok {
		if how := r.HowStopped(w); how != "" {
			return how
		}
	}
	name := w.Name
	if name == "" {
		name = w.Key
	}
	return string(w.Source) + " " + name + " (" + w.Key + ") stopped"
}
