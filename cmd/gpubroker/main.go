package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError marks bad command-line or configuration input: the process
// exits with status 2 and prints one line naming the field and the fix.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// env is what a subcommand may touch of the outside world.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"migrate": {"apply or show database migrations (up | status)", runMigrate},
		"demo":    {"run the whole product on one machine: private PostgreSQL, simulated YARN, Kubernetes and AWS, a workload", runDemo},
		"serve":   {"run the broker: API, dashboard and, while leading, the tick loop", runServe},
		"plan":    {"observe once and print the plan with its reasons, acting on nothing", runPlan},
		"version": {"print the version", runVersion},
		"inspect": {"print what the broker sees of a source (yarn | k8s | cloud)", runInspect},
		"token":   {"create, revoke or list API bearer tokens (create --role R [--tenant T] [--name N] [--expires D] | revoke ID | list)", runToken},
		"replay":  {"replay a GPU job trace against gpubroker's planner, a per-side autoscaler and a static split", runReplay},
		"yarn":    {"take a NodeManager from YARN or give it back (decommission HOST --timeout 10m | recommission HOST)", runYARN},
		"why":     {"print why a demand waits and what the broker decided about it, from the API (" + whyUsage + ")", runWhy},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit status:
// 0 on success, 2 for bad input (usage, configuration), 1 for other failures.
func run(ctx context.Context, e env, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(e.stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "gpubroker: unknown command %q; run 'gpubroker help' for the list\n", args[0])
		return 2
	}
	err := c.run(ctx, e, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "gpubroker %s: %s\n", args[0], ue.msg)
		return 2
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return 130
	default:
		fmt.Fprintf(e.stderr, "gpubroker %s: %s\n", args[0], err)
		return 1
	}
}

func printUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: gpubroker <command> [flags]")
	fmt.Fprintln(w, "commands:")
	for _, name := range sortedKeys(cmds) {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
}

// newFlags returns a FlagSet that reports errors instead of exiting, so bad
// flags become usage errors with exit status 2.
func newFlags(name string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parseFlags parses args and maps flag errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s", err)
	}
	return nil
}

func runVersion(_ context.Context, e env, args []string) error {
	if len(args) > 0 {
		return usagef("takes no arguments, got %q", args)
	}
	fmt.Fprintln(e.stdout, "gpubroker", version)
	return nil
}
