package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestAuditRecordListPrune: entries keep who, what and the JSON values;
// the filters (tenant, target, since/until) and the id cursor select
// them newest first; pruning removes only the old ones.
func TestAuditRecordListPrune(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	base := store.AuditEntry{Actor: "admin", ActorKind: store.ActorToken, Role: store.RoleAdmin, TokenID: 7,
		Method: "PUT", Route: "/api/v1/tenants/{name}", Status: 200}
	var ids []int64
	for i, e := range []struct {
		target, tenant string
		at             time.Time
	}{
		{"tenant/ml", "ml", t0.Add(-100 * 24 * time.Hour)},
		{"tenant/ml", "ml", t0.Add(-2 * time.Hour)},
		{"tenant/vision", "vision", t0.Add(-time.Hour)},
		{"policy", "", t0},
	} {
		en := base
		en.Target, en.Tenant, en.At = e.target, e.tenant, e.at
		en.Before = json.RawMessage(`{"max_gpus":` + itoa(i) + `}`)
		en.After = json.RawMessage(`{"max_gpus":` + itoa(i+1) + `}`)
		got, err := s.RecordAudit(ctx, en)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID == 0 || !got.At.Equal(e.at) {
			t.Fatalf("recorded %+v", got)
		}
		ids = append(ids, got.ID)
	}
	// At defaults to the database's clock; a create has no before.
	now, err := s.RecordAudit(ctx, store.AuditEntry{Actor: "alice", ActorKind: store.ActorCLI, Method: "CLI",
		Route: "token create", Target: "token/1", Status: 200, After: json.RawMessage(`{"id":1}`)})
	if err != nil || now.At.IsZero() || now.Before != nil {
		t.Fatalf("record without a time: %+v %v", now, err)
	}
	if _, err := s.RecordAudit(ctx, store.AuditEntry{ActorKind: store.ActorToken, Method: "PUT", Route: "/x"}); !isInvalid(err, "actor") {
		t.Fatalf("entry without an actor: %v", err)
	}
	if _, err := s.RecordAudit(ctx, store.AuditEntry{Actor: "x", ActorKind: "root", Method: "PUT", Route: "/x"}); !isInvalid(err, "actor_kind") {
		t.Fatalf("entry with a bad actor kind: %v", err)
	}

	list := func(f store.AuditFilter) []int64 {
		t.Helper()
		es, err := s.ListAudit(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	eq := func(what string, got []int64, want ...int64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: got %v, want %v", what, got, want)
			}
		}
	}
	eq("all", list(store.AuditFilter{}), now.ID, ids[3], ids[2], ids[1], ids[0])
	eq("tenant ml", list(store.AuditFilter{Tenant: "ml"}), ids[1], ids[0])
	eq("target", list(store.AuditFilter{Target: "tenant/vision"}), ids[2])
	eq("since/until", list(store.AuditFilter{Since: t0.Add(-2 * time.Hour), Until: t0}), ids[2], ids[1])
	eq("page 1", list(store.AuditFilter{Limit: 2}), now.ID, ids[3])
	eq("page 2", list(store.AuditFilter{Limit: 2, BeforeID: ids[3]}), ids[2], ids[1])

	es, err := s.ListAudit(ctx, store.AuditFilter{Target: "tenant/vision"})
	if err != nil {
		t.Fatal(err)
	}
	e := es[0]
	if e.Actor != "admin" || e.ActorKind != store.ActorToken || e.Role != store.RoleAdmin || e.TokenID != 7 ||
		e.Method != "PUT" || e.Route != "/api/v1/tenants/{name}" || e.Tenant != "vision" || e.Status != 200 ||
		string(e.Before) != `{"max_gpus": 2}` || string(e.After) != `{"max_gpus": 3}` {
		t.Fatalf("read back %+v (before %s, after %s)", e, e.Before, e.After)
	}

	n, err := s.PruneAudit(ctx, t0.Add(-90*24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the one entry older than 90 days", n, err)
	}
	eq("after prune", list(store.AuditFilter{}), now.ID, ids[3], ids[2], ids[1])
}

func isInvalid(err error, field string) bool {
	var ve *broker.ValidationError
	return errors.As(err, &ve) && ve.Field == field
}

// TestTokenExpiry: a token past its expiry no longer authenticates and
// says so (an *ExpiredError that is also ErrNotFound); one before its
// expiry works; ListTokens shows expiry, use and revocation.
func TestTokenExpiry(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	past, _, err := s.CreateExpiringToken(ctx, "old", store.RoleViewer, "", time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	future, ftok, err := s.CreateExpiringToken(ctx, "new", store.RoleViewer, "", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Authenticate(ctx, past)
	var ee *store.ExpiredError
	if !errors.As(err, &ee) || !errors.Is(err, broker.ErrNotFound) || ee.At.IsZero() {
		t.Fatalf("expired token: %v, want an ExpiredError matching ErrNotFound", err)
	}
	tok, err := s.Authenticate(ctx, future)
	if err != nil || tok.ID != ftok.ID || !tok.ExpiresAt.Equal(ftok.ExpiresAt) {
		t.Fatalf("unexpired token: %+v %v (created %+v)", tok, err, ftok)
	}
	if err := s.RevokeToken(ctx, ftok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, future); !errors.Is(err, broker.ErrNotFound) || errors.As(err, &ee) {
		t.Fatalf("revoked token: %v, want ErrNotFound (not expired)", err)
	}
	ts, err := s.ListTokens(ctx)
	if err != nil || len(ts) != 2 {
		t.Fatalf("list: %+v %v", ts, err)
	}
	if ts[0].Name != "old" || !ts[0].LastUsedAt.IsZero() || ts[0].ExpiresAt.IsZero() {
		t.Fatalf("the expired token: %+v (an expired attempt is not a use)", ts[0])
	}
	if ts[1].Name != "new" || ts[1].LastUsedAt.IsZero() || ts[1].RevokedAt.IsZero() {
		t.Fatalf("the revoked token: %+v", ts[1])
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
