package hadoop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// HDFSVersion is the Hadoop release of the HDFS test cluster.
const HDFSVersion = "3.3.6"

// HDFS is a running one-DataNode MiniDFSCluster (HdfsLauncher).
type HDFS struct {
	// NameNode is the NameNode's RPC address, 127.0.0.1:port.
	NameNode string

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string
	done    chan struct{}
}

// StartHDFS installs (install-hdfs.sh, cached) and starts a MiniDFSCluster
// with its files in dir, returning once the NameNode serves.
func StartHDFS(ctx context.Context, dir string) (*HDFS, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(sourceDir(), "install-hdfs.sh"), HDFSVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("install hdfs %s: %w: %s", HDFSVersion, err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	home := lines[len(lines)-1]
	cp, err := os.ReadFile(filepath.Join(home, "classpath.txt"))
	if err != nil {
		return nil, fmt.Errorf("read hdfs classpath: %w", err)
	}
	h := &HDFS{logPath: filepath.Join(dir, "hdfs.log"), done: make(chan struct{})}
	logf, err := os.Create(h.logPath)
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command("java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
		"-cp", filepath.Join(home, "classes")+string(os.PathListSeparator)+strings.TrimSpace(string(cp)),
		"io.gpubroker.hadoop.HdfsLauncher", "--dir", filepath.Join(dir, "dfs"))
	h.cmd.Stderr = logf
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start hdfs launcher: %w", err)
	}
	go func() {
		_ = h.cmd.Wait()
		logf.Close()
		close(h.done)
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			ready <- sc.Text()
		}
		close(ready)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timer := time.NewTimer(3 * time.Minute)
	defer timer.Stop()
	select {
	case line := <-ready:
		var r struct {
			NameNode string `json:"namenode"`
		}
		if rest, ok := strings.CutPrefix(line, "READY "); ok && json.Unmarshal([]byte(rest), &r) == nil {
			h.NameNode = r.NameNode
			return h, nil
		}
		h.Close()
		return nil, fmt.Errorf("hdfs launcher did not start: %q; log:\n%s", line, h.LogTail(6000))
	case <-timer.C:
		h.Close()
		return nil, fmt.Errorf("hdfs launcher not ready after 3m; log:\n%s", h.LogTail(6000))
	case <-ctx.Done():
		h.Close()
		return nil, ctx.Err()
	}
}

// LogTail returns the last n bytes of the launcher's log.
func (h *HDFS) LogTail(n int) string {
	b, _ := os.ReadFile(h.logPath)
	return tail(string(b), n)
}

// Close stops the cluster: stdin closes, then a kill if the JVM lingers.
func (h *HDFS) Close() error {
	_ = h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
	return nil
}
