package promtool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Binary returns the path of the cached promtool, building it first when
// it is missing (install.sh; a cold build takes minutes).
func Binary(ctx context.Context) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("locate install.sh: no caller information")
	}
	script := filepath.Join(filepath.Dir(self), "install.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("run %s: %w\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := lines[len(lines)-1]
	if bin == "" {
		return "", fmt.Errorf("run %s: it printed no path\n%s", script, stderr.String())
	}
	return bin, nil
}
