package io.gpubroker.hadoop;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.metrics2.lib.DefaultMetricsSystem;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.util.VersionInfo;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptReport;
import org.apache.hadoop.yarn.api.records.YarnApplicationAttemptState;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.server.nodemanager.Context;
import org.apache.hadoop.yarn.server.nodemanager.LocalDirsHandlerService;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.nodemanager.ResourceView;
import org.apache.hadoop.yarn.server.nodemanager.webapp.WebServer;
import org.apache.hadoop.yarn.server.security.ApplicationACLsManager;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/**
 * Launcher runs a small real YARN cluster in one JVM for gpubroker's tests: a
 * ResourceManager with the CapacityScheduler and DominantResourceCalculator,
 * the countable resource type yarn.io/gpu, queues root.a and root.b, and
 * several NodeManagers, each bound to its own loopback address (127.0.0.11,
 * 127.0.0.12, ...) so the RM sees distinct hostnames, each offering the same
 * fixed number of GPUs.
 *
 * <p>When everything is up it prints one line "READY {json}" on stdout (and
 * writes the JSON to --ready if given), then reads commands from stdin, one a
 * line, answering each with one line "OK ..." or "ERR ...":
 * <ul>
 *   <li>submit QUEUE APP_PRIORITY CONTAINERS GPUS_PER_CONTAINER [HOST] — an
 *       unmanaged-AM application that registers and asks for CONTAINERS
 *       containers of 1024 MB, 1 vcore and GPUS_PER_CONTAINER yarn.io/gpu at
 *       request priority 1 (optionally preferring HOST, so the RM also holds
 *       host and rack requests); the AM never launches what it is given and
 *       never heartbeats again, so what the scheduler cannot place stays
 *       pending; answers "OK application_..."</li>
 *   <li>finish APP_ID — unregisters the application (it leaves
 *       ACCEPTED/RUNNING)</li>
 *   <li>run QUEUE HOST GPUS SECONDS — an application whose one container
 *       (GPUS yarn.io/gpu) really runs "sleep SECONDS" on HOST; it finishes
 *       when the container completes; answers "OK APP_ID CONTAINER_ID"</li>
 *   <li>spread QUEUE SECONDS HOST:GPUS[:trap]... — an application with one
 *       real container per spec on its HOST, each running "sleep SECONDS"
 *       (a trap one ignores SIGTERM, so GRACEFUL_SHUTDOWN does not stop
 *       it); it finishes once all have completed; answers
 *       "OK APP_ID CONTAINER_ID..."</li>
 *   <li>restartable QUEUE SECONDS HOST:GPUS TAG — an application tagged
 *       TAG (e.g. gpubroker.io/checkpoint-dir=hdfs://...) with one real
 *       container on HOST running "sleep SECONDS", whose AM asks again,
 *       anywhere, when the container ends early and runs it there, as a
 *       checkpointing trainer's does; answers "OK APP_ID CONTAINER_ID"</li>
 *   <li>am QUEUE SECONDS — an application with a real managed AM (a JVM
 *       the RM places and a NodeManager launches, 0 GPUs) that registers,
 *       heartbeats and unregisters after SECONDS; answers
 *       "OK APP_ID AM_CONTAINER_ID HOST" once it has registered</li>
 *   <li>restart HOST — stops (if running) and starts HOST's NodeManager, as
 *       a service manager restarts one that a decommission stopped</li>
 *   <li>label HOST — puts HOST's NodeManager into the partition named by
 *       --label (only with --label)</li>
 *   <li>submit-labelled QUEUE APP_PRIORITY CONTAINERS GPUS_PER_CONTAINER — as
 *       submit, asking in the --label partition (nodeLabelExpression)</li>
 *   <li>rm-restart — stops the ResourceManager and starts a new one on the
 *       same ports (with --recovery: it recovers the applications from the
 *       file-system state store, work-preserving, and the node labels from
 *       the file-system label store), as an RM restart or a failover to a
 *       standby that shares the stores does; answers "OK MILLIS", the time
 *       from the stop until the new RM serves</li>
 *   <li>nm HOST — the NodeManager's service state and the containers it
 *       holds: "OK STATE CONTAINER_ID..."</li>
 *   <li>quit — stops everything and exits</li>
 * </ul>
 * Stdin closing also stops the cluster, so a dying test harness never leaks a
 * JVM.
 */
public final class Launcher {
  private static final String GPU = "yarn.io/gpu";

  private final File dir;
  private final int numNodes;
  private final int gpusPerNode;
  private final YarnConfiguration conf;
  private ResourceManager rm;
  private final List<NodeManager> nms = new ArrayList<>();
  private final List<String> hosts = new ArrayList<>();
  private YarnClient yarn;
  private final List<AppHandle> apps = new ArrayList<>();
  /** label is the exclusive partition root.a may use (--label), or null. */
  private String label;
  /**
   * cordon is an exclusive label no queue may access (--cordon), or null:
   * a node carrying it takes no new container.
   */
  private String cordon;
  /** recovery turns on RM restart with work-preserving recovery. */
  private boolean recovery;

