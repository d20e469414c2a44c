package main

import (
	"context"
	"strings"
)

// runInspect dispatches "gpubroker inspect <source>". Each source's command
// lives in its own file (inspect_yarn.go, inspect_k8s.go, inspect_cloud.go).
func runInspect(ctx context.Context, e env, args []string) error {
	targets := map[string]func(context.Context, env, []string) error{
		// Each adapter adds its entry here: "yarn", "k8s", "cloud".
		"cloud": runInspectCloud,
		"k8s":   runInspectK8s,
		"yarn":  runInspectYARN,
	}
	if len(args) == 0 {
		return usagef("name what to inspect: one of %s", strings.Join(sortedKeys(targets), ", "))
	}
	if err := subcommandHelp(e, args[0], "gpubroker inspect "+strings.Join(sortedKeys(targets), " | ")+" [flags]"); err != nil {
		return err
	}
	f, ok := targets[args[0]]
	if !ok {
		return usagef("unknown source %q: use one of %s", args[0], strings.Join(sortedKeys(targets), ", "))
	}
	return f(ctx, e, args[1:])
}
