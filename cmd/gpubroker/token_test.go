package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func TestTokenCreate(t *testing.T) {
	url := pg.NewDatabase(t, store.Migrate)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "ml", MaxGPUs: 4, Weight: 1}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, nil, "token", "create", "--role", "admin", "--database-url", url)
	if code != 0 || !strings.HasPrefix(out, "gpb_") || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, `"admin" (admin)`) {
		t.Fatalf("create admin token: %d %q %q", code, out, errOut)
	}
	if strings.Contains(errOut, strings.TrimSpace(out)) {
		t.Fatal("the secret is printed twice")
	}
	tok, err := st.Authenticate(ctx, strings.TrimSpace(out))
	if err != nil || tok.Role != store.RoleAdmin || tok.Name != "admin" {
		t.Fatalf("the printed secret does not authenticate: %+v %v", tok, err)
	}

	code, out, errOut = runCLI(t, map[string]string{"GPUBROKER_DATABASE_URL": url},
		"token", "create", "--role", "tenant-admin", "--tenant", "ml", "--name", "ml-ci")
	if code != 0 {
		t.Fatalf("tenant-admin token: %d %q", code, errOut)
	}
	tok, err = st.Authenticate(ctx, strings.TrimSpace(out))
	if err != nil || tok.Role != store.RoleTenantAdmin || tok.Tenant != "ml" || tok.Name != "ml-ci" {
		t.Fatalf("tenant-admin token: %+v %v", tok, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token"}, "name an action"},
		{[]string{"token", "delete"}, `unknown action "delete"`},
		{[]string{"token", "create", "--database-url", url}, "--role is required"},
		{[]string{"token", "create", "--role", "root", "--database-url", url}, `--role must be admin, tenant-admin, viewer or agent, got "root"`},
		{[]string{"token", "create", "--role", "tenant-admin", "--database-url", url}, "--tenant is required"},
		{[]string{"token", "create", "--role", "viewer", "--tenant", "ml", "--database-url", url}, "--tenant is only for --role tenant-admin"},
		{[]string{"token", "create", "--role", "tenant-admin", "--tenant", "nope", "--database-url", url}, `--tenant "nope": no such tenant`},
		{[]string{"token", "create", "--role", "viewer"}, "no database"},
		{[]string{"token", "create", "--role", "viewer", "extra", "--database-url", url}, "unexpected arguments"},
	} {
		code, out, errOut := runCLI(t, nil, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: got %d %q %q, want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestTokenCreateAgentIsBound: an agent token is created for its nodes
// (--node, repeatable) or a pool, and only so; the binding is stored with
// it and shown by token list.
func TestTokenCreateAgentIsBound(t *testing.T) {
	url := pg.NewDatabase(t, store.Migrate)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "gpu-training-group", Provider: "aws", Group: "gpu-training-group",
		GPUModel: "H100", GPUsPerNode: 4, MaxNodes: 5, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, nil, "token", "create", "--role", "agent", "--node", "gpu-2", "--node", "gpu-1", "--database-url", url)
	if code != 0 || !strings.Contains(errOut, "for node gpu-1, gpu-2") {
		t.Fatalf("agent token for two nodes: %d %q", code, errOut)
	}
	tok, err := st.Authenticate(ctx, strings.TrimSpace(out))
	if err != nil || tok.Role != store.RoleAgent || strings.Join(tok.Nodes, " ") != "gpu-1 gpu-2" || tok.Pool != "" {
		t.Fatalf("agent token: %+v %v", tok, err)
	}
	code, out, errOut = runCLI(t, nil, "token", "create", "--role", "agent", "--pool", "gpu-training-group", "--database-url", url)
	if code != 0 {
		t.Fatalf("agent token for a pool: %d %q", code, errOut)
	}
	if tok, err = st.Authenticate(ctx, strings.TrimSpace(out)); err != nil || tok.Pool != "gpu-training-group" || len(tok.Nodes) != 0 {
		t.Fatalf("pool token: %+v %v", tok, err)
	}
	code, out, _ = runCLI(t, nil, "token", "list", "--database-url", url)
	if code != 0 || !strings.Contains(out, "node/gpu-1,gpu-2") || !strings.Contains(out, "pool/gpu-training-group") {
		t.Fatalf("list: %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "agent"}, "--node NAME (repeatable) or --pool NAME is required with --role agent"},
		{[]string{"--role", "agent", "--node", "a", "--pool", "gpu-training-group"}, "--node and --pool exclude each other"},
		{[]string{"--role", "viewer", "--node", "a"}, "--node and --pool are only for --role agent"},
		{[]string{"--role", "agent", "--pool", "nope"}, `--pool "nope": no such pool`},
		{[]string{"--role", "agent", "--node", "*.ec2.internal"}, "without wildcards"},
	} {
		code, _, errOut := runCLI(t, nil, append(append([]string{"token", "create"}, c.args...), "--database-url", url)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: %d %q, want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
