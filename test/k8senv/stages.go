package k8senv

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeepRunningAnnotation, set to "true" on a Job's pod (through the Job's
// pod template), keeps the pod Running: without it KWOK's pod-complete
// stage makes every Job pod succeed at once, so no test could hold a
// long-running training Job. Other pods are unaffected.
const KeepRunningAnnotation = "k8senv.gpubroker.io/keep-running"

// podComplete is KWOK's fast pod-complete stage with one more selector
// term that leaves pods annotated KeepRunningAnnotation: "true" alone.
//
//go:embed pod-complete.yaml
var podComplete string

// writeStages writes the stages file KWOK reads into dir: the cached
// upstream stages (install.sh) without their pod-complete stage, if a cache
// built before this file has one, and podComplete in its place.
func writeStages(cached, dir string) (string, error) {
	b, err := os.ReadFile(cached)
	if err != nil {
		return "", fmt.Errorf("read kwok stages: %w", err)
	}
	var docs []string
	for _, doc := range splitYAML(string(b)) {
		if strings.TrimSpace(doc) == "" || strings.Contains(doc, "\n  name: pod-complete\n") {
			continue
		}
		docs = append(docs, doc)
	}
	docs = append(docs, podComplete)
	path := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(path, []byte("---\n"+strings.Join(docs, "\n---\n")), 0o644); err != nil {
		return "", fmt.Errorf("write kwok stages: %w", err)
	}
	return path, nil
}

// splitYAML splits a multi-document YAML stream at its "---" lines.
func splitYAML(s string) []string {
	var docs []string
	var cur []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimRight(line, " \t\r") == "---" {
			docs = append(docs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, strings.Join(cur, "\n"))
}
