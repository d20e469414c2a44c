package io.gpubroker.hadoop;

import java.io.File;
import java.io.PrintStream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * HdfsLauncher runs a one-DataNode MiniDFSCluster on 127.0.0.1 for
 * gpubroker's HDFS checkpoint test. It prints "READY {json}" with the
 * NameNode's RPC address and runs until stdin closes.
 */
public final class HdfsLauncher {
  public static void main(String[] args) throws Exception {
    if (args.length != 2 || !args[0].equals("--dir")) {
      System.err.println("usage: HdfsLauncher --dir DIR");
      System.exit(2);
    }
    PrintStream out = System.out;
    System.setOut(System.err);
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(args[1]).getAbsolutePath());
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.setBoolean("dfs.permissions.enabled", false);
    MiniDFSCluster cluster;
    try {
      cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).build();
      cluster.waitActive();
    } catch (Throwable t) {
      t.printStackTrace();
      out.println("ERR start: " + String.valueOf(t.getMessage()).replace('\n', ' '));
      out.flush();
      Runtime.getRuntime().halt(1);
      return;
    }
    out.println("READY {\"namenode\":\"127.0.0.1:" + cluster.getNameNodePort() + "\"}");
    out.flush();
    while (System.in.read() >= 0) {
      // run until stdin closes
    }
    cluster.shutdown();
    Runtime.getRuntime().halt(0);
  }
}
