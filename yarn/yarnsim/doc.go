// Package yarnsim is a simulated YARN ResourceManager that serves the RM REST
// API (/ws/v1/cluster/apps, /nodes, /scheduler, /info) over real HTTP in the
// JSON shapes Hadoop 3.3 and 3.5 produce, so the yarn package's real client
// runs against it in tests, benchmarks and gpubroker demo.
//
// It holds NodeManagers with GPUs, memory and vcores (optionally in a
// partition: a node label), a CapacityScheduler-like queue tree and
// applications whose container requests are allocated first-fit, higher
// app priority first and then in submit order, on running nodes of the
// request's partition with room for the GPUs, memory and vcores (an app
// may also have an ApplicationMaster container); what does not fit stays
// pending. Nodes can be
// added and removed (their containers are asked for again, as an AM would),
// and node states can be set (DECOMMISSIONING, ...). Containers are one
// model (sim.go): each has an id, app, node and request, and the RM's
// app-attempt listing (http.go), the NodeManagers' REST API
// (nodemanager_http.go) and the container report, signal and app-kill
// endpoints (containers.go) all serve and act on it. An AdminServer
// (rmadmin.go) serves the RM admin RPC over Hadoop IPC, reads the exclude
// file and runs graceful decommissions; NodeManagers stop when
// decommissioned and register again when restarted (nodemanager.go).
// The RM's lifecycle follows Hadoop 3.3.6 and 3.5.0: a container signal is
// taken only on a RUNNING (or UNHEALTHY) node and acts with the next
// NodeManager heartbeats (Config.Heartbeat), also once the node is
// DECOMMISSIONING; nothing is placed on a DECOMMISSIONING node, except
// that the 3.3 flavour gives asks pending at that moment the space a
// completed container frees there; a decommissioning node stays while an
// app that ran there runs, until its graceful timeout, which a graceful
// refresh may change (counted from the decommission's start).
// Faults (an HTML login page, truncated JSON, a 500,
// a standby RM without a redirect target) and a standby handler that
// redirects to the active RM test the client's error handling and HA.
//
// It scales to thousands of nodes and tens of thousands of apps: submitting
// an app schedules only that app, and a full scheduling pass skips work when
// no GPUs are free.
package yarnsim
