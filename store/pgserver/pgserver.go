package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config says where and how to run the server.
type Config struct {
	// Dir holds the data directory, socket and log; created if missing.
	// Empty means a new temporary directory, removed by Stop.
	Dir string
	// BinDir holds initdb and postgres; empty means the newest
	// /usr/lib/postgresql/<version>/bin (or PG_BIN, read by the caller).
	BinDir string
	// Port to listen on at 127.0.0.1; 0 picks a free one.
	Port int
	// Fast trades durability for speed (fsync off): for tests and demos.
	Fast bool
	// StartTimeout bounds waiting for the server to accept connections.
	StartTimeout time.Duration
}

// Server is a running private PostgreSQL.
type Server struct {
	// URL connects to the "postgres" database as the superuser "postgres".
	URL string

	dir     string
	ownsDir bool
	cmd     *exec.Cmd
	done    chan struct{}
}

// FindBinDir returns the newest Debian PostgreSQL server binary directory.
func FindBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries: install Debian's postgresql package (apt-get install postgresql) or point PG_BIN at the directory holding initdb")
}

func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root and no unprivileged user 'nobody' to run postgres as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// traversable checks that every parent of dir lets other users through,
// since the server runs as "nobody" when we are root.
func traversable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("postgres runs as user nobody, who cannot enter %s (mode %s): choose a data directory under /tmp or a path every user can traverse", p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start initialises the data directory if needed and starts the server.
// The server dies with this process (parent-death signal), so nothing is
// left running after a crash.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.BinDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = d
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, owns := cfg.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpubroker-pg-"); err != nil {
			return nil, err
		}
		owns = true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cleanup := func() {
		if owns {
			os.RemoveAll(dir)
		}
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			cleanup()
			return nil, err
		}
		if err := traversable(dir); err != nil {
			cleanup()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		initdb := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"), "-D", data, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			cleanup()
			return nil, fmt.Errorf("initdb in %s: %w\n%s", data, err, out)
		}
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				cleanup()
				return nil, err
			}
		}
		s, err := launch(ctx, cfg, dir, data, port, cred)
		if err == nil {
			s.ownsDir = owns
			return s, nil
		}
		lastErr = err
		if cfg.Port != 0 {
			break
		}
	}
	cleanup()
	return nil, lastErr
}

func launch(ctx context.Context, cfg Config, dir, data string, port int, cred *syscall.Credential) (*Server, error) {
	logf, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + dir, "-c", "max_connections=200"}
	if cfg.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(cfg.BinDir, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: the server dies with its parent, even on a crash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(cfg.StartTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.URL)
		if err == nil {
			conn.Close(cctx)
			cancel()
			return s, nil
		}
		cancel()
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres exited on port %d: %s", port, tail(log, 2000))
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("postgres on port %d not ready after %s: %w", port, cfg.StartTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (s *Server) kill() {
	// SIGINT is PostgreSQL's fast shutdown: abort transactions, exit cleanly.
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Stop shuts the server down; a temporary directory is removed.
func (s *Server) Stop() error {
	s.kill()
	if s.ownsDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// DatabaseURL returns the server's URL for database name.
func (s *Server) DatabaseURL(name string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.addr(), name)
}

func (s *Server) addr() string {
	// URL is postgres://postgres@HOST:PORT/postgres?...; cut HOST:PORT.
	const prefix = "postgres://postgres@"
	rest := s.URL[len(prefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '/' {
			return rest[:i]
		}
	}
	return rest
}
