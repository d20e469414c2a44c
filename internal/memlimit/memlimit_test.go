package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func noEnv(string) string { return "" }

func TestLimit(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name  string
		files map[string]string
		env   func(string) string
		want  int64
	}{
		{"container, cgroup v2", map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"}, noEnv, gib * 9 / 10},
		{"systemd unit, cgroup v2", map[string]string{
			"proc/self/cgroup": "0::/system.slice/gpubroker.service\n",
			"sys/fs/cgroup/system.slice/gpubroker.service/memory.max": "2147483648\n",
			"sys/fs/cgroup/memory.max":                                "max\n"}, noEnv, 2 * gib * 9 / 10},
		{"no limit, cgroup v2", map[string]string{"sys/fs/cgroup/memory.max": "max\n"}, noEnv, 0},
		{"cgroup v1", map[string]string{
			"proc/self/cgroup": "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, noEnv, gib / 2 * 9 / 10},
		{"no limit, cgroup v1", map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, noEnv, 0},
		{"nothing mounted", nil, noEnv, 0},
		{"GOMEMLIMIT wins", map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"},
			func(k string) string {
				if k == "GOMEMLIMIT" {
					return "700MiB"
				}
				return ""
			}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range c.files {
				write(t, root, rel, content)
			}
			got, from := Limit(c.env, root, DefaultRatio)
			if got != c.want {
				t.Fatalf("Limit = %d (from %s), want %d", got, from, c.want)
			}
		})
	}
}
