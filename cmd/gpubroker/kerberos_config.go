package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// kerberosConfig is yarn.kerberos: the broker's identity on a kerberized
// cluster (SPNEGO to the RM's REST API, SASL to its admin port and to the
// NameNode).
type kerberosConfig struct {
	// Principal is the broker's principal, e.g. gpubroker/_HOST@EXAMPLE.COM.
	Principal string `yaml:"principal"`
	// Keytab holds its keys; empty: the ticket cache (KRB5CCNAME).
	Keytab string `yaml:"keytab"`
	// TicketCache is a kinit ticket cache used without a keytab
	// (default: KRB5CCNAME, else /tmp/krb5cc_UID).
	TicketCache string `yaml:"ticket_cache"`
	// Krb5Conf is the krb5.conf (default: KRB5_CONFIG, else /etc/krb5.conf).
	Krb5Conf string `yaml:"krb5_conf"`
	// ServicePrincipal is the RM web endpoint's principal (default HTTP/_HOST).
	ServicePrincipal string `yaml:"service_principal"`
	// RMPrincipal is yarn.resourcemanager.principal (default rm/_HOST).
	RMPrincipal string `yaml:"rm_principal"`
	// NameNodePrincipal is dfs.namenode.kerberos.principal (default nn/_HOST).
	NameNodePrincipal string `yaml:"namenode_principal"`
}

// validate checks yarn.kerberos without touching the files it names.
func (k *kerberosConfig) validate() error {
	if k == nil {
		return nil
	}
	if strings.TrimSpace(k.Principal) == "" {
		return broker.Invalid("yarn.kerberos.principal", "must name the broker's principal, e.g. gpubroker/_HOST@EXAMPLE.COM")
	}
	if strings.ContainsAny(k.Principal, " \t") {
		return broker.Invalid("yarn.kerberos.principal", "must not contain spaces, got %q", k.Principal)
	}
	if k.Keytab != "" && k.TicketCache != "" {
		return broker.Invalid("yarn.kerberos.ticket_cache", "set keytab or ticket_cache, not both")
	}
	for _, f := range []struct{ field, v, eg string }{
		{"service_principal", k.ServicePrincipal, "HTTP/_HOST"},
		{"rm_principal", k.RMPrincipal, "rm/_HOST@EXAMPLE.COM"},
		{"namenode_principal", k.NameNodePrincipal, "nn/_HOST@EXAMPLE.COM"},
	} {
		if f.v != "" && !strings.Contains(f.v, "/") {
			return broker.Invalid("yarn.kerberos."+f.field, "must be a service principal SERVICE/HOST[@REALM] such as %s, got %q", f.eg, f.v)
		}
	}
	return nil
}

// yarnKerberos is the yarn package's configuration for k; the defaults
// come from the environment as the MIT tools take them. Nil when k is.
func yarnKerberos(k *kerberosConfig, getenv func(string) string) *yarn.KerberosConfig {
	if k == nil {
		return nil
	}
	c := &yarn.KerberosConfig{Principal: k.Principal, Keytab: k.Keytab, TicketCache: k.TicketCache, Krb5Conf: k.Krb5Conf,
		ServicePrincipal: k.ServicePrincipal, RMPrincipal: k.RMPrincipal, NameNodePrincipal: k.NameNodePrincipal}
	if c.Krb5Conf == "" {
		c.Krb5Conf = getenv("KRB5_CONFIG")
	}
	if c.Keytab == "" && c.TicketCache == "" {
		c.TicketCache = strings.TrimPrefix(getenv("KRB5CCNAME"), "FILE:")
		if c.TicketCache == "" {
			c.TicketCache = "/tmp/krb5cc_" + strconv.Itoa(os.Getuid())
		}
	}
	return c
}
