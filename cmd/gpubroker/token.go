package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// tokenUsage is "gpubroker token"'s synopsis.
const tokenUsage = "gpubroker token create --role R [--tenant T | --node NAME ... | --pool P] [--name N] [--expires D] | revoke ID | list [flags]"

// runToken dispatches "gpubroker token <action>".
func runToken(ctx context.Context, e env, args []string) error {
	if len(args) > 0 {
		if err := subcommandHelp(e, args[0], tokenUsage); err != nil {
			return err
		}
	}
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		return usagef("name an action: create (gpubroker token create --role R [--tenant T | --node NAME ... | --pool P] [--name N] [--expires D]), revoke ID or list")
	}
	switch args[0] {
	case "create":
		return runTokenCreate(ctx, e, args[1:])
	case "revoke":
		return runTokenRevoke(ctx, e, args[1:])
	case "list":
		return runTokenList(ctx, e, args[1:])
	}
	return usagef("unknown action %q: use create, revoke or list", args[0])
}

// dbFlags are the flags that find the database.
type dbFlags struct{ cfgPath, dbURL *string }

func addDBFlags(fs *flag.FlagSet) dbFlags {
	return dbFlags{
		cfgPath: fs.String("config", "", "YAML configuration `file` (database.url)"),
		dbURL:   fs.String("database-url", "", "PostgreSQL `url` (overrides the config file)"),
	}
}

func (d dbFlags) open(ctx context.Context, e env) (*store.Store, error) {
	url, err := databaseURL(e, *d.dbURL, *d.cfgPath)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2})
	if err != nil {
		return nil, usagef("%s", err)
	}
	return st, nil
}

// cliActor is who runs the CLI, for the audit trail: the OS user.
func cliActor(e env) string {
	for _, k := range []string{"SUDO_USER", "USER", "LOGNAME"} {
		if u := e.getenv(k); u != "" {
			return u
		}
	}
	return "unknown user"
}

// auditCLI records a token change made by the CLI in the audit trail.
func auditCLI(ctx context.Context, e env, st *store.Store, action string, id int64, tenant string, before, after any) error {
	raw := func(v any) json.RawMessage {
		if v == nil {
			return nil
		}
		b, _ := json.Marshal(v)
		return b
	}
	_, err := st.RecordAudit(ctx, store.AuditEntry{Actor: cliActor(e), ActorKind: store.ActorCLI, Method: "CLI",
		Route: "token " + action, Target: "token/" + strconv.FormatInt(id, 10), Tenant: tenant, Status: 200,
		Before: raw(before), After: raw(after)})
	if err != nil {
		return fmt.Errorf("audit token %s: %w", action, err)
	}
	return nil
}

