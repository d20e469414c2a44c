package main

import (
	"strings"
	"testing"
	"time"
)

// TestYARNActionSettings parses yarn.nodemanager_restart and
// yarn.evict_grace and rejects bad values with the field named.
func TestYARNActionSettings(t *testing.T) {
	c, err := parseConfig("t.yaml", []byte(`
yarn:
  rm: [http://rm1:8088]
  admin_address: [rm1:8033]
  exclude_file: /etc/hadoop/conf/yarn.exclude.xml
  nodemanager_restart:
    command: [/usr/local/bin/restart-nodemanager, --unit, hadoop-yarn-nodemanager]
    timeout: 90s
  evict_grace: 45s
`))
	if err != nil {
		t.Fatal(err)
	}
	y := c.file.YARN
	if len(y.NodeManagerRestart.Command) != 3 || y.NodeManagerRestart.Timeout.D() != 90*time.Second || y.EvictGrace.D() != 45*time.Second {
		t.Fatalf("yarn settings: %+v", y)
	}
	hook, err := nodeManagerRestart(y.NodeManagerRestart)
	if err != nil || hook == nil {
		t.Fatalf("restart hook: %v", err)
	}
	if hook, err := nodeManagerRestart(nodeManagerRestartConfig{}); err != nil || hook != nil {
		t.Fatalf("no command: hook %v, %v; want none", hook != nil, err)
	}
	for body, field := range map[string]string{
		"yarn:\n  nodemanager_restart: {timeout: 1m}\n":                "yarn.nodemanager_restart",
		"yarn:\n  nodemanager_restart: {command: [x], timeout: -1s}\n": "yarn.nodemanager_restart",
		"yarn:\n  evict_grace: -5s\n":                                  "yarn.evict_grace",
		"yarn:\n  nodemanager_restart: {cmd: [x]}\n":                   "yarn.nodemanager_restart",
	} {
		if _, err := parseConfig("t.yaml", []byte(body)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", body, err, field)
		}
	}
}
