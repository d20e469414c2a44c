package kdc

import (
	"context"
	"path/filepath"
	"testing"
)

// TestKDCIssuesTickets: the realm is created, a principal's keytab gets a
// ticket from the running KDC, and an unknown principal does not.
func TestKDCIssuesTickets(t *testing.T) {
	ctx := context.Background()
	k, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.AddPrincipal(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	kt := filepath.Join(k.Dir, "alice.keytab")
	if err := k.Keytab(ctx, kt, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := k.Kinit(ctx, filepath.Join(k.Dir, "cc"), kt, k.Principal("alice")); err != nil {
		t.Fatalf("kinit: %v\nkdc log:\n%s", err, k.Log())
	}
	if err := k.Kinit(ctx, filepath.Join(k.Dir, "cc2"), kt, k.Principal("bob")); err == nil {
		t.Fatal("kinit as a principal missing from the keytab succeeded")
	}
}
