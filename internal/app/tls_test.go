package app

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/certtest"
)

// runServing runs the assembly with cfg's API until the test ends and
// returns the address it listens on (or Run's error, when it stops first).
func runServing(t *testing.T, cfg Config) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ready := make(chan string, 1)
	cfg.Store, cfg.Cloud, cfg.Listen, cfg.Ready = st, CloudConfig{NodePool: noPools{}}, "127.0.0.1:0", func(a string) { ready <- a }
	m, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case a := <-ready:
		return a, nil
	case err := <-done:
		done <- err
		return "", err
	}
}

// TestServeTLS: with api.tls the API answers HTTPS only — plain HTTP gets
// a 400 saying it reached an HTTPS server — rotated files are served
// without a restart, and an agent's client certificate authenticates it.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	first := ca.Issue(t, "gpubroker", "127.0.0.1")
	files := first.Write(t, dir, ca)
	addr, err := runServing(t, Config{TLS: TLSConfig{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA}})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	get := func(c *http.Client, url string) (int, string) {
		t.Helper()
		res, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if code, body := get(https, "https://"+addr+"/healthz"); code != 200 {
		t.Fatalf("https: %d %s", code, body)
	}
	// Browsers speak HTTP/2: the per-handshake configuration offers it.
	h2 := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if res, err := h2.Get("https://" + addr + "/healthz"); err != nil || res.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 over TLS: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	if code, body := get(http.DefaultClient, "http://"+addr+"/healthz"); code != 400 || !strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP to the TLS listener: %d %q, want 400 saying it is an HTTPS server", code, body)
	}

	if got := serial(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("served %s, want %s", got, first.Cert.SerialNumber)
	}
	second := ca.Issue(t, "gpubroker", "127.0.0.1")
	second.Write(t, dir, ca)
	if got := serial(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotating the files served %s, want the new certificate %s", got, second.Cert.SerialNumber)
	}

	agent := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(),
		Certificates: []tls.Certificate{ca.Issue(t, "ip-10-0-0-1").TLS}}}}
	res, err := agent.Post("https://"+addr+"/api/v1/nodes/ip-10-0-0-1/report", "application/json",
		strings.NewReader(`{"at":"`+time.Now().UTC().Format(time.RFC3339)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 202 {
		t.Fatalf("agent report by client certificate: %d %s", res.StatusCode, b)
	}
}

// TestServeTLSConfigErrors: half a TLS configuration or unreadable files
// stop serve with a usage error naming the api.tls field.
func TestServeTLSConfigErrors(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	files := ca.Issue(t, "gpubroker").Write(t, t.TempDir(), ca)
	for _, c := range []struct {
		tls  TLSConfig
		want string
	}{
		{TLSConfig{KeyFile: files.Key}, "config: api.tls.cert_file is required with key_file"},
		{TLSConfig{CertFile: files.Cert}, "config: api.tls.key_file is required with cert_file"},
		{TLSConfig{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.Key}, "config: api.tls.client_ca_file "},
		{TLSConfig{CertFile: files.Cert + ".missing", KeyFile: files.Key}, "config: api.tls.cert_file cannot be read"},
	} {
		_, err := runServing(t, Config{TLS: c.tls})
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.HasPrefix(ue.Msg, c.want) {
			t.Errorf("%+v: %v, want a usage error starting %q", c.tls, err, c.want)
		}
	}
}

// TestAuditRetentionDefault: audit entries are kept 90 days unless the
// configuration says otherwise.
func TestAuditRetentionDefault(t *testing.T) {
	if got := (&Main{}).auditRetention(); got != 90*24*time.Hour {
		t.Fatalf("default retention %s, want 90 days", got)
	}
	if got := (&Main{cfg: Config{AuditRetention: time.Hour}}).auditRetention(); got != time.Hour {
		t.Fatalf("configured retention %s, want 1h", got)
	}
}
