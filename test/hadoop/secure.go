package hadoop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/test/kdc"
)

// SecureConfig configures a kerberized cluster (StartSecureRM,
// StartSecureNN) against a running test KDC.
type SecureConfig struct {
	// Version is the Hadoop release of the RM (the NameNode is HDFSVersion).
	Version string
	// Dir holds the cluster's files, keytabs and logs.
	Dir string
	// KDC issues the tickets; its realm is the cluster's.
	KDC *kdc.KDC
	// Keytab holds rm/localhost, nn/localhost and HTTP/localhost
	// (ServicePrincipals; see AddServicePrincipals).
	Keytab string
	// Protection is the RM's hadoop.rpc.protection (default authentication).
	Protection string
	// Admin is the one short name the RM admin protocol's service ACL and
	// yarn.admin.acl admit (default gpubroker).
	Admin string
	// Mkdirs are NameNode directories created with a modification time.
	Mkdirs map[string]time.Time
}

// ServicePrincipals are the cluster's own principals.
var ServicePrincipals = []string{"rm/localhost", "nn/localhost", "HTTP/localhost"}

// AddServicePrincipals creates ServicePrincipals in k and writes their
// keytab to path.
func AddServicePrincipals(ctx context.Context, k *kdc.KDC, path string) error {
	for _, p := range ServicePrincipals {
		if err := k.AddPrincipal(ctx, p); err != nil {
			return err
		}
	}
	return k.Keytab(ctx, path, ServicePrincipals...)
}

// SecureRM is a running kerberized ResourceManager (SecureRM.java):
// SPNEGO on RMWeb, SASL GSSAPI with service-level authorization on RMAdmin.
type SecureRM struct {
	RMWeb, RMAdmin, ExcludePath, HadoopVersion string
	proc                                       *javaProc
}

// SecureNN is a running kerberized NameNode without DataNodes (SecureNN.java).
type SecureNN struct {
	// NameNode is localhost:port, so that nn/_HOST is nn/localhost.
	NameNode string
	proc     *javaProc
}

// InstallSecure builds the secure launchers for version (install-secure.sh).
func InstallSecure(ctx context.Context, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(sourceDir(), "install-secure.sh"), version)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install secure launchers %s: %w: %s", version, err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// StartSecureRM starts a kerberized RM and returns once it serves.
func StartSecureRM(ctx context.Context, cfg SecureConfig) (*SecureRM, error) {
	if cfg.Protection == "" {
		cfg.Protection = "authentication"
	}
	if cfg.Admin == "" {
		cfg.Admin = "gpubroker"
	}
	home, err := InstallSecure(ctx, cfg.Version)
	if err != nil {
		return nil, err
	}
	// Service-level authorization reads hadoop-policy.xml from the
	// classpath: only Admin may call the admin protocol.
	confDir := filepath.Join(cfg.Dir, "conf")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	policy := `<?xml version="1.0"?><configuration><property><name>security.resourcemanager-administration.protocol.acl</name><value>` + cfg.Admin + `</value></property></configuration>`
	if err := os.WriteFile(filepath.Join(confDir, "hadoop-policy.xml"), []byte(policy), 0o644); err != nil {
		return nil, err
	}
	line, p, err := startJava(ctx, cfg, filepath.Join(home, "rm"), confDir, "io.gpubroker.hadoop.SecureRM",
		"--dir", cfg.Dir, "--keytab", cfg.Keytab, "--realm", cfg.KDC.Realm, "--protection", cfg.Protection, "--admin", cfg.Admin)
	if err != nil {
		return nil, err
	}
	var r struct {
		RMWeb         string `json:"rm_web"`
		RMAdmin       string `json:"rm_admin"`
		ExcludePath   string `json:"exclude_path"`
		HadoopVersion string `json:"hadoop_version"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		p.close()
		return nil, fmt.Errorf("secure rm: READY %q: %w", line, err)
	}
	return &SecureRM{RMWeb: r.RMWeb, RMAdmin: r.RMAdmin, ExcludePath: r.ExcludePath, HadoopVersion: r.HadoopVersion, proc: p}, nil
}

// LogTail returns the end of the RM's log.
func (s *SecureRM) LogTail(n int) string { return s.proc.logTail(n) }

// Close stops the RM.
func (s *SecureRM) Close() { s.proc.close() }

// StartSecureNN starts a kerberized NameNode with cfg.Mkdirs created.
func StartSecureNN(ctx context.Context, cfg SecureConfig) (*SecureNN, error) {
	home, err := InstallSecure(ctx, cfg.Version)
	if err != nil {
		return nil, err
	}
	args := []string{"--dir", filepath.Join(cfg.Dir, "dfs"), "--keytab", cfg.Keytab, "--realm", cfg.KDC.Realm}
	for p, at := range cfg.Mkdirs {
		args = append(args, "--mkdir", fmt.Sprintf("%s=%d", p, at.UnixMilli()))
	}
	line, p, err := startJava(ctx, cfg, filepath.Join(home, "nn"), "", "io.gpubroker.hadoop.SecureNN", args...)
	if err != nil {
		return nil, err
	}
	var r struct {
		NameNode string `json:"namenode"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		p.close()
		return nil, fmt.Errorf("secure nn: READY %q: %w", line, err)
	}
	return &SecureNN{NameNode: r.NameNode, proc: p}, nil
}

