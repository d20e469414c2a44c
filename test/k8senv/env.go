package k8senv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Version is the Kubernetes release the harness runs.
const Version = "v1.36.3"

// Options configure Start. The zero value is usable.
type Options struct {
	// Dir holds certificates, the kubeconfig, etcd data and process logs;
	// default a fresh temporary directory, removed by Stop.
	Dir string
	// Logf receives progress lines (e.g. testing.T.Logf); default silent.
	Logf func(format string, args ...any)
	// StartTimeout bounds building (on a cold cache, minutes) plus startup.
	// Default 30 minutes.
	StartTimeout time.Duration
}

// Env is a running control plane.
type Env struct {
	// Kubeconfig is the path of an admin kubeconfig for the cluster.
	Kubeconfig string
	// RESTConfig and Client talk to the API server as cluster admin.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Dir holds the cluster's files and the processes' logs (*.log).
	Dir string

	ownDir bool
	procs  []*process
	logf   func(string, ...any)
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// CacheDir returns ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}.
func CacheDir() (string, error) {
	if d := os.Getenv("GPUBROKER_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "gpubroker"), nil
}

var binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}

// EnsureBinaries returns the directory of the cached binaries and the KWOK
// stages file, running install.sh first when anything is missing.
func EnsureBinaries(ctx context.Context, logf func(string, ...any)) (binDir, stages string, err error) {
	cache, err := CacheDir()
	if err != nil {
		return "", "", err
	}
	root := filepath.Join(cache, "k8s-"+Version)
	binDir, stages = filepath.Join(root, "bin"), filepath.Join(root, "stages.yaml")
	missing := false
	for _, b := range append(binaries, "../stages.yaml") {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = true
		}
	}
	if !missing {
		return binDir, stages, nil
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", "", errors.New("locate install.sh: no caller information")
	}
	script := filepath.Join(filepath.Dir(self), "install.sh")
	logf("k8senv: binaries missing in %s; running %s (a cold build takes several minutes)", binDir, script)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "GPUBROKER_CACHE="+cache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("run %s: %w\n%s", script, err, out)
	}
	logf("k8senv: install.sh finished in %s", time.Since(start).Round(time.Second))
	return binDir, stages, nil
}

