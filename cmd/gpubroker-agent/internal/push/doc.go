// Package push delivers node reports to the broker's API:
// POST /api/v1/nodes/{node}/report with a JSON broker.NodeReport and the
// agent's bearer token.
//
// Reports are small and the latest wins, so nothing is queued: every
// attempt, first or retry, sends a fresh sample. When the broker is away
// (connection refused, 5xx, 429) the pusher backs off exponentially with
// jitter, so a fleet of agents does not hammer a broker that is coming back;
// after a success it waits the normal interval. A rejected token (401/403)
// also backs off, and the token file is read again on every attempt, so a
// rotated Secret takes effect without a restart. A report the broker
// refuses as invalid (other 4xx) is logged with the broker's message and
// the next sample follows at the normal interval.
package push
