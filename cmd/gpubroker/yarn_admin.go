package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// runYARN runs the operator's YARN node commands:
//
//	gpubroker yarn decommission HOST [--timeout 10m] [--no-wait] [flags]
//	gpubroker yarn recommission HOST [--wait 5m] [flags]
//
// With a database configured (--database-url, database.url in --config or
// GPUBROKER_DATABASE_URL) they journal a manual operation that the leading
// broker carries out, as the API's drain and transfer do, so the leader
// neither fights nor undoes them; they then follow the operation. Without
// one they act themselves with the same code as the broker: the exclude
// file, refreshNodes on the RM admin port and the RM's REST API.
func runYARN(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		return usagef("yarn: want decommission HOST or recommission HOST")
	}
	if err := subcommandHelp(e, args[0], "gpubroker yarn decommission HOST [--timeout 10m] [flags] | recommission HOST [--wait 5m] [flags]"); err != nil {
		return err
	}
	switch args[0] {
	case "decommission":
		return runYARNDecommission(ctx, e, args[1:])
	case "recommission":
		return runYARNRecommission(ctx, e, args[1:])
	}
	return usagef("yarn: unknown subcommand %q (decommission | recommission)", args[0])
}

// yarnAdminFlags are the connection flags both subcommands share.
type yarnAdminFlags struct {
	config, rms, admin, exclude, user, dbURL *string
}

func addYARNAdminFlags(fs *flag.FlagSet) yarnAdminFlags {
	return yarnAdminFlags{
		config:  fs.String("config", "", "gpubroker YAML configuration (yarn.rm, yarn.admin_address, yarn.exclude_file, yarn.user)"),
		rms:     fs.String("rm", "", "ResourceManager web addresses, comma-separated for HA"),
		admin:   fs.String("admin", "", "RM admin addresses (host:port, default port 8033), comma-separated for HA"),
		exclude: fs.String("exclude", "", "the RM's exclude file (yarn.resourcemanager.nodes.exclude-path)"),
		user:    fs.String("user", "", "user for the REST API and the admin ACL (default "+yarn.DefaultUser+")"),
		dbURL:   fs.String("database-url", "", "the broker's PostgreSQL `url`: journal the operation for the leader to carry out"),
	}
}

// journal returns the broker's store when a database is configured (the
// flag, database.url in --config, GPUBROKER_DATABASE_URL), else nil.
func (f yarnAdminFlags) journal(ctx context.Context, e env) (*store.Store, error) {
	url := *f.dbURL
	if url == "" && *f.config != "" {
		cfg, err := loadConfig(*f.config)
		if err != nil {
			return nil, err
		}
		url = cfg.file.Database.URL
	}
	if url == "" {
		url = e.getenv("GPUBROKER_DATABASE_URL")
	}
	if url == "" {
		return nil, nil // no database: act directly
	}
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		return nil, fmt.Errorf("open the broker's database: %w", err)
	}
	return st, nil
}

