package main

import (
	"strings"
	"testing"
)

// TestSubcommandHelp: the commands that dispatch to subcommands answer
// --help with their usage and exit status 0, as the README promises for
// every command, instead of taking --help for an unknown subcommand.
func TestSubcommandHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--help"}, "gpubroker inspect cloud | k8s | yarn [flags]"},
		{[]string{"yarn", "-h"}, "gpubroker yarn decommission HOST"},
		{[]string{"token", "--help"}, "gpubroker token create --role R"},
		{[]string{"yarn", "decommission", "--help"}, "-timeout"},
	} {
		code, _, errOut := runCLI(t, nil, c.args...)
		if code != 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("gpubroker %s: exit %d, stderr %q; want 0 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
