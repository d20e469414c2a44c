package e2e

import "github.com/gpubroker/gpubroker/store"

func storeDecisions(kind string) store.DecisionFilter {
	return store.DecisionFilter{Kind: kind, Limit: 10}
}
