package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoLoggerTerminalAndFile: without --verbose the terminal gets one
// short line per decision (nothing for the rest of the info log, each
// warning at most once per interval), and the file gets every JSON line.
func TestDemoLoggerTerminalAndFile(t *testing.T) {
	var out strings.Builder
	e := env{stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }}
	path := filepath.Join(t.TempDir(), "demo.log")
	log, got, closeLog, err := demoLogger(e, "info", path, false)
	if err != nil {
		t.Fatal(err)
	}
	if got != path {
		t.Fatalf("log path %q, want %q", got, path)
	}
	log.Info("action", "op", 7, "kind", "scale-up", "pool", "gpu-8x-group", "node", "", "target", 2, "reason", "2 demands wait for 8 GPUs")
	log.Info("tick", "took_ms", 12)
	log.Warn("observe pools", "err", "throttled")
	log.Warn("observe pools", "err", "throttled again")
	log.With("node", "ip-10-0-0-1").Info("op done", "kind", "scale-down")
	closeLog()

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("terminal lines:\n%s\nwant 3 (the action, one warning, the op done)", out.String())
	}
	if !strings.Contains(lines[0], "action kind=scale-up pool=gpu-8x-group target=2 — 2 demands wait for 8 GPUs") || strings.Contains(lines[0], "op=") {
		t.Fatalf("action line %q", lines[0])
	}
	if !strings.Contains(lines[1], "WARN observe pools — throttled") {
		t.Fatalf("warning line %q", lines[1])
	}
	if !strings.Contains(lines[2], "op done kind=scale-down node=ip-10-0-0-1") {
		t.Fatalf("op done line %q", lines[2])
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 5 || !strings.Contains(string(b), `"msg":"tick"`) {
		t.Fatalf("the file must hold every JSON line (5), got %d:\n%s", n, b)
	}
}

// TestDemoLoggerBadLevel: a bad --log-level is a usage error naming it.
func TestDemoLoggerBadLevel(t *testing.T) {
	e := env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	if _, _, _, err := demoLogger(e, "loud", "", false); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("err %v, want one naming --log-level", err)
	}
}