// journalYARN journals a manual operation on host and, unless noWait,
// follows it until it ends, printing each change of step or error.
func journalYARN(ctx context.Context, e env, st *store.Store, op broker.Op, noWait bool, poll time.Duration) error {
	node := op.Node
	op, err := st.InsertOp(ctx, op)
	if errors.Is(err, broker.ErrConflict) {
		return fmt.Errorf("%s has an open operation already: %w", node, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: journaled as op %d for the leading broker: %s\n", op.Node, op.ID, op.Reason)
	if noWait {
		return nil
	}
	last := ""
	for {
		cur, err := st.GetOp(ctx, op.ID)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s: op %d %s", op.Node, op.ID, cur.State)
		if !cur.State.Terminal() {
			line += ", step " + cur.Step
		}
		if cur.LastError != "" {
			line += ": " + cur.LastError
		}
		if line != last {
			fmt.Fprintln(e.stdout, line)
			last = line
		}
		switch cur.State {
		case broker.OpDone:
			return nil
		case broker.OpFailed:
			return fmt.Errorf("op %d on %s failed: %s", op.ID, op.Node, cur.LastError)
		}
		if cur.State.Terminal() {
			return fmt.Errorf("op %d on %s ended %s", op.ID, op.Node, cur.State)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("op %d on %s still %s at step %s (the leader carries on): %w", op.ID, op.Node, cur.State, cur.Step, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// parseHostAndFlags accepts HOST before or after the flags.
func parseHostAndFlags(fs *flag.FlagSet, args []string) (string, error) {
	var host string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		host, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if host == "" && fs.NArg() > 0 {
		host = fs.Arg(0)
		if fs.NArg() > 1 {
			return "", usagef("%s: one HOST, got %q", fs.Name(), fs.Args())
		}
	} else if fs.NArg() > 0 {
		return "", usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	if host == "" {
		return "", usagef("%s: HOST is required", fs.Name())
	}
	return host, nil
}

// decommissioner builds the same Decommissioner the broker uses.
func (f yarnAdminFlags) decommissioner(e env) (*yarn.Decommissioner, error) {
	rms, admins, exclude, user := splitList(*f.rms), splitList(*f.admin), *f.exclude, *f.user
	var copies []string
	var krb *yarn.Kerberos
	if *f.config != "" {
		cfg, err := loadConfig(*f.config)
		if err != nil {
			return nil, err
		}
		if kc := yarnKerberos(cfg.file.YARN.Kerberos, e.getenv); kc != nil {
			// The process ends with the command: no renewal to stop.
			if krb, err = yarn.NewKerberos(*kc); err != nil {
				return nil, fmt.Errorf("yarn.kerberos: %w", err)
			}
		}
		if len(rms) == 0 {
			rms = cfg.file.YARN.RM
		}
		if len(admins) == 0 {
			admins = cfg.file.YARN.AdminAddress
		}
		if exclude == "" {
			exclude, copies = cfg.file.YARN.ExcludeFile, cfg.file.YARN.ExcludeFileCopies
		}
		if user == "" {
			user = cfg.file.YARN.User
		}
	}
	switch {
	case len(rms) == 0:
		return nil, usagef("--rm (or yarn.rm in --config) is required")
	case len(admins) == 0:
		return nil, usagef("--admin (or yarn.admin_address in --config) is required")
	case exclude == "":
		return nil, usagef("--exclude (or yarn.exclude_file in --config) is required")
	}
	for i, a := range admins {
		if !strings.Contains(a, ":") {
			admins[i] = a + ":8033"
		}
	}
	if user == "" {
		user = yarn.DefaultUser
	}
	ycfg, acfg := yarn.Config{RMs: rms, User: user}, rmadmin.Config{Addrs: admins, User: user}
	if krb != nil {
		ycfg.Transport, ycfg.User = yarn.NewSPNEGOTransport(krb, nil), "-"
		acfg.Kerberos, acfg.ServerPrincipal = krb, krb.RMPrincipal()
	}
	client, err := yarn.NewClient(ycfg)
	if err != nil {
		return nil, usagef("%s", err)
	}
	admin, err := rmadmin.New(acfg)
	if err != nil {
		return nil, usagef("%s", err)
	}
	ex, err := yarn.NewExcludeFile(exclude, copies...)
	if err != nil {
		return nil, usagef("%s", err)
	}
	return yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runYARNDecommission(ctx context.Context, e env, args []string) error {
	fs := newFlags("yarn decommission", e)
	timeout := fs.Duration("timeout", 10*time.Minute, "graceful timeout: running containers may finish until then")
	noWait := fs.Bool("no-wait", false, "start the decommission and return without waiting for DECOMMISSIONED")
	poll := fs.Duration("poll", 2*time.Second, "how often to check progress")
	af := addYARNAdminFlags(fs)
	host, err := parseHostAndFlags(fs, args)
	if err != nil {
		return err
	}
	if *timeout < time.Second || *poll <= 0 {
		return usagef("yarn decommission: --timeout must be at least 1s and --poll positive")
	}
	if st, err := af.journal(ctx, e); err != nil {
		return err
	} else if st != nil {
		defer st.Close()
		ctx, cancel := context.WithTimeout(ctx, *timeout+2*time.Minute)
		defer cancel()
		op, err := engine.ManualOp(host, broker.OwnerYARN, broker.OwnerNone, false, time.Now().Add(*timeout),
			fmt.Sprintf("gpubroker yarn decommission of %s, waiting at most %s for its containers (the leader never gives the RM a timeout that could kill one)", host, *timeout))
		if err != nil {
			return err
		}
		return journalYARN(ctx, e, st, op, *noWait, *poll)
	}
	d, err := af.decommissioner(e)
	if err != nil {
		return err
	}
	// The RM enforces the timeout; waiting a little longer sees it do so.
	ctx, cancel := context.WithTimeout(ctx, *timeout+2*time.Minute)
	defer cancel()
	last := ""
	for {
		st, err := d.Decommission(ctx, host, *timeout)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s: %s", host, st.State)
		if st.State == "" {
			line = host + ": not known to the ResourceManager"
		}
		if len(st.Containers) > 0 {
			line += ", running: " + strings.Join(st.Containers, ", ")
		}
		if line != last {
			fmt.Fprintln(e.stdout, line)
			last = line
		}
		if st.Done {
			if st.TimedOut {
				fmt.Fprintf(e.stdout, "%s: graceful timeout reached; cut off: %s\n", host, strings.Join(st.CutOff, ", "))
			}
			return nil
		}
		if *noWait && st.State == "DECOMMISSIONING" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("decommission %s: still %s: %w", host, st.State, ctx.Err())
		case <-time.After(*poll):
		}
	}
}

func runYARNRecommission(ctx context.Context, e env, args []string) error {
	fs := newFlags("yarn recommission", e)
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the NodeManager to be RUNNING again (0: do not wait)")
	poll := fs.Duration("poll", 2*time.Second, "how often to check progress")
	af := addYARNAdminFlags(fs)
	host, err := parseHostAndFlags(fs, args)
	if err != nil {
		return err
	}
	if *wait < 0 || *poll <= 0 {
		return usagef("yarn recommission: --wait must not be negative and --poll positive")
	}
	if st, err := af.journal(ctx, e); err != nil {
		return err
	} else if st != nil {
		defer st.Close()
		wctx, cancel := context.WithTimeout(ctx, max(*wait, time.Second))
		defer cancel()
		op, err := engine.ManualOp(host, broker.OwnerNone, broker.OwnerYARN, false, time.Time{},
			"gpubroker yarn recommission of "+host)
		if err != nil {
			return err
		}
		return journalYARN(wctx, e, st, op, *wait == 0, *poll)
	}
	d, err := af.decommissioner(e)
	if err != nil {
		return err
	}
	if *wait == 0 {
		if err := d.Admit(ctx, host); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: recommissioned; a DECOMMISSIONED NodeManager registers again when it is restarted\n", host)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	if err := d.Recommission(wctx, host, *poll); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w (a DECOMMISSIONED NodeManager has shut down: restart it)", err)
		}
		return err
	}
	fmt.Fprintf(e.stdout, "%s: RUNNING\n", host)
	return nil
}
