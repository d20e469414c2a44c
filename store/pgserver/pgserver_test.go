package pgserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/store/pgserver"
)

// TestRestartKeepsData starts a server in a directory of its own, writes a
// row, stops it, starts it again in the same directory and reads the row.
func TestRestartKeepsData(t *testing.T) {
	ctx := context.Background()
	// Under /tmp rather than t.TempDir(): as root the server runs as
	// nobody, who cannot enter the test's private temp directory.
	base, err := os.MkdirTemp("", "pgserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pg")
	s, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, BinDir: os.Getenv("PG_BIN")})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(s *pgserver.Server, sql string) (n int) {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if strings.HasPrefix(sql, "CREATE") {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			return 0
		}
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec(s, "CREATE TABLE kept AS SELECT 42 AS v")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("a configured directory must survive Stop: %v", err)
	}
	s2, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, BinDir: os.Getenv("PG_BIN")})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if os.Geteuid() == 0 {
		_, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(t.TempDir(), "pg"), BinDir: os.Getenv("PG_BIN")})
		if err == nil || !strings.Contains(err.Error(), "cannot enter") {
			t.Fatalf("a data directory nobody can reach must be refused clearly, got %v", err)
		}
	}
	if v := exec(s2, "SELECT v FROM kept"); v != 42 {
		t.Fatalf("after restart: %d", v)
	}
	if got := s2.DatabaseURL("x"); got[len(got)-len("/x?sslmode=disable"):] != "/x?sslmode=disable" {
		t.Fatalf("DatabaseURL: %s", got)
	}
}
