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
