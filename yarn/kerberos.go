package yarn

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/gpubroker/gpubroker/broker"
)

// Defaults for KerberosConfig: Hadoop's usual service principals, with
// _HOST standing for the host the client connects to.
const (
	DefaultHTTPPrincipal     = "HTTP/_HOST"
	DefaultRMPrincipal       = "rm/_HOST"
	DefaultNameNodePrincipal = "nn/_HOST"
	DefaultKrb5Conf          = "/etc/krb5.conf"
)

// KerberosConfig configures the broker's Kerberos identity for a
// kerberized Hadoop cluster: SPNEGO on the RM's REST API, SASL/GSSAPI on
// the RM admin RPC and on the NameNode.
type KerberosConfig struct {
	// Principal is the broker's own principal, e.g.
	// gpubroker/_HOST@EXAMPLE.COM; _HOST becomes Hostname. Without a
	// realm the krb5.conf default_realm applies. Required.
	Principal string
	// Keytab holds Principal's keys. Empty means TicketCache.
	Keytab string
	// TicketCache is a ticket cache (kinit's) used when Keytab is empty;
	// its TGT is renewed while renewable, then a new kinit is needed.
	TicketCache string
	// Krb5Conf is the krb5.conf (default DefaultKrb5Conf).
	Krb5Conf string
	// ServicePrincipal is the RM web endpoint's principal
	// (hadoop.http.authentication.kerberos.principal, default
	// DefaultHTTPPrincipal); _HOST becomes the RM's host.
	ServicePrincipal string
	// RMPrincipal is yarn.resourcemanager.principal, the admin RPC's
	// server (default DefaultRMPrincipal); _HOST becomes the admin
	// address's host.
	RMPrincipal string
	// NameNodePrincipal is dfs.namenode.kerberos.principal (default
	// DefaultNameNodePrincipal).
	NameNodePrincipal string
	// Hostname replaces _HOST in Principal (default os.Hostname,
	// lowercased, as Hadoop's SecurityUtil does).
	Hostname string
	// Logger receives logins and authentication failures (default: discarded).
	Logger *slog.Logger
}

// Kerberos is a logged-in Kerberos client shared by the RM REST transport,
// the RM admin client and the HDFS checkpoint reader. With a keytab its
// TGT is renewed before it expires (at 5/6 of its life) and a new login
// follows when it can no longer be renewed; with a ticket cache it is
// renewed while renewable. It is safe for concurrent use.
type Kerberos struct {
	cfg       KerberosConfig
	principal string // user[/host]@REALM
	krb5conf  *config.Config

	mu   sync.Mutex
	cl   *client.Client // replaced when a ticket cache's TGT is renewed
	last KerberosStatus
	stop chan struct{} // closed by Close; ends the ticket cache renewal
}

