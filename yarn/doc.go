// Package yarn is gpubroker's adapter for Hadoop YARN:
//
//   - a client for the ResourceManager REST API (/ws/v1/cluster) that
//     observes pending GPU demand, nodes with their partitions (node
//     labels) and health, the queue tree, and the running containers of
//     GPU apps (app attempts and their containers; the NodeManagers' REST
//     API where the RM lacks that endpoint);
//   - Side, the mapping from that observation to broker.Demand and
//     broker.Node, with each container as running work of its queue's
//     tenant (checkpoint ages from HDFS, checkpoint.go);
//   - Decommissioner, engine.SideActions for YARN: graceful decommission
//     and recommission through the exclude file and refreshNodes over the
//     RM admin protocol (yarn/rmadmin), and container eviction through the
//     signal API (preempt.go).
//
// The client is written against what real ResourceManagers answer (Hadoop
// 3.3.x and 3.4/3.5; see testdata/ for captured responses), quirks
// included: empty lists rendered as null or {}, lists of one rendered as a
// bare object, int64 limits such as 9223372036854775807, JAXB maps rendered
// as repeated "entry" objects, and fields this package does not know.
//
// A failed observation is an error that names the RM and wraps
// broker.ErrStale; the client never returns an empty observation in its place,
// so "the RM is down" can never look like "there is no demand".
//
// Authentication is Hadoop's "simple" scheme (the user.name query
// parameter) unless the cluster is kerberized: then a Kerberos login
// (kerberos.go, github.com/jcmturner/gokrb5/v8, from a keytab or a ticket
// cache) is shared by SPNEGOTransport (spnego.go: Config.Transport, with
// User "-"), by the RM admin client (rmadmin.Config.Kerberos) and by the
// HDFS checkpoint reader (CheckpointConfig.Kerberos).
package yarn
