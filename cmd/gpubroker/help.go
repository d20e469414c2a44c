package main

import (
	"flag"
	"fmt"
)

// subcommandHelp answers "gpubroker CMD --help" for a command that only
// dispatches to subcommands (inspect, yarn, token): when arg asks for help
// it prints the usage line to stderr and returns flag.ErrHelp (exit status
// 0, as a command's own --help does); otherwise it returns nil.
func subcommandHelp(e env, arg, usage string) error {
	if arg != "-h" && arg != "-help" && arg != "--help" && arg != "help" {
		return nil
	}
	fmt.Fprintln(e.stderr, "usage: "+usage)
	fmt.Fprintln(e.stderr, "each subcommand prints its flags with --help")
	return flag.ErrHelp
}