// LogTail returns the end of the NameNode's log.
func (s *SecureNN) LogTail(n int) string { return s.proc.logTail(n) }

// Close stops the NameNode.
func (s *SecureNN) Close() { s.proc.close() }

type javaProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string
	done    chan struct{}
}

func (p *javaProc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	return tail(string(b), n)
}

func (p *javaProc) close() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startJava runs main from home (classes/, classpath.txt) with the KDC's
// krb5.conf, and waits for its READY line; it returns the JSON after it.
func startJava(ctx context.Context, cfg SecureConfig, home, extraCP, main string, args ...string) (string, *javaProc, error) {
	cp, err := os.ReadFile(filepath.Join(home, "classpath.txt"))
	if err != nil {
		return "", nil, err
	}
	name := strings.ToLower(main[strings.LastIndexByte(main, '.')+1:])
	p := &javaProc{logPath: filepath.Join(cfg.Dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return "", nil, err
	}
	jargs := []string{"-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
		"-Djava.security.krb5.conf=" + cfg.KDC.Conf, "-Dsun.security.krb5.disableReferrals=true",
		"--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED", "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED"}
	for _, pkg := range []string{"java.lang", "java.util", "java.lang.reflect", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.util.concurrent", "sun.net.util", "java.security"} {
		jargs = append(jargs, "--add-opens=java.base/"+pkg+"=ALL-UNNAMED")
	}
	classpath := filepath.Join(home, "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(cp))
	if extraCP != "" {
		classpath = extraCP + string(os.PathListSeparator) + classpath
	}
	jargs = append(jargs, "-cp", classpath, main)
	p.cmd = exec.Command("java", append(jargs, args...)...)
	p.cmd.Env = append(os.Environ(), "KRB5_CONFIG="+cfg.KDC.Conf, "KRB5CCNAME=FILE:"+filepath.Join(cfg.Dir, name+".krb5cc"))
	p.cmd.Stderr = logf
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		logf.Close()
		return "", nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return "", nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start %s: %w", main, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.done)
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
	timer := time.NewTimer(4 * time.Minute)
	defer timer.Stop()
	select {
	case line := <-ready:
		if rest, ok := strings.CutPrefix(line, "READY "); ok {
			return rest, p, nil
		}
		p.close()
		return "", nil, fmt.Errorf("%s did not start: %q; log:\n%s", main, line, p.logTail(8000))
	case <-timer.C:
		p.close()
		return "", nil, fmt.Errorf("%s not ready after 4m; log:\n%s", main, p.logTail(8000))
	case <-ctx.Done():
		p.close()
		return "", nil, errors.Join(ctx.Err(), errors.New(p.logTail(4000)))
	}
}
