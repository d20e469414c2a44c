package servetest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Install runs the installer test/<name>/install.sh and returns the last
// line it prints (the installed tool's path).
func Install(t testing.TB, name string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(Root(), "test", name, "install.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("install %s: %v", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Build compiles cmd/gpubroker into a temporary directory.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpubroker")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpubroker")
	build.Dir = Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpubroker: %v\n%s", err, out)
	}
	return bin
}

// Server is a running `gpubroker serve`.
type Server struct {
	// URL is its base address (http://127.0.0.1:port).
	URL string
	// Env is the environment it runs with (for CLI commands on its
	// database, such as token create).
	Env []string
	// Log holds its standard output and error.
	Log *bytes.Buffer
	Cmd *exec.Cmd
}

// Start writes config to a file and runs bin serve with it on a free
// loopback port against the database at dbURL, killed when the test ends;
// it returns once /healthz answers 200.
func Start(t testing.TB, bin, config, dbURL string) *Server {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "gpubroker.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	s := &Server{URL: "http://" + addr, Log: &bytes.Buffer{},
		Env: append(os.Environ(), "GPUBROKER_DATABASE_URL="+dbURL,
			"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true")}
	s.Cmd = exec.Command(bin, "serve", "--config", cfg, "--listen", addr, "--log-level", "error")
	s.Cmd.Env = s.Env
	s.Cmd.Stdout, s.Cmd.Stderr = s.Log, s.Log
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Cmd.Process.Kill()
		_ = s.Cmd.Wait()
	})
	WaitUp(t, s.URL+"/healthz", s.Log)
	return s
}

// FreeAddr is a loopback address with a port free at the time of asking.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitUp waits up to a minute for url to answer 200, failing the test
// with log otherwise.
func WaitUp(t testing.TB, url string, log *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("gpubroker serve did not answer %s; log:\n%s", url, log.String())
}
