package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/gpubroker/gpubroker/store"
)

// databaseURL picks the database from --database-url, then the config
// file, then GPUBROKER_DATABASE_URL.
func databaseURL(e env, flagURL, configPath string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if configPath != "" {
		c, err := loadConfig(configPath)
		if err != nil {
			return "", err
		}
		if c.file.Database.URL != "" {
			return c.file.Database.URL, nil
		}
	}
	if u := e.getenv("GPUBROKER_DATABASE_URL"); u != "" {
		return u, nil
	}
	return "", usagef("no database: pass --database-url, set database.url in --config, or set GPUBROKER_DATABASE_URL")
}

func runMigrate(ctx context.Context, e env, args []string) error {
	fs := newFlags("migrate", e)
	cfgPath := fs.String("config", "", "YAML configuration `file` (database.url)")
	dbURL := fs.String("database-url", "", "PostgreSQL `url` (overrides the config file)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: gpubroker migrate [up | status] [--config FILE | --database-url URL]")
		fs.PrintDefaults()
	}
	action := "up"
	if len(args) > 0 && (args[0] == "up" || args[0] == "status") {
		action, args = args[0], args[1:]
	} else if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		return usagef("unknown action %q: use up or status", args[0])
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	url, err := databaseURL(e, *dbURL, *cfgPath)
	if err != nil {
		return err
	}
	m, err := store.NewMigrations(ctx, url, nil)
	if err != nil {
		// An unreachable or misconfigured database is bad input to this
		// command: one line naming the address, exit status 2.
		return usagef("%s", err)
	}
	defer m.Close()
	switch action {
	case "status":
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
		for _, s := range st {
			applied := "pending"
			if s.Applied {
				applied = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\n", s.Version, s.Name, applied)
		}
		return tw.Flush()
	default:
		applied, err := m.Up(ctx)
		for _, v := range applied {
			fmt.Fprintf(e.stdout, "applied migration %d\n", v)
		}
		if err != nil {
			return err
		}
		v, err := m.Version(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "schema at version %d (%s)\n", v, store.Address(url))
		return nil
	}
}
