// Package pgtest gives tests a real PostgreSQL server without setup by hand.
//
// With DATABASE_URL set, tests use that server. Otherwise Start runs initdb
// and postgres from the Debian server binaries (/usr/lib/postgresql/<v>/bin,
// or PG_BIN) in a temporary directory, listening only on a free loopback
// port; as root it runs them as the unprivileged user "nobody", since
// PostgreSQL refuses to run as root. One server serves a whole test package
// and is removed when the package's tests end. Each test gets its own
// database, cloned from a template that already holds the migrated schema,
// so tests are isolated and may run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server for one test package.
type Server struct {
	// URL connects to the maintenance database as a superuser.
	URL string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}

	mu       sync.Mutex
	template string // database holding the migrated schema, once prepared
}

// Main runs a test package with a server: use it from TestMain.
//
//	var pg *pgtest.Server
//	func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
func Main(m *testing.M, srv **Server) {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(2)
	}
	*srv = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop:", err)
	}
	os.Exit(code)
}

// Start returns a server: DATABASE_URL when set, otherwise a private one.
func Start() (*Server, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return &Server{URL: u}, nil
	}
	return startPrivate()
}

func binDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries: install Debian's postgresql package (apt-get install postgresql), set PG_BIN to the directory holding initdb, or set DATABASE_URL")
}

func pgVersion(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// credential returns the user to run PostgreSQL as: nobody when we are root.
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startPrivate() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpubroker-pg-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb in %s: %w\n%s", data, err, out)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(bin, dir, data, port, cred)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func launch(bin, dir, data string, port int, cred *syscall.Credential) (*Server, error) {
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir,
		// Test speed over durability: the data directory is thrown away.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=128MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: the server dies with the test binary, even on a crash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{
		URL:  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		dir:  dir,
		cmd:  cmd,
		done: make(chan struct{}),
	}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			conn.Close(ctx)
			cancel()
			return s, nil
		}
		cancel()
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres exited on port %d: %s", port, log)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("postgres on port %d not ready after 30s: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	// SIGINT is PostgreSQL's fast shutdown: abort transactions, exit cleanly.
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Stop shuts a private server down and removes its directory.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	s.kill()
	return os.RemoveAll(s.dir)
}

// DatabaseURL returns s.URL pointing at database name instead.
func (s *Server) DatabaseURL(name string) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad server URL %q: %v", s.URL, err))
	}
	u.Path = "/" + name
	return u.String()
}

// Migrator prepares an empty database; NewDatabase calls it once per server
// to build the template every test database is cloned from.
type Migrator func(ctx context.Context, url string) error

// NewDatabase creates a fresh database for t, with the schema from migrate
// already applied (through a template, so migrations run once per package),
// drops it when t ends, and returns its URL. migrate may be nil for an
// empty database.
func (s *Server) NewDatabase(t testing.TB, migrate Migrator) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmpl := "template0"
	if migrate != nil {
		var err error
		if tmpl, err = s.prepareTemplate(ctx, migrate); err != nil {
			t.Fatalf("pgtest: prepare template: %v", err)
		}
	}
	name := "t_" + randomHex(8)
	if err := s.exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.DatabaseURL(name)
}

func (s *Server) prepareTemplate(ctx context.Context, migrate Migrator) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.template != "" {
		return s.template, nil
	}
	name := "tmpl_" + randomHex(8)
	if err := s.exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	if err := migrate(ctx, s.DatabaseURL(name)); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	s.template = name
	return name, nil
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", redact(s.URL), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
