// Package load measures the read API under concurrent clients: by default
// 200 clients alternate GET /api/v1/capacity and GET /api/v1/demand against
// a real server on a seeded PostgreSQL, and the test reports p50/p90/p99
// latency, throughput and errors per route. It fails only on errors (a
// non-200 answer or a transport failure), never on time.
//
// In "go test ./..." it runs for 2 seconds. The full run of the issue:
//
//	go test ./test/load/ -run TestReadLoad -v -count=1 -load.duration=30s -load.clients=200
package load
