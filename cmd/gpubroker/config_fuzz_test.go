package main

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"
)

// FuzzParseConfig loads fuzzed YAML as gpubroker's configuration, seeded
// with the shipped files. Properties: no panic; every error is a usage
// error that starts with "config <path>: ", says what is wrong and never
// shows Go's own type names; a configuration that loads, written back as
// YAML, loads again to the same policy, pools and tenants.
func FuzzParseConfig(f *testing.F) {
	for _, p := range []string{"../../deploy/gpubroker.yaml", "../../docs/replay-tuned.yaml", "../../docs/replay-attrition.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"policy:\n  cluster_max_gpus: -1\n",
		"policy:\n  scale_down_unneeded: 5x\n",
		"policy:\n  scale_down_utilisation: 1.5\n",
		"pools:\n- name: p\n  min_nodes: 3\n  max_nodes: 1\n",
		"tenants:\n- name: ml\n  weight: 0\n",
		"tenants: {}\n",
		"yarn:\n  rms: [\"http://rm:8088\"]\n  bogus: 1\n",
		"policy: [1, 2]\n",
		"&a [*a]\n",
	} {
		f.Add([]byte(s))
	}
	const path = "fuzz.yaml"
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig(path, b)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("not a usage error: %T %v", err, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config "+path+": ") || len(strings.TrimSpace(strings.TrimPrefix(msg, "config "+path+": "))) == 0 {
				t.Fatalf("error does not name the file and the problem: %q", msg)
			}
			// Quoted input (yaml.v3 quotes values in backquotes) may say anything.
			bare := quotedRE.ReplaceAllString(msg, "``")
			for _, leak := range []string{"main.", "broker.", "time.Duration", "reflect"} {
				if strings.Contains(bare, leak) {
					t.Errorf("error shows Go's type names (%s): %q", leak, msg)
				}
			}
			return
		}
		out, err := yaml.Marshal(c.file)
		if err != nil {
			t.Fatalf("write back: %v", err)
		}
		again, err := parseConfig(path, out)
		if err != nil {
			t.Fatalf("written back, the configuration no longer loads: %v\n%s", err, out)
		}
		if d := cmp.Diff(c.policy, again.policy, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("policy changes in a round trip (-first +again):\n%s\n%s", d, out)
		}
		if d := cmp.Diff(c.pools, again.pools, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("pools change in a round trip (-first +again):\n%s", d)
		}
		if d := cmp.Diff(c.tenants, again.tenants, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("tenants change in a round trip (-first +again):\n%s", d)
		}
	})
}

var quotedRE = regexp.MustCompile("`[^`]*`|\"(?:[^\"\\\\]|\\\\.)*\"")
