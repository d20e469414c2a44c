// Package hadoop runs a real Hadoop YARN cluster for gpubroker's tests: a
// ResourceManager (CapacityScheduler, DominantResourceCalculator, the
// yarn.io/gpu resource type, queues root.a and root.b) and several
// NodeManagers on distinct loopback addresses (127.0.0.11, 127.0.0.12, ...),
// all in one JVM started from src/main/java/io/gpubroker/hadoop/Launcher.java.
//
// Install resolves the Hadoop jars from Maven Central into
// ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker} (install.sh; idempotent) and
// compiles the launcher; Start runs it and returns once every NodeManager
// is registered. Tests then submit unmanaged-AM applications whose GPU
// containers stay pending when the cluster has no room for them, run
// containers that really run (Cluster.Run), restart NodeManagers a
// decommission stopped (Cluster.Restart) and label nodes into a partition
// (Config.Label). StartHDFS runs a one-DataNode MiniDFSCluster for the
// checkpoint reader.
//
// The versions tested are listed in GPUBROKER_HADOOP_VERSIONS (default
// "3.3.6,3.5.0"). Test code only: product code never imports this package.
package hadoop
