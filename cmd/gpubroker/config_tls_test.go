package main

import (
	"strings"
	"testing"
	"time"
)

// TestConfigTLSAndAudit: api.tls must be whole (each problem names the
// field and the fix), and audit.retention defaults to 90 days and refuses
// nonsense. The files themselves are read when serve starts.
func TestConfigTLSAndAudit(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"api:\n  tls: {key_file: /k}\n", "api.tls.cert_file: is missing: key_file is set"},
		{"api:\n  tls: {cert_file: /c}\n", "api.tls.key_file: is missing: cert_file is set"},
		{"api:\n  tls: {client_ca_file: /ca}\n", "api.tls.client_ca_file: needs api.tls.cert_file and key_file"},
		{"api:\n  tls: {cert: /c}\n", `unknown key "cert" in api.tls`},
		{"audit: {retention: 10m}\n", "audit.retention: must be at least 1h"},
		{"audit: {retention: -1h}\n", "audit.retention: must be at least 1h"},
		{"audit: {keep: 1h}\n", `unknown key "keep" in audit`},
	} {
		_, err := parseConfig("test.yaml", []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
	c, err := parseConfig("test.yaml", []byte("api:\n  tls: {cert_file: /c, key_file: /k, client_ca_file: /ca}\naudit: {retention: 720h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := appConfig(c, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS.CertFile != "/c" || cfg.TLS.KeyFile != "/k" || cfg.TLS.ClientCAFile != "/ca" || cfg.AuditRetention != 720*time.Hour {
		t.Fatalf("app config %+v %v", cfg.TLS, cfg.AuditRetention)
	}
}
