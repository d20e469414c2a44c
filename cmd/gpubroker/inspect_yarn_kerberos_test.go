package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"

	"github.com/gpubroker/gpubroker/test/kdc"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestInspectYARNKerberos: with yarn.kerberos in --config, inspect yarn
// reads an RM behind SPNEGO (yarnsim behind gokrb5's acceptor with the
// HTTP/localhost keytab of a real KDC) and says as whom it
// authenticated, in the table and in --json; the same RM without the
// kerberos section is a 401.
func TestInspectYARNKerberos(t *testing.T) {
	ctx := context.Background()
	k, err := kdc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
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
	defer srv.Close()
	rm := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	cfg := writeFile(t, `
yarn:
  rm: ["`+rm+`"]
  kerberos:
    principal: gpubroker
    keytab: `+bk+`
    krb5_conf: `+k.Conf+`
`)
	code, out, errOut := runCLI(t, nil, "inspect", "yarn", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "Kerberos: authenticated as gpubroker@" + kdc.Realm + " (keytab " + bk + ") to " + rm + " by spnego"; !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	code, out, errOut = runCLI(t, nil, "inspect", "yarn", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Kerberos struct {
			Principal, Via, Server string
		} `json:"kerberos"`
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Kerberos.Principal != "gpubroker@"+kdc.Realm || got.Kerberos.Via != "spnego" || got.Kerberos.Server != rm || len(got.Nodes) != 1 {
		t.Fatalf("%s", out)
	}
	plain := writeFile(t, "yarn:\n  rm: [\""+rm+"\"]\n")
	code, _, errOut = runCLI(t, nil, "inspect", "yarn", "--config", plain)
	if code == 0 || !strings.Contains(errOut, "answered 401 asking for Kerberos") {
		t.Fatalf("without kerberos: exit %d: %s", code, errOut)
	}
}
