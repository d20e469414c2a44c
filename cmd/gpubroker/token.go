package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// runToken dispatches "gpubroker token <action>".
func runToken(ctx context.Context, e env, args []string) error {
	if len(args) > 0 {
		if err := subcommandHelp(e, args[0], "gpubroker token create --role R [--tenant T] [--name N] [flags]"); err != nil {
			return err
		}
	}
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		return usagef("name an action: create (gpubroker token create --role R [--tenant T] [--name N])")
	}
	switch args[0] {
	case "create":
		return runTokenCreate(ctx, e, args[1:])
	}
	return usagef("unknown action %q: use create", args[0])
}

// runTokenCreate makes an API bearer token. The secret goes to stdout
// alone, once, so a script can capture it; the database keeps its hash.
func runTokenCreate(ctx context.Context, e env, args []string) error {
	fs := newFlags("token create", e)
	role := fs.String("role", "", "the token's `role`: admin, tenant-admin, viewer or agent")
	tenant := fs.String("tenant", "", "the `tenant` a tenant-admin token administers (only for --role tenant-admin)")
	name := fs.String("name", "", "a `name` to recognise the token by in logs (default: the role, and the tenant)")
	cfgPath := fs.String("config", "", "YAML configuration `file` (database.url)")
	dbURL := fs.String("database-url", "", "PostgreSQL `url` (overrides the config file)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: gpubroker token create --role R [--tenant T] [--name N] [--config FILE | --database-url URL]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	r := store.Role(*role)
	switch {
	case *role == "":
		return usagef("--role is required: admin, tenant-admin, viewer or agent")
	case !r.Valid():
		return usagef("--role must be admin, tenant-admin, viewer or agent, got %q", *role)
	case r == store.RoleTenantAdmin && *tenant == "":
		return usagef("--tenant is required with --role tenant-admin: name the tenant it administers")
	case r != store.RoleTenantAdmin && *tenant != "":
		return usagef("--tenant is only for --role tenant-admin, not %s", r)
	}
	if *name == "" {
		*name = *role
		if *tenant != "" {
			*name += "@" + *tenant
		}
	}
	url, err := databaseURL(e, *dbURL, *cfgPath)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2})
	if err != nil {
		return usagef("%s", err)
	}
	defer st.Close()
	if *tenant != "" {
		if _, err := st.GetTenant(ctx, *tenant); errors.Is(err, broker.ErrNotFound) {
			return usagef("--tenant %q: no such tenant; create it first (POST /api/v1/tenants or the config's tenants)", *tenant)
		} else if err != nil {
			return err
		}
	}
	secret, tok, err := st.CreateToken(ctx, *name, r, *tenant)
	var ve *broker.ValidationError
	if errors.As(err, &ve) {
		return usagef("--%s %s", ve.Field, ve.Problem)
	}
	if err != nil {
		return err
	}
	who := string(tok.Role)
	if tok.Tenant != "" {
		who += " of tenant " + tok.Tenant
	}
	fmt.Fprintf(e.stderr, "created token %d %q (%s); it is shown once and cannot be recovered:\n", tok.ID, tok.Name, who)
	fmt.Fprintln(e.stdout, secret)
	return nil
}