// runTokenCreate makes an API bearer token. The secret goes to stdout
// alone, once, so a script can capture it; the database keeps its hash.
func runTokenCreate(ctx context.Context, e env, args []string) error {
	fs := newFlags("token create", e)
	role := fs.String("role", "", "the token's `role`: admin, tenant-admin, viewer or agent")
	tenant := fs.String("tenant", "", "the `tenant` a tenant-admin token administers (only for --role tenant-admin)")
	name := fs.String("name", "", "a `name` to recognise the token by in logs (default: the role, and the tenant or node)")
	expires := fs.Duration("expires", 0, "the token stops working after this `duration`, e.g. 720h (default: never)")
	var nodes nodeList
	fs.Var(&nodes, "node", "the `node` an agent token may report for (its Kubernetes node name or NodeManager host); repeat for several (only for --role agent)")
	pool := fs.String("pool", "", "the `pool` whose known nodes an agent token may report for, instead of --node (only for --role agent)")
	db := addDBFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: gpubroker token create --role R [--tenant T | --node NAME ... | --pool P] [--name N] [--expires D] [--config FILE | --database-url URL]")
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
	case r == store.RoleAgent && len(nodes) == 0 && *pool == "":
		return usagef("--node NAME (repeatable) or --pool NAME is required with --role agent: an agent token reports only for the nodes it is bound to")
	case r == store.RoleAgent && len(nodes) > 0 && *pool != "":
		return usagef("--node and --pool exclude each other: bind an agent token to nodes or to a pool")
	case r != store.RoleAgent && (len(nodes) > 0 || *pool != ""):
		return usagef("--node and --pool are only for --role agent, not %s", r)
	case *expires < 0 || (*expires > 0 && *expires < time.Minute):
		return usagef("--expires must be at least 1m, such as 720h for 30 days, got %s", *expires)
	}
	if *name == "" {
		*name = *role
		switch {
		case *tenant != "":
			*name += "@" + *tenant
		case len(nodes) > 0:
			*name += "@" + strings.Join(nodes, ",")
		case *pool != "":
			*name += "@pool/" + *pool
		}
	}
	st, err := db.open(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	if *tenant != "" {
		if _, err := st.GetTenant(ctx, *tenant); errors.Is(err, broker.ErrNotFound) {
			return usagef("--tenant %q: no such tenant; create it first (POST /api/v1/tenants or the config's tenants)", *tenant)
		} else if err != nil {
			return err
		}
	}
	if *pool != "" {
		if _, err := st.GetPool(ctx, *pool); errors.Is(err, broker.ErrNotFound) {
			return usagef("--pool %q: no such pool; name one of the config's pools", *pool)
		} else if err != nil {
			return err
		}
	}
	var until time.Time
	if *expires > 0 {
		until = time.Now().Add(*expires)
	}
	var secret string
	var tok store.Token
	if r == store.RoleAgent {
		secret, tok, err = st.CreateAgentToken(ctx, *name, nodes, *pool, until)
	} else {
		secret, tok, err = st.CreateExpiringToken(ctx, *name, r, *tenant, until)
	}
	var ve *broker.ValidationError
	if errors.As(err, &ve) {
		return usagef("--%s %s", ve.Field, ve.Problem)
	}
	if err != nil {
		return err
	}
	if err := auditCLI(ctx, e, st, "create", tok.ID, tok.Tenant, nil, tok); err != nil {
		return err
	}
	who := string(tok.Role)
	switch {
	case tok.Tenant != "":
		who += " of tenant " + tok.Tenant
	case len(tok.Nodes) > 0:
		who += " for node " + strings.Join(tok.Nodes, ", ")
	case tok.Pool != "":
		who += " for the nodes of pool " + tok.Pool
	}
	if !tok.ExpiresAt.IsZero() {
		who += ", expires " + tok.ExpiresAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(e.stderr, "created token %d %q (%s); it is shown once and cannot be recovered:\n", tok.ID, tok.Name, who)
	fmt.Fprintln(e.stdout, secret)
	return nil
}

// nodeList is a repeatable --node flag.
type nodeList []string

func (l *nodeList) String() string { return strings.Join(*l, ",") }

func (l *nodeList) Set(s string) error {
	if s == "" {
		return errors.New("must name a node")
	}
	*l = append(*l, s)
	return nil
}

// runTokenRevoke disables a token by id.
func runTokenRevoke(ctx context.Context, e env, args []string) error {
	fs := newFlags("token revoke", e)
	db := addDBFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: gpubroker token revoke ID [--config FILE | --database-url URL]")
		fs.PrintDefaults()
	}
	// The id may come before or after the flags.
	var id string
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return usagef("name the token to revoke by its id (gpubroker token list shows them), got %q", id)
	}
	st, err := db.open(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	before, err := findToken(ctx, st, n)
	if err != nil {
		return err
	}
	if err := st.RevokeToken(ctx, n); errors.Is(err, broker.ErrNotFound) {
		return usagef("token %d is already revoked", n)
	} else if err != nil {
		return err
	}
	after, err := findToken(ctx, st, n)
	if err != nil {
		return err
	}
	if err := auditCLI(ctx, e, st, "revoke", n, before.Tenant, before, after); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "revoked token %d %q; the API refuses it within %s (its token cache)\n", n, before.Name, api.DefaultAuthCacheTTL)
	return nil
}

func findToken(ctx context.Context, st *store.Store, id int64) (store.TokenInfo, error) {
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return store.TokenInfo{}, err
	}
	for _, t := range ts {
		if t.ID == id {
			return t, nil
		}
	}
	return store.TokenInfo{}, usagef("no token %d (gpubroker token list shows them)", id)
}

// runTokenList prints every token: never a secret, which is not stored.
func runTokenList(ctx context.Context, e env, args []string) error {
	fs := newFlags("token list", e)
	db := addDBFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	st, err := db.open(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tTENANT/NODES\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, t := range ts {
		tenant := t.Tenant
		switch {
		case len(t.Nodes) > 0:
			tenant = "node/" + strings.Join(t.Nodes, ",")
		case t.Pool != "":
			tenant = "pool/" + t.Pool
		case tenant == "" && t.Role == store.RoleAgent:
			tenant = "(no node)" // reports for none
		case tenant == "":
			tenant = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, tenant, when(t.CreatedAt),
			when(t.ExpiresAt), when(t.LastUsedAt), when(t.RevokedAt))
	}
	return tw.Flush()
}
