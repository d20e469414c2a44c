package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/store/pgserver"
)

// Server is a PostgreSQL server for one test package.
type Server struct {
	// URL connects to the maintenance database as a superuser.
	URL string

	srv *pgserver.Server // nil when DATABASE_URL is used

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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Config{BinDir: os.Getenv("PG_BIN"), Fast: true})
	if err != nil {
		return nil, err
	}
	return &Server{URL: srv.URL, srv: srv}, nil
}

// Stop shuts a private server down and removes its directory.
func (s *Server) Stop() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Stop()
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