func freePorts(n int) ([]int, error) {
	// Hold all listeners until every port is chosen, so they differ.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Start builds (if needed) and starts a control plane and waits until the
// API server is ready, the scheduler and controller manager are healthy
// and the default namespace exists. Call Stop when done, also on error
// paths: Start stops what it started if it fails.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	begin := time.Now()
	binDir, stages, err := EnsureBinaries(ctx, opts.Logf)
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: opts.Dir, logf: opts.Logf}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "k8senv-"); err != nil {
			return nil, fmt.Errorf("create cluster directory: %w", err)
		}
		e.ownDir = true
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (logs in %s)", err, e.Dir)
			e.stopProcs()
		}
	}()
	if stages, err = writeStages(stages, e.Dir); err != nil {
		return nil, err
	}
	p, err := writePKI(e.Dir)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, schedPort, cmPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	bin := func(name string) string { return filepath.Join(binDir, name) }

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if err := e.spawn("etcd", bin("etcd"),
		"--name=k8senv", "--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=k8senv="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := e.waitHTTP(ctx, "etcd", etcdURL+"/health", nil); err != nil {
		return nil, err
	}

	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := e.spawn("kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		// Pods of fresh test namespaces must not wait for the default
		// service account to appear.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--cert-dir="+filepath.Join(e.Dir, "apiserver-certs"),
	); err != nil {
		return nil, err
	}

	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := writeKubeconfig(e.Kubeconfig, apiURL, p); err != nil {
		return nil, err
	}
	e.RESTConfig, err = clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", e.Kubeconfig, err)
	}
	e.RESTConfig.QPS, e.RESTConfig.Burst = 200, 400
	e.Client, err = kubernetes.NewForConfig(e.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	tr, err := rest.TransportFor(e.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("create transport: %w", err)
	}
	if err := e.waitHTTP(ctx, "kube-apiserver", apiURL+"/readyz", &http.Client{Transport: tr, Timeout: 5 * time.Second}); err != nil {
		return nil, err
	}

	kc := "--kubeconfig=" + e.Kubeconfig
	if err := e.spawn("kube-scheduler", bin("kube-scheduler"), kc,
		"--authentication-kubeconfig="+e.Kubeconfig, "--authorization-kubeconfig="+e.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
	); err != nil {
		return nil, err
	}
	if err := e.spawn("kube-controller-manager", bin("kube-controller-manager"), kc,
		"--authentication-kubeconfig="+e.Kubeconfig, "--authorization-kubeconfig="+e.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(cmPort),
		"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caCert,
		// Lift node.kubernetes.io/not-ready quickly once KWOK reports Ready.
		"--node-monitor-period=1s",
		"--concurrent-gc-syncs=5",
		// IMPORTANT: the default client rate (20 qps, burst 30) throttles
		// the node lifecycle controller, which lifts the not-ready taint
		// with a GET and a PATCH per node: after 1,000 nodes registered at
		// once, a node that joined a minute later stayed unschedulable for
		// 18-29 s, Ready all along (items waited 107 s on average in its
		// queue), and the broker's in-flight nodes ran past their
		// provision time. A real control plane of that size runs with a
		// higher rate too.
		"--kube-api-qps=500", "--kube-api-burst=1000",
	); err != nil {
		return nil, err
	}
	if err := e.spawn("kwok", bin("kwok"), kc, "--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KWOKAnnotation+"=fake",
		"--node-lease-duration-seconds=40",
		"--cidr=10.0.1.0/24", "--node-ip=127.0.0.1",
	); err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := e.waitHTTP(ctx, "kube-scheduler", "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", insecure); err != nil {
		return nil, err
	}
	if err := e.waitHTTP(ctx, "kube-controller-manager", "https://127.0.0.1:"+strconv.Itoa(cmPort)+"/healthz", insecure); err != nil {
		return nil, err
	}
	opts.Logf("k8senv: control plane %s ready at %s in %s (files in %s)", Version, apiURL, time.Since(begin).Round(time.Millisecond), e.Dir)
	return e, nil
}

func writeKubeconfig(path, server string, p pki) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k8senv
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: k8senv
  context:
    cluster: k8senv
    user: admin
current-context: k8senv
`, server, p.caCert, p.adminCert, p.adminKey)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// spawn starts one process with its output in Dir/<name>.log. The process
// gets SIGKILL if the test binary dies (Pdeathsig).
func (e *Env) spawn(name, path string, args ...string) error {
	logPath := filepath.Join(e.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create %s: %w", logPath, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = e.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	e.procs = append(e.procs, p)
	e.logf("k8senv: started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

// waitHTTP polls url until it answers 200, the process named exits, or ctx
// ends.
func (e *Env) waitHTTP(ctx context.Context, name, url string, c *http.Client) error {
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	var proc *process
	for _, p := range e.procs {
		if p.name == name {
			proc = p
		}
	}
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", name, err)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-proc.done:
			return fmt.Errorf("%s exited before it was ready: %s", name, tail(proc.log))
		case <-ctx.Done():
			return fmt.Errorf("wait for %s at %s (last: %s): %w", name, url, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail returns the end of a log file for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop stops every process by PID (SIGTERM, then SIGKILL after 10 s) in
// reverse start order and removes the cluster directory if Start made it.
func (e *Env) Stop() error {
	e.stopProcs()
	if e.ownDir {
		if err := os.RemoveAll(e.Dir); err != nil {
			return fmt.Errorf("remove %s: %w", e.Dir, err)
		}
	}
	return nil
}

func (e *Env) stopProcs() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	e.procs = nil
}
