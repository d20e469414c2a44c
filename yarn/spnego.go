package yarn

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/spnego"
)

// AuthCookie is the cookie Hadoop's AuthenticationFilter sets once a
// client has authenticated; sending it back skips SPNEGO until it expires.
const AuthCookie = "hadoop.auth"

// SPNEGOTransport authenticates requests to kerberized RMs: it sends the
// hadoop.auth cookie an RM gave while it is valid, and otherwise (or when
// the RM refuses the cookie) an Authorization: Negotiate header with a
// service ticket for the RM's HTTP principal. A 401 without a Negotiate
// challenge is an error naming the RM: it is not kerberized the way the
// configuration says. It is safe for concurrent use.
type SPNEGOTransport struct {
	base http.RoundTripper
	krb  *Kerberos
	now  func() time.Time

	mu      sync.Mutex
	cookies map[string]authCookie // by host:port
}

type authCookie struct {
	value   string
	expires time.Time
	user    string
}

// NewSPNEGOTransport wraps base (nil: a clone of http.DefaultTransport).
func NewSPNEGOTransport(k *Kerberos, base http.RoundTripper) *SPNEGOTransport {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &SPNEGOTransport{base: base, krb: k, now: time.Now, cookies: map[string]authCookie{}}
}

// RoundTrip implements http.RoundTripper.
func (t *SPNEGOTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rm := req.URL.Scheme + "://" + req.URL.Host
	if c, ok := t.cookie(req.URL.Host); ok {
		r2, err := rewound(req)
		if err != nil {
			return nil, err
		}
		r2.Header.Set("Cookie", AuthCookie+"=\""+c.value+"\"")
		resp, err := t.base.RoundTrip(r2)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.keep(req.URL.Host, resp)
			t.krb.Record(rm, "hadoop.auth cookie", c.user, nil)
			return resp, nil
		}
		// The RM no longer takes the cookie (restarted with a new
		// secret, or expired early): negotiate again.
		drain(resp)
		t.forget(req.URL.Host)
	}
	r2, err := rewound(req)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(req.URL.Host)
	if err != nil {
		host = req.URL.Host
	}
	tkt, key, spn, err := t.krb.ServiceTicket(t.krb.cfg.ServicePrincipal, host)
	if err != nil {
		err = fmt.Errorf("spnego to rm %s: %w", rm, err)
		t.krb.Record(rm, "", "", err)
		return nil, err
	}
	tok, err := spnego.NewNegTokenInitKRB5(t.krb.Client(), tkt, key)
	if err != nil {
		return nil, fmt.Errorf("spnego to rm %s: token for %s: %w", rm, spn, err)
	}
	b, err := (&spnego.SPNEGOToken{Init: true, NegTokenInit: tok}).Marshal()
	if err != nil {
		return nil, fmt.Errorf("spnego to rm %s: token for %s: %w", rm, spn, err)
	}
	r2.Header.Set("Authorization", "Negotiate "+base64.StdEncoding.EncodeToString(b))
	resp, err := t.base.RoundTrip(r2)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		challenge := resp.Header.Values("WWW-Authenticate")
		detail, _ := errorDetail(resp)
		resp.Body.Close()
		negotiate := false
		for _, c := range challenge {
			if strings.HasPrefix(strings.ToLower(c), "negotiate") {
				negotiate = true
			}
		}
		if !negotiate {
			err = fmt.Errorf("rm %s answered 401 without a Negotiate challenge (WWW-Authenticate %q): it does not take SPNEGO; check hadoop.http.authentication.type=kerberos on the RM, or drop yarn.kerberos: %s", rm, strings.Join(challenge, ", "), detail)
		} else {
			err = fmt.Errorf("rm %s refused the SPNEGO ticket of %s for %s (check yarn.kerberos.service_principal and the RM's HTTP keytab): %s", rm, t.krb.principal, spn, detail)
		}
		t.krb.Record(rm, "", "", err)
		return nil, err
	}
	c := t.keep(req.URL.Host, resp)
	t.krb.Record(rm, "spnego", c.user, nil)
	return resp, nil
}

// cookie returns the valid hadoop.auth cookie of host.
func (t *SPNEGOTransport) cookie(host string) (authCookie, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.cookies[host]
	// A minute's margin: a cookie about to expire would only earn a 401.
	if !ok || !t.now().Add(time.Minute).Before(c.expires) {
		return authCookie{}, false
	}
	return c, true
}

func (t *SPNEGOTransport) forget(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cookies, host)
}

// keep remembers the hadoop.auth cookie resp sets, if any.
func (t *SPNEGOTransport) keep(host string, resp *http.Response) authCookie {
	for _, h := range resp.Header.Values("Set-Cookie") {
		c, ok := parseAuthCookie(h, t.now())
		if !ok {
			continue
		}
		t.mu.Lock()
		if c.value == "" {
			delete(t.cookies, host)
		} else {
			t.cookies[host] = c
		}
		t.mu.Unlock()
		return c
	}
	return authCookie{}
}

// parseAuthCookie reads a Set-Cookie header of hadoop.auth. Its value,
// u=USER&p=PRINCIPAL&t=TYPE&e=EXPIRES_MS&s=SIGNATURE, may be quoted; the
// expiry is the earlier of e= and the cookie's Expires or Max-Age.
func parseAuthCookie(h string, now time.Time) (authCookie, bool) {
	parts := strings.Split(h, ";")
	name, value, ok := strings.Cut(strings.TrimSpace(parts[0]), "=")
	if !ok || name != AuthCookie {
		return authCookie{}, false
	}
	c := authCookie{value: strings.Trim(value, `"`)}
	for _, kv := range strings.Split(c.value, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "u":
			c.user = v
		case "e":
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				c.expires = time.UnixMilli(ms)
			}
		}
	}
	earlier := func(t time.Time) {
		if c.expires.IsZero() || t.Before(c.expires) {
			c.expires = t
		}
	}
	for _, a := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(a), "=")
		switch strings.ToLower(k) {
		case "expires":
			if t, err := http.ParseTime(v); err == nil {
				earlier(t)
			}
		case "max-age":
			if n, err := strconv.Atoi(v); err == nil {
				earlier(now.Add(time.Duration(n) * time.Second))
			}
		}
	}
	return c, true
}

// rewound returns a copy of req that can be sent again: its body, if any,
// from GetBody.
func rewound(req *http.Request) (*http.Request, error) {
	r2 := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, fmt.Errorf("spnego: %s %s: the body cannot be sent twice", req.Method, req.URL.Redacted())
		}
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r2.Body = b
	}
	return r2, nil
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
