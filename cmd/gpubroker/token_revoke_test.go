package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestTokenExpiresRevokeList: --expires sets the expiry, revoke disables a
// token and says how soon the API refuses it, list shows both without
// secrets, and each change is in the audit trail as the CLI's user.
func TestTokenExpiresRevokeList(t *testing.T) {
	url := pg.NewDatabase(t, store.Migrate)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	environ := map[string]string{"GPUBROKER_DATABASE_URL": url, "USER": "alice"}
	code, out, errOut := runCLI(t, environ, "token", "create", "--role", "viewer", "--expires", "720h")
	if code != 0 || !strings.Contains(errOut, "expires ") {
		t.Fatalf("create with --expires: %d %q", code, errOut)
	}
	secret := strings.TrimSpace(out)
	tok, err := st.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tok.ExpiresAt); d < 719*time.Hour || d > 720*time.Hour {
		t.Fatalf("expires in %s, want 720h", d)
	}
	id := strconv.FormatInt(tok.ID, 10)

	code, _, errOut = runCLI(t, environ, "token", "revoke", id)
	if code != 0 || !strings.Contains(errOut, "within 10s") {
		t.Fatalf("revoke: %d %q", code, errOut)
	}
	if _, err := st.Authenticate(ctx, secret); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("revoked token authenticates: %v", err)
	}
	code, out, errOut = runCLI(t, environ, "token", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], id+" ") ||
		strings.Count(lines[1], "Z") != 4 || strings.Contains(out, "gpb_") {
		t.Fatalf("list: %d %q %q (want the token with created, expires, last used and revoked times, no secret)", code, out, errOut)
	}
	es, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(es) != 2 {
		t.Fatalf("audit: %+v %v", es, err)
	}
	rev, created := es[0], es[1]
	if created.Route != "token create" || created.Actor != "alice" || created.ActorKind != store.ActorCLI ||
		created.Target != "token/"+id || created.Before != nil || !strings.Contains(string(created.After), `"role": "viewer"`) {
		t.Fatalf("create entry %+v (after %s)", created, created.After)
	}
	if rev.Route != "token revoke" || rev.Target != "token/"+id || !strings.Contains(string(rev.After), `"revoked_at"`) ||
		strings.Contains(string(rev.Before), `"revoked_at"`) {
		t.Fatalf("revoke entry %+v (before %s, after %s)", rev, rev.Before, rev.After)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "revoke", id}, "already revoked"},
		{[]string{"token", "revoke", "999"}, "no token 999"},
		{[]string{"token", "revoke"}, "name the token to revoke by its id"},
		{[]string{"token", "revoke", "x1"}, `got "x1"`},
		{[]string{"token", "create", "--role", "viewer", "--expires", "-1h"}, "--expires must be at least 1m"},
		{[]string{"token", "create", "--role", "viewer", "--expires", "soon"}, "-expires"},
		{[]string{"token", "list", "extra"}, "unexpected arguments"},
	} {
		code, out, errOut := runCLI(t, environ, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: got %d %q %q, want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}
