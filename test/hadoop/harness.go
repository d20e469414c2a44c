package hadoop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultVersions are the Hadoop releases the tests run against.
var DefaultVersions = []string{"3.3.6", "3.5.0"}

// Versions returns the Hadoop versions to test: GPUBROKER_HADOOP_VERSIONS
// (comma-separated) or DefaultVersions.
func Versions() []string {
	v := os.Getenv("GPUBROKER_HADOOP_VERSIONS")
	if v == "" {
		return DefaultVersions
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sourceDir is this package's directory, where install.sh lives.
func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install resolves Hadoop version and compiles the launcher (install.sh),
// returning the install directory with classpath.txt and classes/. A
// second call with nothing changed returns at once.
func Install(ctx context.Context, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(sourceDir(), "install.sh"), version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install hadoop %s: %w: %s", version, err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Config configures a cluster.
type Config struct {
	// Version is the Hadoop release, e.g. "3.3.6".
	Version string
	// Dir holds the cluster's files (NodeManager dirs, exclude file, log).
	Dir string
	// Nodes is the number of NodeManagers (default 3), on 127.0.0.11 and up.
	Nodes int
	// GPUsPerNode is every NodeManager's yarn.io/gpu (default 4).
	GPUsPerNode int
	// StartTimeout bounds the start (default 4 minutes).
	StartTimeout time.Duration
	// Label, when set, enables node labels with one exclusive partition of
	// that name, all of it usable by queue root.a (see Cluster.Label and
	// Cluster.SubmitLabelled).
	Label string
	// Cordon, when set, enables node labels (in a file-system store) with
	// every queue's accessible labels listed, so an exclusive label of that
	// name, created through the admin RPC, is one no queue may use.
	Cordon string
	// Recovery enables RM restart with work-preserving recovery from a
	// file-system state store (Cluster.RestartRM).
	Recovery bool
}

// Ready is what the launcher reports once the cluster is up.
type Ready struct {
	// RMWeb is the RM's web address, http://127.0.0.1:port.
	RMWeb string `json:"rm_web"`
	// RMAddress is the client RPC address; RMAdmin the admin RPC address
	// (refreshNodes, updateNodeResource).
	RMAddress string `json:"rm_address"`
	RMAdmin   string `json:"rm_admin"`
	// ExcludePath is the RM's yarn.resourcemanager.nodes.exclude-path.
	ExcludePath   string   `json:"exclude_path"`
	HadoopVersion string   `json:"hadoop_version"`
	GPUsPerNode   int      `json:"gpus_per_node"`
	Nodes         []string `json:"nodes"`
}

// Cluster is a running launcher JVM.
type Cluster struct {
	Ready Ready

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	logPath string
	mu      sync.Mutex // one command at a time
	done    chan struct{}
	waitErr error
}

// Start installs (if needed) and starts a cluster, returning when every
// NodeManager is registered with its GPUs.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.GPUsPerNode == 0 {
		cfg.GPUsPerNode = 4
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 4 * time.Minute
	}
	if cfg.Dir == "" {
		return nil, errors.New("hadoop cluster: Dir must be set")
	}
	home, err := Install(ctx, cfg.Version)
	if err != nil {
		return nil, err
	}
	cp, err := os.ReadFile(filepath.Join(home, "classpath.txt"))
	if err != nil {
		return nil, fmt.Errorf("read classpath of hadoop %s: %w", cfg.Version, err)
	}
	logPath := filepath.Join(cfg.Dir, "launcher.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create launcher log: %w", err)
	}
	args := []string{"-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"}
	for _, p := range []string{"java.lang", "java.util", "java.lang.reflect", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.util.concurrent", "sun.net.util", "java.security"} {
		args = append(args, "--add-opens=java.base/"+p+"=ALL-UNNAMED")
	}
	args = append(args, "-cp", filepath.Join(home, "classes")+string(os.PathListSeparator)+strings.TrimSpace(string(cp)),
		"io.gpubroker.hadoop.Launcher", "--dir", cfg.Dir,
		"--nodes", strconv.Itoa(cfg.Nodes), "--gpus", strconv.Itoa(cfg.GPUsPerNode))
	if cfg.Label != "" {
		args = append(args, "--label", cfg.Label)
	}
	if cfg.Cordon != "" {
		args = append(args, "--cordon", cfg.Cordon)
	}
	if cfg.Recovery {
		args = append(args, "--recovery")
	}
	// The JVM outlives no test: it stops when its stdin closes, and Close
	// kills it if it does not.
	cmd := exec.Command("java", args...)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start hadoop %s launcher: %w", cfg.Version, err)
	}
	c := &Cluster{cmd: cmd, stdin: stdin, lines: make(chan string, 16), logPath: logPath, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() {
		c.waitErr = cmd.Wait()
		logf.Close()
		close(c.done)
	}()

	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		if ok && strings.HasPrefix(line, "READY ") {
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "READY ")), &c.Ready); err != nil {
				c.Close()
				return nil, fmt.Errorf("hadoop %s launcher ready line %q: %w", cfg.Version, line, err)
			}
			return c, nil
		}
		c.Close()
		return nil, fmt.Errorf("hadoop %s launcher did not start: %q; log:\n%s", cfg.Version, line, c.LogTail(6000))
	case <-timer.C:
		c.Close()
		return nil, fmt.Errorf("hadoop %s launcher not ready after %s; log:\n%s", cfg.Version, cfg.StartTimeout, c.LogTail(6000))
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// command sends one command line and returns the reply after "OK ".
func (c *Cluster) command(ctx context.Context, line string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return "", fmt.Errorf("send %q to launcher: %w", line, err)
	}
	select {
	case reply, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("launcher exited during %q; log:\n%s", line, c.LogTail(4000))
		}
		if rest, ok := strings.CutPrefix(reply, "OK "); ok {
			return rest, nil
		}
		return "", fmt.Errorf("launcher: %s: %s", line, reply)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Submit starts an unmanaged-AM application in queue with app priority
// prio that asks for containers containers of gpus GPUs each (request
// priority 1), optionally preferring host. It returns the application id.
func (c *Cluster) Submit(ctx context.Context, queue string, prio, containers, gpus int, host string) (string, error) {
	line := fmt.Sprintf("submit %s %d %d %d %s", queue, prio, containers, gpus, host)
	return c.command(ctx, strings.TrimSpace(line))
}

// Finish unregisters the application's AM.
func (c *Cluster) Finish(ctx context.Context, appID string) error {
	_, err := c.command(ctx, "finish "+appID)
	return err
}

// LogTail returns the last n bytes of the launcher's log.
func (c *Cluster) LogTail(n int) string {
	b, _ := os.ReadFile(c.logPath)
	return tail(string(b), n)
}

// Close stops the cluster: "quit", then a kill if the JVM lingers.
func (c *Cluster) Close() error {
	c.mu.Lock()
	_, _ = io.WriteString(c.stdin, "quit\n")
	_ = c.stdin.Close()
	c.mu.Unlock()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
