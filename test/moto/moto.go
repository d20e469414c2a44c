package moto

import (
	"bytes"
	"context"
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
)

// Server is a running moto_server.
type Server struct {
	// URL is the base endpoint for every AWS client, e.g. http://127.0.0.1:41234.
	URL  string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// scriptDir is this package's directory, where install.sh lives.
func scriptDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install runs install.sh (idempotent: fast when the cache is warm) and
// returns the path of moto_server.
func Install(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(scriptDir(), "install.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install moto: %w: %s", err, tail(stderr.String(), 2000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	path := lines[len(lines)-1]
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("install moto: no moto_server at %q: %w", path, err)
	}
	return path, nil
}

// Start installs moto if needed, starts moto_server on a free loopback port
// and waits up to the context's deadline (or 60 s) until it answers.
func Start(ctx context.Context) (*Server, error) {
	bin, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp("", "moto-*.log")
	if err != nil {
		return nil, fmt.Errorf("create moto log: %w", err)
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so Stop ends its children too, and killed
	// with the test binary if that dies without cleaning up (a timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=us-east-1")
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, log: logf, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()

	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := s.Reset(wait); err == nil {
			return s, nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			s.Stop()
			return nil, fmt.Errorf("moto_server exited early: %v: %s", err, s.logTail())
		case <-wait.Done():
			msg := s.logTail()
			s.Stop()
			return nil, fmt.Errorf("moto_server on port %d not ready: %w: %s", port, wait.Err(), msg)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Reset drops every resource moto holds, so each test starts empty.
func (s *Server) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/moto-api/reset", nil)
	if err != nil {
		return fmt.Errorf("reset moto: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reset moto: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset moto: status %s", resp.Status)
	}
	return nil
}

// Stop ends moto_server and its process group and removes its log.
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
	s.log.Close()
	os.Remove(s.log.Name())
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log.Name())
	if err != nil {
		return ""
	}
	return tail(string(b), 2000)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
