package io.gpubroker.hadoop;

import java.io.File;
import java.io.PrintStream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * SecureNN runs a kerberized NameNode (a MiniDFSCluster without DataNodes:
 * the checkpoint reader only lists) on localhost for gpubroker's Kerberos
 * tests, with nn/localhost and HTTP/localhost from --keytab. Each
 * --mkdir PATH=MTIME_MS creates a directory and sets its modification time. It prints "READY {json}" with the
 * NameNode's RPC address and runs until stdin closes.
 */
public final class SecureNN {
  public static void main(String[] args) throws Exception {
    String dir = null, keytab = null, realm = null;
    java.util.List<String> mkdirs = new java.util.ArrayList<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--dir": dir = args[i + 1]; break;
        case "--keytab": keytab = args[i + 1]; break;
        case "--realm": realm = args[i + 1]; break;
        case "--mkdir": mkdirs.add(args[i + 1]); break;
        default: throw new IllegalArgumentException("unknown flag " + args[i]);
      }
    }
    if (dir == null || keytab == null || realm == null) {
      System.err.println("usage: SecureNN --dir DIR --keytab KEYTAB --realm REALM [--mkdir PATH=MTIME_MS]...");
      System.exit(2);
    }
    PrintStream out = System.out;
    System.setOut(System.err);
    MiniDFSCluster cluster;
    try {
      Configuration conf = new Configuration();
      conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(dir).getAbsolutePath());
      conf.set("hadoop.security.authentication", "kerberos");
      conf.setBoolean("hadoop.security.authorization", true);
      conf.set("dfs.namenode.kerberos.principal", "nn/localhost@" + realm);
      conf.set("dfs.namenode.keytab.file", keytab);
      conf.set("dfs.web.authentication.kerberos.principal", "HTTP/localhost@" + realm);
      conf.set("dfs.web.authentication.kerberos.keytab", keytab);
      conf.setBoolean("dfs.block.access.token.enable", true);
      conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
      conf.set("dfs.namenode.http-address", "127.0.0.1:0");
      conf.setBoolean("dfs.permissions.enabled", true);
      UserGroupInformation.setConfiguration(conf);
      cluster = new MiniDFSCluster.Builder(conf).numDataNodes(0).build();
      cluster.waitActive();
      FileSystem fs = cluster.getFileSystem();
      // All directories first, then the times: a mkdirs below a
      // directory changes its modification time.
      for (String m : mkdirs) {
        fs.mkdirs(new Path(m.substring(0, m.lastIndexOf('='))));
      }
      for (String m : mkdirs) {
        int eq = m.lastIndexOf('=');
        fs.setTimes(new Path(m.substring(0, eq)), Long.parseLong(m.substring(eq + 1)), -1);
      }
    } catch (Throwable t) {
      t.printStackTrace();
      out.println("ERR start: " + String.valueOf(t).replace('\n', ' '));
      out.flush();
      Runtime.getRuntime().halt(1);
      return;
    }
    out.println("READY {\"namenode\":\"localhost:" + cluster.getNameNodePort() + "\"}");
    out.flush();
    while (System.in.read() >= 0) {
      // run until stdin closes
    }
    Runtime.getRuntime().halt(0);
  }
}
