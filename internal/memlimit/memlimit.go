package memlimit

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the cgroup's limit given to the Go heap: the
// rest is for what the runtime does not count (stacks of cgo threads,
// the binary, page cache the cgroup charges).
const DefaultRatio = 0.9

// unlimited is above any real limit: cgroup v1 reports "no limit" as the
// largest page-aligned int64.
const unlimited = 1 << 62

// Limit returns the soft memory limit for this process and where it came
// from: none (0) when GOMEMLIMIT is set (the runtime already honours it) or
// no cgroup limit is found under root ("/" in production).
func Limit(getenv func(string) string, root string, ratio float64) (int64, string) {
	if v := getenv("GOMEMLIMIT"); v != "" {
		return 0, "GOMEMLIMIT=" + v
	}
	for _, path := range candidates(root) {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(raw))
		if s == "max" {
			return 0, path + ": max"
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			continue
		}
		return int64(float64(n) * ratio), path
	}
	return 0, "no cgroup memory limit"
}

// Apply sets the limit Limit finds (if any) and returns it with its
// source, for the log.
func Apply(getenv func(string) string, root string, ratio float64) (int64, string) {
	n, from := Limit(getenv, root, ratio)
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return n, from
}

// candidates lists the files that may hold this process's memory limit,
// most specific first: the cgroup v2 group of /proc/self/cgroup (a systemd
// unit's MemoryMax=), the cgroup v2 root as a container sees it, then
// cgroup v1's memory controller.
func candidates(root string) []string {
	base := filepath.Join(root, "sys", "fs", "cgroup")
	var out []string
	if raw, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			// v2: "0::/system.slice/gpubroker.service"; v1: "4:memory:/docker/…".
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "" && parts[2] != "/":
				out = append(out, filepath.Join(base, parts[2], "memory.max"))
			case strings.Contains(","+parts[1]+",", ",memory,") && parts[2] != "/":
				out = append(out, filepath.Join(base, "memory", parts[2], "memory.limit_in_bytes"))
			}
		}
	}
	return append(out, filepath.Join(base, "memory.max"), filepath.Join(base, "memory", "memory.limit_in_bytes"))
}
