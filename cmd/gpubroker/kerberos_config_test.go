package main

import (
	"os"
	"strings"
	"testing"
)

// TestKerberosConfig: yarn.kerberos parses into the yarn package's
// configuration with the environment's defaults, and each bad value is
// refused naming its field and the fix.
func TestKerberosConfig(t *testing.T) {
	base := "yarn:\n  rm: [http://rm1:8088]\n  kerberos:\n"
	c, err := parseConfig("t.yaml", []byte(base+"    principal: gpubroker/_HOST@EXAMPLE.COM\n    keytab: /etc/security/keytabs/gpubroker.keytab\n    rm_principal: rm/_HOST@EXAMPLE.COM\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KRB5_CONFIG": "/etc/krb5-test.conf", "KRB5CCNAME": "FILE:/tmp/cc"}
	kc := yarnKerberos(c.file.YARN.Kerberos, func(k string) string { return env[k] })
	if kc.Principal != "gpubroker/_HOST@EXAMPLE.COM" || kc.Keytab != "/etc/security/keytabs/gpubroker.keytab" || kc.Krb5Conf != "/etc/krb5-test.conf" || kc.TicketCache != "" || kc.RMPrincipal != "rm/_HOST@EXAMPLE.COM" {
		t.Fatalf("%+v", kc)
	}
	c, err = parseConfig("t.yaml", []byte(base+"    principal: alice@EXAMPLE.COM\n"))
	if err != nil {
		t.Fatal(err)
	}
	if kc := yarnKerberos(c.file.YARN.Kerberos, func(k string) string { return env[k] }); kc.TicketCache != "/tmp/cc" {
		t.Fatalf("ticket cache %q, want KRB5CCNAME's", kc.TicketCache)
	}
	c, err = parseConfig("t.yaml", []byte("yarn:\n  rm: [http://rm1:8088]\n"))
	if err != nil || yarnKerberos(c.file.YARN.Kerberos, func(string) string { return "" }) != nil {
		t.Fatalf("no yarn.kerberos: %v", err)
	}
	for _, bad := range []struct{ body, want string }{
		{"    keytab: /k\n", "yarn.kerberos.principal: must name the broker's principal"},
		{"    principal: a b\n", "yarn.kerberos.principal: must not contain spaces"},
		{"    principal: a\n    keytab: /k\n    ticket_cache: /c\n", "yarn.kerberos.ticket_cache: set keytab or ticket_cache, not both"},
		{"    principal: a\n    service_principal: HTTP\n", "yarn.kerberos.service_principal: must be a service principal"},
		{"    principal: a\n    rm_principal: rm\n", "yarn.kerberos.rm_principal: must be a service principal"},
		{"    principal: a\n    kdc: x\n", "kdc"},
	} {
		_, err := parseConfig("t.yaml", []byte(base+bad.body))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err = %v, want %q", bad.body, err, bad.want)
		}
	}
}

// TestKerberosREADMESample: the kerberized sample of the README's
// "Secure clusters" section is a valid configuration.
func TestKerberosREADMESample(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### Kerberos\n")
	if !ok {
		t.Fatal("README has no Kerberos section")
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	sample, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("the Kerberos section has no YAML sample")
	}
	c, err := parseConfig("README.md", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.file.YARN.Kerberos; k == nil || k.Principal != "gpubroker/_HOST@EXAMPLE.COM" || k.RMPrincipal == "" {
		t.Fatalf("%+v", k)
	}
}
