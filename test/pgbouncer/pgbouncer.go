package pgbouncer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a running pgbouncer.
type Server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan error
}

// Config says what to pool and how.
type Config struct {
	// Upstream is the PostgreSQL server's host:port; it must accept the
	// user postgres without a password (pgtest's servers do).
	Upstream string
	// Mode is the pool_mode: session, transaction or statement.
	Mode string
	// PoolSize is default_pool_size, the server connections per database
	// and user (default 2).
	PoolSize int
}

func scriptDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install runs install.sh and returns the path of a runnable pgbouncer.
func Install(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(scriptDir(), "install.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install pgbouncer: %w: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Start installs pgbouncer if needed and runs it on a free loopback port
// until Stop, waiting until it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Upstream, err)
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,application_name,search_path
logfile = %s
pidfile = %s
`, host, port, listen, cfg.Mode, cfg.PoolSize, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	conf := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{conf}
	if os.Getuid() == 0 {
		// PgBouncer refuses to run as root; it switches to nobody, who
		// must be able to write its log and pid files.
		u, err := user.Lookup("nobody")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no user nobody for pgbouncer: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = []string{"-u", "nobody", conf}
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{addr: "127.0.0.1:" + strconv.Itoa(listen), dir: dir, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(wait, "tcp", s.addr)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case err := <-s.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer exited: %v: %s", err, out.String())
		case <-wait.Done():
			s.Stop()
			return nil, fmt.Errorf("pgbouncer on %s not ready: %w", s.addr, wait.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL connects to database name through the pooler. Statements use the
// simple protocol: before 1.21 PgBouncer cannot keep prepared statements
// in transaction mode, and with them pgx would fail loudly instead of
// showing what a pooler does to session locks.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&default_query_exec_mode=simple_protocol", s.addr, name)
}

// Stop ends pgbouncer and removes its files.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}
