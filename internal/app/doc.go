// Package app is the one assembly of gpubroker: it puts the broker together
// from a validated configuration and injectable endpoints (benbjohnson/wtf's
// Main pattern: Open, Run, Close). "gpubroker serve", "plan" and "demo", the
// end-to-end world and the tick benchmark all build the broker through Open,
// so a fix in the wiring reaches every one of them; they differ only in what
// they start around it (a private PostgreSQL, simulators, a workload).
package app
