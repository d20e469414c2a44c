package yarn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jcmturner/goidentity/v6"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"

	"github.com/gpubroker/gpubroker/test/kdc"
)

// testRealm is a KDC with the broker's principal gpubroker/HOST (HOST as
// _HOST becomes) and HTTP/localhost, and their keytabs.
type testRealm struct {
	kdc                    *kdc.KDC
	brokerKeytab, httpKeyt string
}

const testHost = "broker1.example"

func startRealm(t *testing.T) *testRealm {
	t.Helper()
	ctx := context.Background()
	k, err := kdc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := &testRealm{kdc: k, brokerKeytab: filepath.Join(k.Dir, "broker.keytab"), httpKeyt: filepath.Join(k.Dir, "http.keytab")}
	for _, p := range []string{"gpubroker/" + testHost, "HTTP/localhost"} {
		if err := k.AddPrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Keytab(ctx, r.brokerKeytab, "gpubroker/"+testHost); err != nil {
		t.Fatal(err)
	}
	if err := k.Keytab(ctx, r.httpKeyt, "HTTP/localhost"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *testRealm) login(t *testing.T) *Kerberos {
	t.Helper()
	krb, err := NewKerberos(KerberosConfig{Principal: "gpubroker/_HOST", Keytab: r.brokerKeytab, Krb5Conf: r.kdc.Conf, Hostname: "BROKER1.example"})
	if err != nil {
		t.Fatalf("login: %v\nkdc log:\n%s", err, r.kdc.Log())
	}
	t.Cleanup(krb.Close)
	return krb
}

// hadoopAuthServer serves like a kerberized RM: gokrb5's SPNEGO handler
// with the HTTP/localhost keytab, which on success sets a hadoop.auth
// cookie naming the user; a request with a cookie of the current secret
// is served without SPNEGO. Rotating the secret invalidates cookies.
type hadoopAuthServer struct {
	srv        *httptest.Server
	negotiated atomic.Int32
	cookied    atomic.Int32
	secret     atomic.Int32
	cookieLife time.Duration
}

func newHadoopAuthServer(t *testing.T, keytabPath string) *hadoopAuthServer {
	t.Helper()
	kt, err := keytab.Load(keytabPath)
	if err != nil {
		t.Fatal(err)
	}
	s := &hadoopAuthServer{cookieLife: time.Hour}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := goidentity.FromHTTPRequestContext(r)
		s.negotiated.Add(1)
		exp := time.Now().Add(s.cookieLife).UnixMilli()
		w.Header().Add("Set-Cookie", fmt.Sprintf(`%s="u=%s&p=%s@%s&t=kerberos&e=%d&s=%d"; Path=/; HttpOnly`, AuthCookie, strings.SplitN(id.UserName(), "/", 2)[0], id.UserName(), id.Domain(), exp, s.secret.Load()))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":"spnego"}`)
	})
	// MIT KDCs (1.20 and later) put a minimal PAC in tickets, without
	// the Active Directory logon info gokrb5 would decode.
	authed := spnego.SPNEGOKRB5Authenticate(inner, kt, service.DecodePAC(false))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(AuthCookie); err == nil && strings.HasSuffix(strings.Trim(c.Value, `"`), fmt.Sprintf("&s=%d", s.secret.Load())) {
			s.cookied.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":"cookie"}`)
			return
		}
		authed.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// url is the server's address under the name localhost, so that _HOST in
// HTTP/_HOST becomes localhost.
func (s *hadoopAuthServer) url() string {
	return strings.Replace(s.srv.URL, "127.0.0.1", "localhost", 1)
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestSPNEGOTransportReusesCookie: against a real KDC and gokrb5's SPNEGO
// acceptor, the first request negotiates, the next ones send the
// hadoop.auth cookie, and once the server stops taking the cookie the
// transport negotiates again; the status names the broker's principal
// (with _HOST substituted, lowercased) and the user the server saw.
func TestSPNEGOTransportReusesCookie(t *testing.T) {
	r := startRealm(t)
	krb := r.login(t)
	if want := "gpubroker/" + testHost + "@" + kdc.Realm; krb.Principal() != want {
		t.Fatalf("principal %q, want %q", krb.Principal(), want)
	}
	s := newHadoopAuthServer(t, r.httpKeyt)
	c := &http.Client{Transport: NewSPNEGOTransport(krb, nil)}
	for range 3 {
		get(t, c, s.url()+"/ws/v1/cluster/apps")
	}
	if n, m := s.negotiated.Load(), s.cookied.Load(); n != 1 || m != 2 {
		t.Fatalf("negotiated %d times and served %d cookies, want 1 and 2", n, m)
	}
	st := krb.Status()
	if st.Via != "hadoop.auth cookie" || st.AuthenticatedAs != "gpubroker" || st.Principal != krb.Principal() || st.Server != s.url() {
		t.Fatalf("status %+v", st)
	}
	s.secret.Add(1) // an RM restarted with a new signature secret
	if got := get(t, c, s.url()+"/ws/v1/cluster/nodes"); got != `{"ok":"spnego"}` {
		t.Fatalf("after the cookie was refused: %s", got)
	}
	if n := s.negotiated.Load(); n != 2 {
		t.Fatalf("negotiated %d times, want 2", n)
	}
}

// TestSPNEGOTransportExpiredCookie: a cookie past its e= expiry is not
// sent; the transport negotiates instead.
func TestSPNEGOTransportExpiredCookie(t *testing.T) {
	r := startRealm(t)
	s := newHadoopAuthServer(t, r.httpKeyt)
	s.cookieLife = 30 * time.Second // inside the minute's margin
	c := &http.Client{Transport: NewSPNEGOTransport(r.login(t), nil)}
	get(t, c, s.url())
	get(t, c, s.url())
	if n, m := s.negotiated.Load(), s.cookied.Load(); n != 2 || m != 0 {
		t.Fatalf("negotiated %d times and served %d cookies, want 2 and 0", n, m)
	}
}

// TestSPNEGONotNegotiate: through the yarn Client, a 401 that is not a
// Negotiate challenge is an error naming the RM and saying what to check.
func TestSPNEGONotNegotiate(t *testing.T) {
	r := startRealm(t)
	krb := r.login(t)
	basic := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="rm"`)
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	defer basic.Close()
	url := strings.Replace(basic.URL, "127.0.0.1", "localhost", 1)
	c, err := NewClient(Config{RMs: []string{url}, User: "-", Transport: NewSPNEGOTransport(krb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), PathScheduler, &struct{}{})
	if err == nil || !strings.Contains(err.Error(), "rm "+url+" answered 401 without a Negotiate challenge") || !strings.Contains(err.Error(), "hadoop.http.authentication.type=kerberos") {
		t.Fatalf("err = %v", err)
	}
	if krb.Status().Error == "" {
		t.Fatal("the failure is not in the status")
	}
}

// TestSPNEGORefusedTicket: an RM whose HTTP keytab is stale refuses the
// ticket; the error names the RM, the broker's principal and the SPN.
func TestSPNEGORefusedTicket(t *testing.T) {
	r := startRealm(t)
	krb := r.login(t)
	if err := r.kdc.Rekey(context.Background(), "HTTP/localhost"); err != nil {
		t.Fatal(err)
	}
	s := newHadoopAuthServer(t, r.httpKeyt) // the old key
	c := &http.Client{Transport: NewSPNEGOTransport(krb, nil)}
	_, err := c.Get(s.url())
	if err == nil || !strings.Contains(err.Error(), "refused the SPNEGO ticket of "+krb.Principal()+" for HTTP/localhost") {
		t.Fatalf("err = %v", err)
	}
}

// TestKerberosWrongKeytab: a keytab whose key the KDC no longer has fails
// the login with an error naming the principal and the keytab.
func TestKerberosWrongKeytab(t *testing.T) {
	r := startRealm(t)
	if err := r.kdc.Rekey(context.Background(), "gpubroker/"+testHost); err != nil {
		t.Fatal(err)
	}
	_, err := NewKerberos(KerberosConfig{Principal: "gpubroker/_HOST@" + kdc.Realm, Keytab: r.brokerKeytab, Krb5Conf: r.kdc.Conf, Hostname: testHost})
	if err == nil || !strings.Contains(err.Error(), "kerberos login as gpubroker/"+testHost+"@"+kdc.Realm+" with keytab "+r.brokerKeytab) {
		t.Fatalf("err = %v", err)
	}
	// A keytab without the principal names it too.
	_, err = NewKerberos(KerberosConfig{Principal: "someone-else", Keytab: r.brokerKeytab, Krb5Conf: r.kdc.Conf})
	if err == nil || !strings.Contains(err.Error(), "someone-else@"+kdc.Realm) {
		t.Fatalf("err = %v", err)
	}
}

// TestKerberosTicketCache: a kinit'ed ticket cache logs in without a
// keytab; a cache of another principal is refused by name.
func TestKerberosTicketCache(t *testing.T) {
	r := startRealm(t)
	cc := filepath.Join(r.kdc.Dir, "cc")
	princ := "gpubroker/" + testHost + "@" + kdc.Realm
	if err := r.kdc.Kinit(context.Background(), cc, r.brokerKeytab, princ); err != nil {
		t.Fatal(err)
	}
	krb, err := NewKerberos(KerberosConfig{Principal: princ, TicketCache: cc, Krb5Conf: r.kdc.Conf})
	if err != nil {
		t.Fatal(err)
	}
	defer krb.Close()
	s := newHadoopAuthServer(t, r.httpKeyt)
	get(t, &http.Client{Transport: NewSPNEGOTransport(krb, nil)}, s.url())
	if got := krb.Status().Source; got != "ticket cache "+cc {
		t.Fatalf("source %q", got)
	}
	_, err = NewKerberos(KerberosConfig{Principal: "bob", TicketCache: cc, Krb5Conf: r.kdc.Conf})
	if err == nil || !strings.Contains(err.Error(), "holds "+princ+", not bob@"+kdc.Realm) {
		t.Fatalf("err = %v", err)
	}
}

func TestSubstituteHost(t *testing.T) {
	for _, c := range []struct{ in, host, want string }{
		{"rm/_HOST@EXAMPLE.COM", "RM1.Example.com", "rm/rm1.example.com@EXAMPLE.COM"},
		{"HTTP/_HOST", "localhost.", "HTTP/localhost"},
		{"gpubroker@EXAMPLE.COM", "h", "gpubroker@EXAMPLE.COM"},
		{"rm/fixed.host@R", "other", "rm/fixed.host@R"},
	} {
		if got := SubstituteHost(c.in, c.host); got != c.want {
			t.Errorf("SubstituteHost(%q, %q) = %q, want %q", c.in, c.host, got, c.want)
		}
	}
}

func TestParseAuthCookie(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c, ok := parseAuthCookie(`hadoop.auth="u=alice&p=alice@R&t=kerberos&e=1700000600000&s=abc="; Path=/; Max-Age=60; HttpOnly`, now)
	if !ok || c.user != "alice" || c.value != "u=alice&p=alice@R&t=kerberos&e=1700000600000&s=abc=" || !c.expires.Equal(now.Add(time.Minute)) {
		t.Fatalf("%+v %v", c, ok)
	}
	c, ok = parseAuthCookie(`hadoop.auth=u=bob&e=1700000600000&s=x; Path=/`, now)
	if !ok || !c.expires.Equal(time.UnixMilli(1700000600000)) {
		t.Fatalf("%+v %v", c, ok)
	}
	if _, ok := parseAuthCookie(`JSESSIONID=1; Path=/`, now); ok {
		t.Fatal("another cookie parsed as hadoop.auth")
	}
}

// TestKerberosRenewsBeforeExpiry: with TGTs of 12 seconds, a keytab
// login and a ticket cache login each have their TGT renewed by the KDC
// before it expires, with no request in between (a ticket cache's by this
// package: gokrb5 renews only its own logins, and only when asked for a
// ticket), and still authenticate once the first TGT has ended.
func TestKerberosRenewsBeforeExpiry(t *testing.T) {
	const life = 12 * time.Second
	r := startRealm(t)
	ctx := context.Background()
	kt, err := keytab.Load(r.httpKeyt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(spnego.SPNEGOKRB5Authenticate(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), kt, service.DecodePAC(false)))
	t.Cleanup(srv.Close) // after the parallel subtests
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	krbtgt := "krbtgt/" + kdc.Realm + "@" + kdc.Realm
	for _, c := range []struct {
		name, user string
		cfg        func(principal, keytab string) KerberosConfig
	}{
		{"keytab", "renew-keytab", func(p, kt string) KerberosConfig {
			return KerberosConfig{Principal: p, Keytab: kt, Krb5Conf: r.kdc.Conf}
		}},
		{"ticket cache", "renew-cache", func(p, kt string) KerberosConfig {
			cc := filepath.Join(t.TempDir(), "cc")
			if err := r.kdc.KinitFor(ctx, cc, kt, p, life); err != nil {
				t.Fatal(err)
			}
			return KerberosConfig{Principal: p, TicketCache: cc, Krb5Conf: r.kdc.Conf}
		}},
	} {
		principal := c.user + "@" + kdc.Realm
		ktPath := filepath.Join(r.kdc.Dir, c.user+".keytab")
		if err := r.kdc.AddPrincipal(ctx, c.user); err != nil {
			t.Fatal(err)
		}
		if err := r.kdc.SetMaxLife(ctx, c.user, life); err != nil {
			t.Fatal(err)
		}
		if err := r.kdc.Keytab(ctx, ktPath, c.user); err != nil {
			t.Fatal(err)
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			krb, err := NewKerberos(c.cfg(principal, ktPath))
			if err != nil {
				t.Fatal(err)
			}
			defer krb.Close()
			hc := &http.Client{Transport: NewSPNEGOTransport(krb, nil)}
			get(t, hc, url)
			// Just before the first TGT ends, it has been renewed.
			time.Sleep(time.Until(start.Add(life - 500*time.Millisecond)))
			if n := r.kdc.TGSIssued(principal, krbtgt); n == 0 {
				t.Fatalf("no renewal of %s's TGT before it expired; kdc log:\n%s", principal, r.kdc.Log())
			}
			time.Sleep(time.Until(start.Add(life + 2*time.Second)))
			get(t, hc, url)
		})
	}
}
