package certreload_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/certreload"
	"github.com/gpubroker/gpubroker/test/certtest"
)

// serve accepts TLS connections with cfg and completes their handshakes.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// served is the serial number of the certificate a new connection gets.
func served(t *testing.T, addr string, ca *certtest.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "broker.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestRotatedCertificateIsServedWithoutRestart: replacing the files (by
// rename, as a Secret update does) changes the certificate the next
// handshake gets; a half-written pair keeps the old one in service, with
// one warning, until the pair is whole.
func TestRotatedCertificateIsServedWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	first := ca.Issue(t, "broker", "broker.test")
	files := first.Write(t, dir, ca)
	var logs bytes.Buffer
	r, err := certreload.New(certreload.Config{CertFile: files.Cert, KeyFile: files.Key,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())
	if got := served(t, addr, ca); got != first.Cert.SerialNumber.String() {
		t.Fatalf("served %s, want the first certificate %s", got, first.Cert.SerialNumber)
	}

	second := ca.Issue(t, "broker", "broker.test")
	second.Write(t, dir, ca)
	if got := served(t, addr, ca); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation served %s, want the new certificate %s", got, second.Cert.SerialNumber)
	}

	// A new certificate whose key has not been written yet.
	third := ca.Issue(t, "broker", "broker.test")
	writeRename(t, files.Cert, third.CertPEM)
	for range 2 {
		if got := served(t, addr, ca); got != second.Cert.SerialNumber.String() {
			t.Fatalf("with a mismatched pair served %s, want the previous certificate %s", got, second.Cert.SerialNumber)
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("%d warnings about the mismatched pair, want 1: %s", n, logs.String())
	}
	writeRename(t, files.Key, third.KeyPEM)
	if got := served(t, addr, ca); got != third.Cert.SerialNumber.String() {
		t.Fatalf("after the key arrived served %s, want %s", got, third.Cert.SerialNumber)
	}
}

func writeRename(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestRotatedClientCertificate: a client presenting ClientCertificate
// sends the rotated certificate on its next connection, and the server's
// client CAs verify it.
func TestRotatedClientCertificate(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	srvFiles := ca.Issue(t, "broker", "broker.test").Write(t, t.TempDir(), ca)
	srv, err := certreload.New(certreload.Config{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, ClientCAFile: srvFiles.CA})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				got <- "handshake: " + err.Error()
			} else if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
				got <- pc[0].Subject.CommonName
			} else {
				got <- "no certificate"
			}
			c.Close()
		}
	}()
	dir := t.TempDir()
	agentFiles := ca.Issue(t, "ip-10-0-0-1").Write(t, dir, ca)
	cl, err := certreload.New(certreload.Config{CertFile: agentFiles.Cert, KeyFile: agentFiles.Key})
	if err != nil {
		t.Fatal(err)
	}
	dial := func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "broker.test",
			GetClientCertificate: cl.ClientCertificate})
		if err == nil {
			_, _ = c.Read(make([]byte, 1)) // TLS 1.3: the server's verdict arrives after the client's handshake
			c.Close()
		}
		return <-got
	}
	if s := dial(); s != "ip-10-0-0-1" {
		t.Fatalf("server saw %q, want the first client certificate", s)
	}
	ca.Issue(t, "ip-10-0-0-2").Write(t, dir, ca)
	if s := dial(); s != "ip-10-0-0-2" {
		t.Fatalf("server saw %q, want the rotated client certificate", s)
	}
	// A certificate from another CA is refused by the server.
	other := certtest.NewCA(t, "other CA")
	other.Issue(t, "ip-10-0-0-3").Write(t, dir, other)
	if s := dial(); !strings.HasPrefix(s, "handshake: ") {
		t.Fatalf("server accepted a certificate of another CA: %q", s)
	}
}

// TestNewNamesTheField: every problem names the field to fix.
func TestNewNamesTheField(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	f := ca.Issue(t, "broker").Write(t, dir, ca)
	other := ca.Issue(t, "other").Write(t, t.TempDir(), ca)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   certreload.Config
		field string
	}{
		{certreload.Config{KeyFile: f.Key}, "cert_file"},
		{certreload.Config{CertFile: f.Cert}, "key_file"},
		{certreload.Config{ClientCAFile: f.CA}, "cert_file"},
		{certreload.Config{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: f.Key}, "cert_file"},
		{certreload.Config{CertFile: f.Cert, KeyFile: other.Key}, "key_file"},
		{certreload.Config{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: garbage}, "client_ca_file"},
		{certreload.Config{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: filepath.Join(dir, "nope")}, "client_ca_file"},
	} {
		_, err := certreload.New(c.cfg)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || ve.Problem == "" {
			t.Errorf("%+v: %v, want a problem with field %s", c.cfg, err, c.field)
		}
	}
	if _, err := certreload.New(certreload.Config{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: f.CA}); err != nil {
		t.Fatal(err)
	}
}