  private static final class AppHandle {
    ApplicationId id;
    UserGroupInformation ugi;
    AMRMClient<ContainerRequest> amrm;
    final List<ContainerRequest> asks = new ArrayList<>();
  }

  /**
   * HeadlessNodeManager runs without its web UI. Guice's servlet pipeline is
   * JVM-wide, so every web app started after the RM's would take over the
   * RM's port and answer its /ws/v1 requests with 404s.
   */
  private static final class HeadlessNodeManager extends NodeManager {
    @Override
    protected WebServer createWebServer(Context ctx, ResourceView view,
        ApplicationACLsManager acls, LocalDirsHandlerService dirs) {
      return new WebServer(ctx, view, acls, dirs) {
        @Override
        protected void serviceStart() {
        }

        @Override
        protected void serviceStop() {
        }
      };
    }
  }

  private Launcher(File dir, int numNodes, int gpusPerNode) {
    this.dir = dir;
    this.numNodes = numNodes;
    this.gpusPerNode = gpusPerNode;
    this.conf = new YarnConfiguration();
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 3 && args[0].equals("sleep-am")) {
      sleepAM(args[1], Integer.parseInt(args[2]));
      System.exit(0);
    }
    String dirArg = null;
    String ready = null;
    int nodes = 3;
    int gpus = 4;
    String label = null;
    String cordon = null;
    boolean recovery = false;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--dir": dirArg = args[++i]; break;
        case "--ready": ready = args[++i]; break;
        case "--nodes": nodes = Integer.parseInt(args[++i]); break;
        case "--gpus": gpus = Integer.parseInt(args[++i]); break;
        case "--label": label = args[++i]; break;
        case "--cordon": cordon = args[++i]; break;
        case "--recovery": recovery = true; break;
        default:
          System.err.println("usage: Launcher --dir DIR [--ready FILE] [--nodes N] [--gpus G] [--label L] [--cordon C] [--recovery]");
          System.exit(2);
      }
    }
    if (dirArg == null) {
      System.err.println("usage: Launcher --dir DIR [--ready FILE] [--nodes N] [--gpus G]");
      System.exit(2);
    }
    // Stdout carries the protocol only; route everything else to stderr.
    PrintStream out = System.out;
    System.setOut(System.err);
    Launcher l = new Launcher(new File(dirArg), nodes, gpus);
    l.label = label;
    l.cordon = cordon;
    l.recovery = recovery;
    try {
      String readyJson = l.start();
      if (ready != null) {
        Files.write(new File(ready).toPath(), readyJson.getBytes(StandardCharsets.UTF_8));
      }
      out.println("READY " + readyJson);
      out.flush();
      l.serve(out);
    } catch (Throwable t) {
      t.printStackTrace();
      out.println("ERR start: " + oneLine(t));
      out.flush();
      Runtime.getRuntime().halt(1);
    }
    l.stop();
    Runtime.getRuntime().halt(0);
  }

  private static int freePort(String host) throws IOException {
    try (ServerSocket s = new ServerSocket()) {
      s.setReuseAddress(true);
      s.bind(new InetSocketAddress(InetAddress.getByName(host), 0));
      return s.getLocalPort();
    }
  }

  private String start() throws Exception {
    if (!dir.isDirectory() && !dir.mkdirs()) {
      throw new IOException("create " + dir);
    }
    DefaultMetricsSystem.setMiniClusterMode(true);

    conf.set(YarnConfiguration.RESOURCE_TYPES, GPU);
    ResourceUtils.resetResourceTypes(conf);

    // RPC servers bind port 0 and the RM writes the bound addresses back
    // into its configuration; the web app needs a port chosen up front,
    // which another process may take first, so the start is retried.
    String rmHost = "127.0.0.1";
    conf.set(YarnConfiguration.RM_HOSTNAME, rmHost);
    conf.set(YarnConfiguration.RM_ADDRESS, rmHost + ":0");
    conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, rmHost + ":0");
    conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, rmHost + ":0");
    conf.set(YarnConfiguration.RM_ADMIN_ADDRESS, rmHost + ":0");
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, recovery);
    if (recovery) {
      // RM restart / failover: the applications live in a file-system state
      // store a new RM recovers, keeping their containers (work-preserving);
      // NodeManagers and AMs find the new RM within a second.
      conf.set(YarnConfiguration.RM_STORE,
          "org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore");
      conf.set(YarnConfiguration.FS_RM_STATE_STORE_URI, new File(dir, "rm-state").toURI().toString());
      conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
      conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 500);
      conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, 600_000);
      conf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 1000);
    }
    conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    conf.setInt(YarnConfiguration.MAX_CLUSTER_LEVEL_APPLICATION_PRIORITY, 10);
    conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 250);
    // The test AMs heartbeat once; keep them and their unlaunched containers
    // alive for the life of a test run.
    conf.setLong(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS, 3_600_000L);
    conf.setLong(YarnConfiguration.RM_CONTAINER_ALLOC_EXPIRY_INTERVAL_MS, 3_600_000L);

    // Graceful decommission (a later issue) writes this file and calls
    // refreshNodes on the admin address.
    File exclude = new File(dir, "exclude.xml");
    Files.write(exclude.toPath(),
        "<?xml version=\"1.0\"?>\n<hosts>\n</hosts>\n".getBytes(StandardCharsets.UTF_8));
    conf.set(YarnConfiguration.RM_NODES_EXCLUDE_FILE_PATH, exclude.getAbsolutePath());
    // refreshNodes re-reads yarn-site.xml through the RM's configuration
    // provider rather than using the RM's configuration, so the exclude path
    // must be in a yarn-site.xml the provider serves, as on a real RM host:
    // here a file-system-based store in the cluster's directory.
    File confDir = new File(dir, "conf");
    if (!confDir.isDirectory() && !confDir.mkdirs()) {
      throw new IOException("create " + confDir);
    }
    Files.write(new File(confDir, "yarn-site.xml").toPath(), ("<?xml version=\"1.0\"?>\n<configuration>\n"
        + "<property><name>" + YarnConfiguration.RM_NODES_EXCLUDE_FILE_PATH + "</name><value>"
        + exclude.getAbsolutePath() + "</value></property>\n</configuration>\n").getBytes(StandardCharsets.UTF_8));
    conf.set(YarnConfiguration.RM_CONFIGURATION_PROVIDER_CLASS,
        "org.apache.hadoop.yarn.FileSystemBasedConfigurationProvider");
    conf.set(YarnConfiguration.FS_BASED_RM_CONF_STORE, confDir.toURI().toString());

    conf.set(YarnConfiguration.RM_SCHEDULER,
        "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler");
    conf.set("yarn.scheduler.capacity.resource-calculator",
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator");
    conf.set("yarn.scheduler.capacity.root.queues", "a,b");
    for (String q : new String[] {"a", "b"}) {
      String p = "yarn.scheduler.capacity.root." + q + ".";
      conf.set(p + "capacity", "50");
      conf.set(p + "maximum-capacity", "100");
      conf.set(p + "user-limit-factor", "100");
      conf.set(p + "maximum-am-resource-percent", "1.0");
    }
    if (label != null || cordon != null) {
      // Node labels in a file-system store, which a restarted RM reads back.
      conf.setBoolean(YarnConfiguration.NODE_LABELS_ENABLED, true);
      conf.set(YarnConfiguration.FS_NODE_LABELS_STORE_ROOT_DIR, new File(dir, "node-labels").toURI().toString());
      String c = "yarn.scheduler.capacity.root.";
      // Every queue lists what it may access, so the cordon label (an
      // exclusive label created by the test through the admin RPC) is
      // accessible to none: a queue without the setting inherits root's *.
      conf.set(c + "a.accessible-node-labels", label != null ? label : " ");
      conf.set(c + "b.accessible-node-labels", " ");
      if (label != null) {
        // One exclusive partition, all of it root.a's.
        conf.set(c + "accessible-node-labels." + label + ".capacity", "100");
        conf.set(c + "a.accessible-node-labels." + label + ".capacity", "100");
        conf.set(c + "a.accessible-node-labels." + label + ".maximum-capacity", "100");
      }
    }
    // Off-switch placement at once: the test apps name a preferred host.
    conf.setInt("yarn.scheduler.capacity.node-locality-delay", -1);

    conf.setInt(YarnConfiguration.NM_PMEM_MB, 16384);
    conf.setInt(YarnConfiguration.NM_VCORES, 16);
    conf.set(YarnConfiguration.NM_RESOURCES_PREFIX + GPU, Integer.toString(gpusPerNode));
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
    conf.setBoolean(YarnConfiguration.NM_RECOVERY_ENABLED, false);
    conf.set(YarnConfiguration.NM_AUX_SERVICES, "");

    for (int attempt = 1; ; attempt++) {
      conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, rmHost + ":" + freePort(rmHost));
      YarnConfiguration rmConf = new YarnConfiguration(conf);
      ResourceManager r = new ResourceManager();
      try {
        r.init(rmConf);
        r.start();
        rm = r;
        break;
      } catch (RuntimeException e) {
        r.stop();
        if (attempt >= 5 || !isBindProblem(e)) {
          throw e;
        }
        System.err.println("RM start attempt " + attempt + " lost a port race; retrying: " + e);
      }
    }
    if (label != null) {
      rm.getRMContext().getNodeLabelManager().addToCluserNodeLabelsWithDefaultExclusivity(
          Collections.singleton(label));
    }
    // Clients and NodeManagers use the addresses the RM bound; a restarted
    // RM binds them again.
    Configuration bound = rm.getConfig();
    for (String k : new String[] {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
        YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS}) {
      conf.set(k, bound.get(k));
    }

    for (int i = 0; i < numNodes; i++) {
      String host = "127.0.0." + (11 + i);
      nms.add(startNodeManager(host));
      hosts.add(host);
    }

    // Wait until every NodeManager is registered and RUNNING with its GPUs.
    long deadline = System.currentTimeMillis() + 120_000;
    while (true) {
      int running = 0;
      for (org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode n
          : rm.getRMContext().getRMNodes().values()) {
        if (n.getState() == org.apache.hadoop.yarn.api.records.NodeState.RUNNING
            && n.getTotalCapability().getResourceValue(GPU) == gpusPerNode) {
          running++;
        }
      }
      if (running == numNodes
          && rm.getResourceScheduler().getNumClusterNodes() == numNodes) {
        break;
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IOException("only " + running + " of " + numNodes
            + " NodeManagers registered with " + gpusPerNode + " GPUs");
      }
      Thread.sleep(100);
    }

    yarn = YarnClient.createYarnClient();
    yarn.init(conf);
    yarn.start();

    StringBuilder nodesJson = new StringBuilder();
    for (String h : hosts) {
      if (nodesJson.length() > 0) {
        nodesJson.append(',');
      }
      nodesJson.append('"').append(h).append('"');
    }
    return "{\"rm_web\":\"http://" + conf.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + "\""
        + ",\"rm_address\":\"" + conf.get(YarnConfiguration.RM_ADDRESS) + "\""
        + ",\"rm_admin\":\"" + conf.get(YarnConfiguration.RM_ADMIN_ADDRESS) + "\""
        + ",\"exclude_path\":" + jsonString(exclude.getAbsolutePath())
        + ",\"hadoop_version\":\"" + VersionInfo.getVersion() + "\""
        + ",\"gpus_per_node\":" + gpusPerNode
        + ",\"nodes\":[" + nodesJson + "]}";
  }

  private void serve(PrintStream out) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] f = line.trim().split("\\s+");
      if (f.length == 0 || f[0].isEmpty()) {
        continue;
      }
      String reply;
      try {
        switch (f[0]) {
          case "submit":
            if (f.length < 5 || f.length > 6) {
              throw new IllegalArgumentException(
                  "usage: submit QUEUE APP_PRIORITY CONTAINERS GPUS_PER_CONTAINER [HOST]");
            }
            reply = "OK " + submit(f[1], Integer.parseInt(f[2]), Integer.parseInt(f[3]),
                Integer.parseInt(f[4]), f.length == 6 ? f[5] : null);
            break;
          case "finish":
            if (f.length != 2) {
              throw new IllegalArgumentException("usage: finish APP_ID");
            }
            finish(f[1]);
            reply = "OK " + f[1];
            break;
          case "restart":
            if (f.length != 2) {
              throw new IllegalArgumentException("usage: restart HOST");
            }
            restart(f[1]);
            reply = "OK " + f[1];
            break;
          case "label":
            if (f.length != 2 || label == null) {
              throw new IllegalArgumentException("usage: label HOST (with --label)");
            }
            rm.getRMContext().getNodeLabelManager().replaceLabelsOnNode(Collections.singletonMap(
                org.apache.hadoop.yarn.api.records.NodeId.newInstance(f[1], 0), Collections.singleton(label)));
            reply = "OK " + f[1];
            break;
          case "submit-labelled":
            if (f.length != 5 || label == null) {
              throw new IllegalArgumentException(
                  "usage: submit-labelled QUEUE APP_PRIORITY CONTAINERS GPUS_PER_CONTAINER (with --label)");
            }
            reply = "OK " + submit(f[1], Integer.parseInt(f[2]), Integer.parseInt(f[3]),
                Integer.parseInt(f[4]), null, false, label);
            break;
          case "run":
            if (f.length != 5) {
              throw new IllegalArgumentException("usage: run QUEUE HOST GPUS SECONDS");
            }
            reply = "OK " + run(f[1], f[2], Integer.parseInt(f[3]), Integer.parseInt(f[4]));
            break;
          case "spread":
            if (f.length < 4) {
              throw new IllegalArgumentException("usage: spread QUEUE SECONDS HOST:GPUS[:trap]...");
            }
            reply = "OK " + spread(f[1], Integer.parseInt(f[2]), java.util.Arrays.copyOfRange(f, 3, f.length));
            break;
          case "restartable":
            if (f.length != 5) {
              throw new IllegalArgumentException("usage: restartable QUEUE SECONDS HOST:GPUS TAG");
            }
            reply = "OK " + restartable(f[1], Integer.parseInt(f[2]), f[3], f[4]);
            break;
          case "am":
            if (f.length != 3) {
              throw new IllegalArgumentException("usage: am QUEUE SECONDS");
            }
            reply = "OK " + managedAM(f[1], Integer.parseInt(f[2]));
            break;
          case "rm-restart":
            if (f.length != 1) {
              throw new IllegalArgumentException("usage: rm-restart");
            }
            reply = "OK " + restartRM();
            break;
          case "nm":
            if (f.length != 2) {
              throw new IllegalArgumentException("usage: nm HOST");
            }
            reply = "OK " + nmState(f[1]);
            break;
          case "quit":
            out.println("OK bye");
            out.flush();
            return;
          default:
            throw new IllegalArgumentException("unknown command " + f[0]);
        }
      } catch (Throwable t) {
        t.printStackTrace();
        reply = "ERR " + oneLine(t);
      }
      out.println(reply);
      out.flush();
    }
  }

  private String submit(String queue, int appPriority, int containers, int gpus, String host)
      throws Exception {
    return submit(queue, appPriority, containers, gpus, host, false, null);
  }

  private String submit(String queue, int appPriority, int containers, int gpus, String host,
      boolean strict, String labelExpression) throws Exception {
    return submit(queue, appPriority, containers, gpus, host, strict, labelExpression, Collections.emptySet());
  }

  private String submit(String queue, int appPriority, int containers, int gpus, String host,
      boolean strict, String labelExpression, java.util.Set<String> tags) throws Exception {
    YarnClientApplication app = yarn.createApplication();
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ApplicationId id = ctx.getApplicationId();
    ctx.setApplicationName("gpubroker-test-" + id.getId());
    ctx.setApplicationType("GPUBROKER-TEST");
    ctx.setApplicationTags(tags);
    ctx.setQueue(queue);
    ctx.setPriority(Priority.newInstance(appPriority));
    ctx.setUnmanagedAM(true);
    ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(
        Collections.emptyMap(), Collections.emptyMap(), Collections.emptyList(),
        Collections.emptyMap(), null, Collections.emptyMap()));
    ctx.setResource(Resource.newInstance(1024, 1));
    yarn.submitApplication(ctx);

    // An unmanaged AM may register once its attempt is LAUNCHED; only then
    // does the RM hand out the attempt's AMRM token.
    ApplicationAttemptId attempt = null;
    Token<AMRMTokenIdentifier> token = null;
    long deadline = System.currentTimeMillis() + 60_000;
    while (token == null) {
      ApplicationReport r = yarn.getApplicationReport(id);
      if (EnumSet.of(YarnApplicationState.FAILED, YarnApplicationState.KILLED,
          YarnApplicationState.FINISHED).contains(r.getYarnApplicationState())) {
        throw new IOException(id + " ended as " + r.getYarnApplicationState() + ": "
            + r.getDiagnostics());
      }
      attempt = r.getCurrentApplicationAttemptId();
      if (attempt != null) {
        ApplicationAttemptReport ar = yarn.getApplicationAttemptReport(attempt);
        if (ar.getYarnApplicationAttemptState() == YarnApplicationAttemptState.LAUNCHED) {
          token = yarn.getAMRMToken(id);
        }
      }
      if (token != null) {
        break;
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IOException(id + " attempt not launched in time: " + r.getYarnApplicationState());
      }
      Thread.sleep(50);
    }

    AppHandle h = new AppHandle();
    h.id = id;
    h.ugi = UserGroupInformation.createRemoteUser(attempt.toString());
    h.ugi.addToken(token);
    final String[] nodes = host == null ? null : new String[] {host};
    h.ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      AMRMClient<ContainerRequest> amrm = AMRMClient.createAMRMClient();
      amrm.init(conf);
      amrm.start();
      amrm.registerApplicationMaster("", 0, "");
      Resource cap = Resource.newInstance(1024, 1);
      cap.setResourceValue(GPU, gpus);
      for (int i = 0; i < containers; i++) {
        ContainerRequest req = new ContainerRequest(cap, nodes, null, Priority.newInstance(1), !strict,
            labelExpression);
        amrm.addContainerRequest(req);
        h.asks.add(req);
      }
      amrm.allocate(0.0f);
      h.amrm = amrm;
      return null;
    });
    synchronized (apps) {
      apps.add(h);
    }
    return id.toString();
  }

  /** startNodeManager starts (or restarts) the NodeManager of host. */
  private NodeManager startNodeManager(String host) throws Exception {
    File nmDir = new File(dir, "nm-" + host);
    for (int attempt = 1; ; attempt++) {
      YarnConfiguration nc = new YarnConfiguration(conf);
      nc.set(YarnConfiguration.NM_ADDRESS, host + ":0");
      nc.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, host + ":" + freePort(host));
      nc.set(YarnConfiguration.NM_WEBAPP_ADDRESS, host + ":0");
      nc.set(YarnConfiguration.NM_COLLECTOR_SERVICE_ADDRESS, host + ":0");
      nc.set(YarnConfiguration.NM_LOCAL_DIRS, new File(nmDir, "local").getAbsolutePath());
      nc.set(YarnConfiguration.NM_LOG_DIRS, new File(nmDir, "logs").getAbsolutePath());
      nc.set(YarnConfiguration.NM_REMOTE_APP_LOG_DIR, new File(nmDir, "remote-logs").getAbsolutePath());
      NodeManager nm = new HeadlessNodeManager();
      try {
        nm.init(nc);
        nm.start();
        return nm;
      } catch (RuntimeException e) {
        nm.stop();
        if (attempt >= 5 || !isBindProblem(e)) {
          throw e;
        }
        System.err.println("NodeManager " + host + " start attempt " + attempt + " lost a port race; retrying: " + e);
      }
    }
  }

  /**
   * restart stops the NodeManager of host if it still runs (a decommissioned
   * one has stopped itself) and starts a new one, as a service manager
   * restarting a NodeManager that exited would.
   */
  private void restart(String host) throws Exception {
    int i = hosts.indexOf(host);
    if (i < 0) {
      throw new IllegalArgumentException("unknown host " + host);
    }
    nms.get(i).stop();
    nms.set(i, startNodeManager(host));
  }

  /**
   * run submits an application whose one container of gpus GPUs runs
   * "sleep seconds" on host for real; the application finishes (its AM
   * unregisters) as soon as that container completes, however it ends.
   */
  private String run(String queue, String host, int gpus, int seconds) throws Exception {
    return spread(queue, seconds, new String[] {host + ":" + gpus});
  }

  /**
   * spread submits an application with one real container per spec
   * "HOST:GPUS" or "HOST:GPUS:trap", each placed on HOST (strict
   * locality, request priority 1, 2, ... in order) and running "sleep
   * seconds"; a trap container ignores SIGTERM (GRACEFUL_SHUTDOWN), as a
   * trainer that goes on checkpointing does, so only SIGKILL
   * (FORCEFUL_SHUTDOWN) stops it early. The application finishes (its
   * unmanaged AM unregisters) once all its containers have completed,
   * however they end. It answers "APP_ID CONTAINER_ID..." in spec order,
   * once every container runs.
   */
  private String spread(String queue, int seconds, String[] specs) throws Exception {
    return spread(queue, seconds, specs, Collections.emptySet(), false);
  }

  /**
   * restartable submits an application tagged tag with one real container
   * "HOST:GPUS" placed on HOST and running "sleep seconds", whose AM, as a
   * checkpointing trainer's does, asks again for a container of the same
   * size (anywhere: relaxed locality) whenever its container ends before
   * its time (a signal: a non-zero exit) and runs "sleep seconds" in the
   * new one; the application finishes once a container completes with
   * exit 0. It answers "APP_ID CONTAINER_ID" once the first runs.
   */
  private String restartable(String queue, int seconds, String spec, String tag) throws Exception {
    return spread(queue, seconds, new String[] {spec}, Collections.singleton(tag), true);
  }

  private String spread(String queue, int seconds, String[] specs, java.util.Set<String> tags,
      final boolean restart) throws Exception {
    final int n = specs.length;
    final String[] hostOf = new String[n];
    final int[] gpusOf = new int[n];
    final boolean[] trap = new boolean[n];
    for (int i = 0; i < n; i++) {
      String[] p = specs[i].split(":");
      if (p.length < 2 || p.length > 3 || p.length == 3 && !p[2].equals("trap")) {
        throw new IllegalArgumentException("container spec " + specs[i] + ": want HOST:GPUS or HOST:GPUS:trap");
      }
      hostOf[i] = p[0];
      gpusOf[i] = Integer.parseInt(p[1]);
      trap[i] = p.length == 3;
    }
    String appId = submit(queue, 0, 0, 0, null, true, null, tags);
    final AppHandle h;
    synchronized (apps) {
      h = apps.get(apps.size() - 1);
    }
    final org.apache.hadoop.yarn.api.records.Container[] got = new org.apache.hadoop.yarn.api.records.Container[n];
    final org.apache.hadoop.yarn.client.api.NMClient nm = org.apache.hadoop.yarn.client.api.NMClient.createNMClient();
    h.ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      for (int i = 0; i < n; i++) {
        Resource cap = Resource.newInstance(1024, 1);
        cap.setResourceValue(GPU, gpusOf[i]);
        ContainerRequest req = new ContainerRequest(cap, new String[] {hostOf[i]}, null,
            Priority.newInstance(1 + i), false, null);
        h.amrm.addContainerRequest(req);
        h.asks.add(req);
      }
      long deadline = System.currentTimeMillis() + 60_000;
      int placed = 0;
      while (placed < n) {
        for (org.apache.hadoop.yarn.api.records.Container c : h.amrm.allocate(0.1f).getAllocatedContainers()) {
          int i = c.getPriority().getPriority() - 1;
          if (i >= 0 && i < n && got[i] == null && c.getNodeId().getHost().equals(hostOf[i])) {
            got[i] = c;
            placed++;
          } else {
            h.amrm.releaseAssignedContainer(c.getId());
          }
        }
        if (placed < n && System.currentTimeMillis() > deadline) {
          throw new IOException(appId + ": " + placed + " of " + n + " containers placed in time");
        }
        Thread.sleep(100);
      }
      // The asks are served: drop them, or the AMRM client sends them
      // again when it resyncs with a restarted RM and gets more containers.
      for (ContainerRequest req : h.asks) {
        h.amrm.removeContainerRequest(req);
      }
      nm.init(conf);
      nm.start();
      for (int i = 0; i < n; i++) {
        String cmd = (trap[i] ? "trap '' TERM; " : "") + "sleep " + seconds;
        nm.startContainer(got[i], ContainerLaunchContext.newInstance(
            Collections.emptyMap(), Collections.emptyMap(), Collections.singletonList(cmd),
            Collections.emptyMap(), null, Collections.emptyMap()));
      }
      // Answer once the NodeManagers run them (and report them to the RM).
      long runDeadline = System.currentTimeMillis() + 60_000;
      for (int i = 0; i < n; i++) {
        while (nm.getContainerStatus(got[i].getId(), got[i].getNodeId()).getState()
            != org.apache.hadoop.yarn.api.records.ContainerState.RUNNING) {
          if (System.currentTimeMillis() > runDeadline) {
            throw new IOException(got[i].getId() + " not running in time");
          }
          Thread.sleep(100);
        }
      }
      Thread.sleep(1000); // a few NodeManager heartbeats (250 ms)
      return null;
    });
    Thread t = new Thread(() -> {
      try {
        h.ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
          java.util.Set<org.apache.hadoop.yarn.api.records.ContainerId> left = new java.util.HashSet<>();
          for (org.apache.hadoop.yarn.api.records.Container c : got) {
            left.add(c.getId());
          }
          ContainerRequest again = null;
          while (!left.isEmpty() || again != null) {
            org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse resp = h.amrm.allocate(0.5f);
            for (org.apache.hadoop.yarn.api.records.ContainerStatus st : resp.getCompletedContainersStatuses()) {
              if (left.remove(st.getContainerId()) && restart && st.getExitStatus() != 0) {
                // Stopped before its time: ask again, anywhere, as a
                // trainer's AM does to resume from its checkpoint.
                Resource cap = Resource.newInstance(1024, 1);
                cap.setResourceValue(GPU, gpusOf[0]);
                again = new ContainerRequest(cap, null, null, Priority.newInstance(1), true, null);
                h.amrm.addContainerRequest(again);
                System.err.println(appId + ": container " + st.getContainerId() + " ended with exit "
                    + st.getExitStatus() + "; asking again");
              }
            }
            for (org.apache.hadoop.yarn.api.records.Container c : resp.getAllocatedContainers()) {
              if (again == null) {
                h.amrm.releaseAssignedContainer(c.getId());
                continue;
              }
              h.amrm.removeContainerRequest(again);
              again = null;
              left.add(c.getId());
              nm.startContainer(c, ContainerLaunchContext.newInstance(
                  Collections.emptyMap(), Collections.emptyMap(), Collections.singletonList("sleep " + seconds),
                  Collections.emptyMap(), null, Collections.emptyMap()));
              System.err.println(appId + ": restarted in " + c.getId() + " on " + c.getNodeId().getHost());
            }
            if (!left.isEmpty() || again != null) {
              Thread.sleep(250);
            }
          }
          h.amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "done", "");
          h.amrm.stop();
          synchronized (apps) {
            apps.remove(h);
          }
          return null;
        });
      } catch (Throwable e) {
        e.printStackTrace();
      }
    }, "am-" + appId);
    t.setDaemon(true);
    t.start();
    StringBuilder b = new StringBuilder(appId);
    for (org.apache.hadoop.yarn.api.records.Container c : got) {
      b.append(' ').append(c.getId());
    }
    return b.toString();
  }

  /**
   * managedAM submits an application whose ApplicationMaster is a real
   * managed AM: the RM places its container (1024 MB, 1 vcore, no GPUs)
   * on a node of its choosing and a NodeManager launches it, a JVM
   * (this class, "sleep-am") that registers with the RM, heartbeats each
   * second, asks for nothing, and unregisters after seconds. It answers
   * "APP_ID AM_CONTAINER_ID HOST" once the AM has registered.
   */
  private String managedAM(String queue, int seconds) throws Exception {
    YarnClientApplication app = yarn.createApplication();
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ApplicationId id = ctx.getApplicationId();
    ctx.setApplicationName("gpubroker-test-am-" + id.getId());
    ctx.setApplicationType("GPUBROKER-TEST");
    ctx.setQueue(queue);
    ctx.setMaxAppAttempts(1);
    String java = System.getProperty("java.home") + "/bin/java";
    String cmd = java + " @" + amArgs().getAbsolutePath() + " io.gpubroker.hadoop.Launcher sleep-am "
        + conf.get(YarnConfiguration.RM_SCHEDULER_ADDRESS) + " " + seconds
        + " 1>" + org.apache.hadoop.yarn.api.ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stdout"
        + " 2>" + org.apache.hadoop.yarn.api.ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stderr";
    ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(
        Collections.emptyMap(), Collections.emptyMap(), Collections.singletonList(cmd),
        Collections.emptyMap(), null, Collections.emptyMap()));
    ctx.setResource(Resource.newInstance(1024, 1));
    yarn.submitApplication(ctx);
    long deadline = System.currentTimeMillis() + 90_000;
    while (true) {
      ApplicationReport r = yarn.getApplicationReport(id);
      YarnApplicationState s = r.getYarnApplicationState();
      if (EnumSet.of(YarnApplicationState.FAILED, YarnApplicationState.KILLED,
          YarnApplicationState.FINISHED).contains(s)) {
        throw new IOException(id + " ended as " + s + ": " + r.getDiagnostics());
      }
      if (s == YarnApplicationState.RUNNING) {
        org.apache.hadoop.yarn.api.records.Container am = rm.getRMContext().getRMApps().get(id)
            .getCurrentAppAttempt().getMasterContainer();
        return id + " " + am.getId() + " " + am.getNodeId().getHost();
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IOException(id + " AM not registered in time: " + s + " " + r.getDiagnostics());
      }
      Thread.sleep(100);
    }
  }

  /**
   * amArgs writes (once) a java @argfile with this JVM's options and class
   * path, for the managed AMs' JVMs; a class path passed on the command
   * line or in the environment would pass the kernel's 128 KiB limit on
   * one string.
   */
  private synchronized File amArgs() throws IOException {
    File f = new File(dir, "am-java.args");
    if (f.isFile()) {
      return f;
    }
    StringBuilder b = new StringBuilder("-Xmx128m\n");
    for (String a : java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()) {
      if (!a.startsWith("-Xmx")) {
        b.append('"').append(a.replace("\\", "\\\\")).append("\"\n");
      }
    }
    b.append("-cp\n\"").append(System.getProperty("java.class.path").replace("\\", "\\\\")).append("\"\n");
    Files.write(f.toPath(), b.toString().getBytes(StandardCharsets.UTF_8));
    return f;
  }

  /**
   * sleepAM is the managed AM's main: register with the RM's scheduler at
   * sched with the AMRM token the NodeManager handed the container,
   * heartbeat each second for seconds, unregister.
   */
  private static void sleepAM(String sched, int seconds) throws Exception {
    YarnConfiguration c = new YarnConfiguration();
    c.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, sched);
    AMRMClient<ContainerRequest> amrm = AMRMClient.createAMRMClient();
    amrm.init(c);
    amrm.start();
    amrm.registerApplicationMaster("", 0, "");
    long end = System.currentTimeMillis() + seconds * 1000L;
    while (System.currentTimeMillis() < end) {
      amrm.allocate(0.5f);
      Thread.sleep(1000);
    }
    amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "done", "");
    amrm.stop();
  }

  /**
   * restartRM stops the ResourceManager and starts a new one with the same
   * configuration and ports, as a restart (or a failover to a standby that
   * shares the state and label stores) does, and returns the milliseconds
   * from the stop until the new one serves.
   */
  private long restartRM() throws Exception {
    long t0 = System.currentTimeMillis();
    rm.stop();
    YarnConfiguration rmConf = new YarnConfiguration(conf);
    for (int attempt = 1; ; attempt++) {
      ResourceManager r = new ResourceManager();
      try {
        r.init(new YarnConfiguration(rmConf));
        r.start();
        rm = r;
        break;
      } catch (RuntimeException e) {
        r.stop();
        if (attempt >= 40 || !isBindProblem(e)) {
          throw e;
        }
        Thread.sleep(250); // the old RM's ports are still being released
      }
    }
    return System.currentTimeMillis() - t0;
  }

  /** nmState reports host's NodeManager service state and its containers. */
  private String nmState(String host) {
    int i = hosts.indexOf(host);
    if (i < 0) {
      throw new IllegalArgumentException("unknown host " + host);
    }
    NodeManager nm = nms.get(i);
    StringBuilder b = new StringBuilder(nm.getServiceState().toString());
    if (nm.getNMContext() != null) {
      for (org.apache.hadoop.yarn.api.records.ContainerId c : nm.getNMContext().getContainers().keySet()) {
        org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container ct =
            nm.getNMContext().getContainers().get(c);
        b.append(' ').append(c).append('=').append(ct == null ? "?" : ct.getContainerState());
      }
    }
    return b.toString();
  }

  private void finish(String appId) throws Exception {
    AppHandle found = null;
    synchronized (apps) {
      for (AppHandle h : apps) {
        if (h.id.toString().equals(appId)) {
          found = h;
        }
      }
      if (found != null) {
        apps.remove(found);
      }
    }
    if (found == null) {
      throw new IllegalArgumentException("unknown application " + appId);
    }
    final AppHandle h = found;
    h.ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      h.amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "done", "");
      h.amrm.stop();
      return null;
    });
  }

  private void stop() {
    try {
      if (yarn != null) {
        yarn.stop();
      }
      for (NodeManager nm : nms) {
        nm.stop();
      }
      if (rm != null) {
        rm.stop();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
  }

  private static boolean isBindProblem(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof java.net.BindException
          || String.valueOf(c.getMessage()).contains("Address already in use")) {
        return true;
      }
    }
    return false;
  }

  private static String oneLine(Throwable t) {
    String m = t.getClass().getSimpleName() + ": " + t.getMessage();
    return m.replace('\n', ' ').replace('\r', ' ');
  }

  private static String jsonString(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
