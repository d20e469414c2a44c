package app

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"

	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/kdc"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestOpenWithKerberos: with YARN.Kerberos the assembly logs in and its
// YARN side observes an RM that takes only SPNEGO (yarnsim behind gokrb5's
// acceptor, tickets from a real KDC); a keytab the KDC no longer accepts
// is a usage error naming the principal.
func TestOpenWithKerberos(t *testing.T) {
	ctx := context.Background()
	k, err := kdc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	bk, hk := filepath.Join(k.Dir, "broker.keytab"), filepath.Join(k.Dir, "http.keytab")
	for p, kt := range map[string]string{"gpubroker": bk, "HTTP/localhost": hk} {
		if err := k.AddPrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := k.Keytab(ctx, kt, p); err != nil {
			t.Fatal(err)
		}
	}
	kt, err := keytab.Load(hk)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(spnego.SPNEGOKRB5Authenticate(sim.Handler(), kt, service.DecodePAC(false)))
	t.Cleanup(srv.Close)
	rm := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	krb := &yarn.KerberosConfig{Principal: "gpubroker", Keytab: bk, Krb5Conf: k.Conf}
	pools := &registeringPools{}
	m, err := Open(ctx, Config{Store: st, YARN: YARNConfig{RM: []string{rm}, Kerberos: krb}, Cloud: CloudConfig{NodePool: pools}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	rt, err := m.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pools.mu.Lock()
	seen := slices.Clone(pools.seen)
	pools.mu.Unlock()
	if !slices.Contains(seen, "gpu-1") {
		t.Fatalf("observed %v through SPNEGO, want gpu-1", seen)
	}

	if err := k.Rekey(ctx, "gpubroker"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Config{Store: st, YARN: YARNConfig{RM: []string{rm}, Kerberos: krb}, Cloud: CloudConfig{NodePool: noPools{}}})
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(ue.Msg, "config: yarn.kerberos: kerberos login as gpubroker@"+kdc.Realm+" with keytab "+bk) {
		t.Fatalf("open with a stale keytab: %v", err)
	}
}
