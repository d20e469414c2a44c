package app

import (
	"context"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// previewLedger is the ledger as Seed would leave it, without writing the
// configuration: stored pools, tenants and policy win, and the
// configuration's pools and tenants that are not stored yet (and its policy
// when none is stored) are added in memory. plan uses it to show what serve
// would do on its first tick.
type previewLedger struct {
	engine.Ledger
	pools   []broker.Pool
	tenants []broker.Tenant
	policy  broker.Policy
}

func (l previewLedger) Policy(ctx context.Context) (broker.Policy, error) {
	p, err := l.Ledger.Policy(ctx)
	if err != nil || p.Version != 0 {
		return p, err
	}
	return l.policy, nil
}

func (l previewLedger) PoolSettings(ctx context.Context) ([]broker.PoolState, error) {
	out, err := l.Ledger.PoolSettings(ctx)
	if err != nil {
		return nil, err
	}
	stored := map[string]bool{}
	for _, ps := range out {
		stored[ps.Pool.Name] = true
	}
	for _, p := range l.pools {
		if !stored[p.Name] {
			out = append(out, broker.PoolState{Pool: p})
		}
	}
	return out, nil
}

func (l previewLedger) TenantIndex(ctx context.Context) (broker.TenantIndex, error) {
	idx, err := l.Ledger.TenantIndex(ctx)
	if err != nil {
		return idx, err
	}
	out := broker.TenantIndex{Tenants: map[string]broker.Tenant{}, Queues: map[string]string{}, Namespaces: map[string]string{}}
	for k, v := range idx.Tenants {
		out.Tenants[k] = v
	}
	for k, v := range idx.Queues {
		out.Queues[k] = v
	}
	for k, v := range idx.Namespaces {
		out.Namespaces[k] = v
	}
	for _, t := range l.tenants {
		// Seed skips a tenant whose name, queues or namespaces are taken
		// (the store refuses it as a conflict).
		if _, ok := out.Tenants[t.Name]; ok || taken(out.Queues, t.YARNQueues) || taken(out.Namespaces, t.Namespaces) {
			continue
		}
		out.Tenants[t.Name] = t
		for _, q := range t.YARNQueues {
			out.Queues[q] = t.Name
		}
		for _, n := range t.Namespaces {
			out.Namespaces[n] = t.Name
		}
	}
	return out, nil
}

func taken(owners map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := owners[k]; ok {
			return true
		}
	}
	return false
}
