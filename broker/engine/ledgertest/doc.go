// Package ledgertest is the one contract of engine.Ledger: a conformance
// suite that every implementation runs (River's pattern, one suite per
// driver). The engine's tests run it against their in-memory ledger and the
// store's tests against store.Ledger on a real PostgreSQL, so the fake the
// tick loop is tested with keeps the store's semantics: first-seen times
// kept across observations, demand that left closed with its reason,
// sources kept apart, one open op per node and per pool scale-up, terminal
// ops never revived, phase-since moving only on a phase change.
//
// It imports only the standard library, package broker and package engine.
package ledgertest
