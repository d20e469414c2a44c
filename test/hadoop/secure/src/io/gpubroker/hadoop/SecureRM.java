package io.gpubroker.hadoop;

import java.io.File;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.VersionInfo;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;

/**
 * SecureRM runs a kerberized ResourceManager on localhost for gpubroker's
 * Kerberos tests: hadoop.security.authentication=kerberos with service-level
 * authorization (the admin protocol's ACL and yarn.admin.acl admit only the
 * short name given by --admin), the admin RPC with hadoop.rpc.protection
 * from --protection, and SPNEGO on the web endpoint
 * (hadoop.http.authentication.type=kerberos, AuthenticationFilterInitializer).
 * The principals rm/localhost and HTTP/localhost are in --keytab; the realm is
 * krb5.conf's default (-Djava.security.krb5.conf). It runs no NodeManager.
 * It prints "READY {json}" with rm_web, rm_admin and hadoop_version, and
 * runs until stdin closes.
 */
public final class SecureRM {
  public static void main(String[] args) throws Exception {
    String dir = null, keytab = null, realm = null, protection = "authentication", admin = "gpubroker";
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--dir": dir = args[i + 1]; break;
        case "--keytab": keytab = args[i + 1]; break;
        case "--realm": realm = args[i + 1]; break;
        case "--protection": protection = args[i + 1]; break;
        case "--admin": admin = args[i + 1]; break;
        default: throw new IllegalArgumentException("unknown flag " + args[i]);
      }
    }
    if (dir == null || keytab == null || realm == null) {
      System.err.println("usage: SecureRM --dir DIR --keytab KEYTAB --realm REALM [--protection P] [--admin USER]");
      System.exit(2);
    }
    PrintStream out = System.out;
    System.setOut(System.err);
    try {
      out.println("READY " + start(new File(dir), keytab, realm, protection, admin));
      out.flush();
    } catch (Throwable t) {
      t.printStackTrace();
      out.println("ERR start: " + String.valueOf(t).replace('\n', ' '));
      out.flush();
      Runtime.getRuntime().halt(1);
    }
    while (System.in.read() >= 0) {
      // run until stdin closes
    }
    Runtime.getRuntime().halt(0);
  }

  static String start(File dir, String keytab, String realm, String protection, String admin) throws Exception {
    Configuration conf = new YarnConfiguration();
    conf.set("hadoop.security.authentication", "kerberos");
    conf.setBoolean("hadoop.security.authorization", true);
    conf.set("hadoop.rpc.protection", protection);
    conf.set(YarnConfiguration.RM_PRINCIPAL, "rm/localhost@" + realm);
    conf.set(YarnConfiguration.RM_KEYTAB, keytab);
    conf.set(YarnConfiguration.YARN_ADMIN_ACL, admin);
    // The web endpoint: SPNEGO with HTTP/localhost, no anonymous access.
    conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer");
    conf.set("hadoop.http.authentication.type", "kerberos");
    conf.setBoolean("hadoop.http.authentication.simple.anonymous.allowed", false);
    conf.set("hadoop.http.authentication.kerberos.principal", "HTTP/localhost@" + realm);
    conf.set("hadoop.http.authentication.kerberos.keytab", keytab);
    conf.set(YarnConfiguration.RM_WEBAPP_SPNEGO_USER_NAME_KEY, "HTTP/localhost@" + realm);
    conf.set(YarnConfiguration.RM_WEBAPP_SPNEGO_KEYTAB_FILE_KEY, keytab);
    conf.set(YarnConfiguration.RM_HOSTNAME, "localhost");
    for (String k : new String[] {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
        YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS}) {
      conf.set(k, "localhost:0");
    }
    File exclude = new File(dir, "exclude");
    Files.write(exclude.toPath(), new byte[0]);
    conf.set(YarnConfiguration.RM_NODES_EXCLUDE_FILE_PATH, exclude.getAbsolutePath());
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, false);
    conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    conf.set(YarnConfiguration.RM_SCHEDULER,
        "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler");
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    UserGroupInformation.setConfiguration(conf);

    ResourceManager rm = null;
    for (int attempt = 1; ; attempt++) {
      conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, "localhost:" + freePort());
      ResourceManager r = new ResourceManager();
      try {
        r.init(new YarnConfiguration(conf));
        r.start();
        rm = r;
        break;
      } catch (RuntimeException e) {
        r.stop();
        if (attempt >= 5) {
          throw e;
        }
        System.err.println("RM start attempt " + attempt + " failed; retrying: " + e);
      }
    }
    Configuration bound = rm.getConfig();
    InetSocketAddress adminAddr = bound.getSocketAddr(YarnConfiguration.RM_ADMIN_ADDRESS,
        YarnConfiguration.DEFAULT_RM_ADMIN_ADDRESS, YarnConfiguration.DEFAULT_RM_ADMIN_PORT);
    return "{\"rm_web\":\"http://" + conf.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + "\""
        + ",\"rm_admin\":\"localhost:" + adminAddr.getPort() + "\""
        + ",\"exclude_path\":\"" + exclude.getAbsolutePath().replace("\\", "\\\\").replace("\"", "\\\"") + "\""
        + ",\"hadoop_version\":\"" + VersionInfo.getVersion() + "\"}";
  }

  static int freePort() throws Exception {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"))) {
      return s.getLocalPort();
    }
  }
}