// KerberosStatus says whether and as whom the broker last authenticated.
type KerberosStatus struct {
	// Principal is the broker's principal, realm included.
	Principal string `json:"principal"`
	// Source is "keytab FILE" or "ticket cache FILE".
	Source string `json:"source"`
	// Server and At are the last server authenticated to, and when.
	Server string    `json:"server,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// Via is how: "spnego", "hadoop.auth cookie", "sasl auth",
	// "sasl auth-int", "sasl auth-conf".
	Via string `json:"via,omitempty"`
	// AuthenticatedAs is the user the server says it authenticated
	// (the hadoop.auth cookie's u=), when it says.
	AuthenticatedAs string `json:"authenticated_as,omitempty"`
	// Error is the last authentication failure since the last success.
	Error string `json:"error,omitempty"`
}

// NewKerberos logs in as cfg.Principal. A wrong keytab or an expired
// ticket cache is an error naming the principal and the file.
func NewKerberos(cfg KerberosConfig) (*Kerberos, error) {
	if cfg.Krb5Conf == "" {
		cfg.Krb5Conf = DefaultKrb5Conf
	}
	if cfg.ServicePrincipal == "" {
		cfg.ServicePrincipal = DefaultHTTPPrincipal
	}
	if cfg.RMPrincipal == "" {
		cfg.RMPrincipal = DefaultRMPrincipal
	}
	if cfg.NameNodePrincipal == "" {
		cfg.NameNodePrincipal = DefaultNameNodePrincipal
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("kerberos: hostname for _HOST: %w", err)
		}
		cfg.Hostname = h
	}
	if strings.TrimSpace(cfg.Principal) == "" {
		return nil, broker.Invalid("yarn.kerberos.principal", "must name the broker's principal, e.g. gpubroker/_HOST@EXAMPLE.COM")
	}
	if cfg.Keytab == "" && cfg.TicketCache == "" {
		return nil, broker.Invalid("yarn.kerberos.keytab", "must name a keytab for %s (or use a ticket cache: KRB5CCNAME after kinit)", cfg.Principal)
	}
	kc, err := config.Load(cfg.Krb5Conf)
	if err != nil {
		return nil, broker.Invalid("yarn.kerberos.krb5_conf", "cannot read %s: %s", cfg.Krb5Conf, err)
	}
	user, realm := splitPrincipal(SubstituteHost(cfg.Principal, cfg.Hostname))
	if realm == "" {
		realm = kc.LibDefaults.DefaultRealm
	}
	if realm == "" {
		return nil, broker.Invalid("yarn.kerberos.principal", "%q names no realm and %s has no default_realm: write it as %s@REALM", cfg.Principal, cfg.Krb5Conf, user)
	}
	k := &Kerberos{cfg: cfg, principal: user + "@" + realm, krb5conf: kc, stop: make(chan struct{})}
	if cfg.Keytab != "" {
		kt, err := keytab.Load(cfg.Keytab)
		if err != nil {
			return nil, broker.Invalid("yarn.kerberos.keytab", "cannot read %s: %s", cfg.Keytab, err)
		}
		k.last.Source = "keytab " + cfg.Keytab
		k.cl = client.NewWithKeytab(user, realm, kt, kc, client.DisablePAFXFAST(true))
		if err := k.cl.Login(); err != nil {
			return nil, fmt.Errorf("kerberos login as %s with keytab %s (is it the principal's current key? check with klist -kt and kinit -kt): %w", k.principal, cfg.Keytab, err)
		}
	} else {
		cc, err := credentials.LoadCCache(cfg.TicketCache)
		if err != nil {
			return nil, fmt.Errorf("kerberos ticket cache %s for %s (run kinit %s): %w", cfg.TicketCache, k.principal, k.principal, err)
		}
		if got := cc.DefaultPrincipal.PrincipalName.PrincipalNameString() + "@" + cc.DefaultPrincipal.Realm; got != k.principal {
			return nil, fmt.Errorf("kerberos ticket cache %s holds %s, not %s (run kinit %s)", cfg.TicketCache, got, k.principal, k.principal)
		}
		k.last.Source = "ticket cache " + cfg.TicketCache
		if k.cl, err = client.NewFromCCache(cc, kc, client.DisablePAFXFAST(true)); err != nil {
			return nil, fmt.Errorf("kerberos ticket cache %s for %s (run kinit %s): %w", cfg.TicketCache, k.principal, k.principal, err)
		}
		if err := k.cl.AffirmLogin(); err != nil {
			return nil, fmt.Errorf("kerberos ticket cache %s for %s has no valid TGT (run kinit %s): %w", cfg.TicketCache, k.principal, k.principal, err)
		}
		tgt, err := cacheTGT(cc)
		if err != nil {
			return nil, fmt.Errorf("kerberos ticket cache %s for %s (run kinit %s): %w", cfg.TicketCache, k.principal, k.principal, err)
		}
		if !time.Now().Before(tgt.EndTime) {
			return nil, fmt.Errorf("kerberos ticket cache %s: the TGT of %s expired at %s (run kinit %s)", cfg.TicketCache, k.principal, tgt.EndTime.Format(time.RFC3339), k.principal)
		}
		go k.renewCache(cc, tgt)
	}
	k.last.Principal = k.principal
	cfg.Logger.Info("kerberos login", "principal", k.principal, "source", k.last.Source)
	return k, nil
}

// Principal is the broker's principal with its realm.
func (k *Kerberos) Principal() string { return k.principal }

// Client is the gokrb5 client (for the HDFS client's options).
func (k *Kerberos) Client() *client.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cl
}

// NameNodePrincipal is the NameNode's principal template (nn/_HOST).
func (k *Kerberos) NameNodePrincipal() string { return k.cfg.NameNodePrincipal }

// RMPrincipal is the RM admin RPC's principal template (rm/_HOST).
func (k *Kerberos) RMPrincipal() string { return k.cfg.RMPrincipal }

// ServiceTicket returns a ticket and its session key for the service
// principal spn (template with _HOST) on host, cached until it expires.
func (k *Kerberos) ServiceTicket(spn, host string) (messages.Ticket, types.EncryptionKey, string, error) {
	name, _ := splitPrincipal(SubstituteHost(spn, host))
	tkt, key, err := k.Client().GetServiceTicket(name)
	if err != nil {
		return tkt, key, name, fmt.Errorf("kerberos: service ticket for %s as %s: %w", name, k.principal, err)
	}
	return tkt, key, name, nil
}

// Status returns what the broker last authenticated to, and as whom.
func (k *Kerberos) Status() KerberosStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// Record notes an authentication to server: err nil for a success by via.
func (k *Kerberos) Record(server, via, as string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.last.Error = err.Error()
		return
	}
	k.last.Server, k.last.Via, k.last.At, k.last.Error = server, via, time.Now().UTC(), ""
	if as != "" {
		k.last.AuthenticatedAs = as
	}
}

// Close stops the TGT renewal.
func (k *Kerberos) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.stop:
		return
	default:
	}
	close(k.stop)
	if k.cl != nil {
		k.cl.Destroy()
	}
}

// SubstituteHost replaces _HOST in principal's host component by host,
// lowercased (Hadoop's SecurityUtil.getServerPrincipal).
func SubstituteHost(principal, host string) string {
	name, realm := splitPrincipal(principal)
	parts := strings.Split(name, "/")
	if len(parts) == 2 && parts[1] == "_HOST" {
		parts[1] = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	name = strings.Join(parts, "/")
	if realm != "" {
		return name + "@" + realm
	}
	return name
}

// splitPrincipal splits name@REALM.
func splitPrincipal(p string) (name, realm string) {
	p = strings.TrimSpace(p)
	if i := strings.LastIndexByte(p, '@'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}
