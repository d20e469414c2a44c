package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/certtest"
)

// TestClientCertificateInsteadOfAToken: with --cert-file and --key-file
// (and --ca-file for the broker's CA) the agent reports over mutual TLS
// without a token file; the broker stores the report of the node the
// certificate names, and refuses the report of another node.
func TestClientCertificateInsteadOfAToken(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "cluster CA")
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "gpubroker", "127.0.0.1").TLS},
		ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	files := ca.Issue(t, "ip-10-0-1-7.ec2.internal").Write(t, t.TempDir(), ca)
	g := newGPUs(50, 50, 50, 50, 50, 50, 50, 50)
	args := []string{"--broker", srv.URL, "--cert-file", files.Cert, "--key-file", files.Key, "--ca-file", files.CA, "--once"}

	r := runAgent(t, g.srv, map[string]string{"NODE_NAME": "ip-10-0-1-7.ec2.internal"}, args...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "reported node ip-10-0-1-7.ec2.internal: 8 GPUs") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if rep, err := st.LatestReport(ctx, "ip-10-0-1-7.ec2.internal"); err != nil || len(rep.GPUs) != 8 {
		t.Fatalf("stored report %+v %v", rep, err)
	}
	r = runAgent(t, g.srv, map[string]string{"NODE_NAME": "ip-10-0-1-8.ec2.internal"}, args...)
	if r.code != 1 || !strings.Contains(r.stderr, "names another node") {
		t.Fatalf("another node's report: exit %d stderr %q", r.code, r.stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker", srv.URL, "--cert-file", files.Cert, "--once"}, "--key-file: name the private key"},
		{[]string{"--broker", srv.URL, "--key-file", files.Key, "--once"}, "--cert-file: name the client certificate"},
		{[]string{"--broker", "http://b", "--cert-file", files.Cert, "--key-file", files.Key, "--once"}, "needs an https broker URL"},
		{[]string{"--broker", srv.URL, "--once"}, "--token-file: name the file holding the agent token, or give --cert-file"},
		{[]string{"--broker", srv.URL, "--cert-file", files.Cert, "--key-file", files.CA, "--allow-no-gpu", "--once"}, "--key-file: "},
	} {
		r := runAgent(t, g.srv, map[string]string{"NODE_NAME": "n"}, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d %q, want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
