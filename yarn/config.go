package yarn

import (
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Defaults for Config.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxResponseBytes = 256 << 20
	DefaultUser             = "gpubroker"
)

// Config configures a Client.
type Config struct {
	// RMs are the ResourceManagers' web addresses, http://host:8088, in the
	// order they are tried; more than one for RM HA.
	RMs []string
	// User is the user.name sent with Hadoop "simple" authentication;
	// empty means DefaultUser, "-" sends none.
	User string
	// Timeout bounds each HTTP request (default DefaultTimeout).
	Timeout time.Duration
	// MaxResponseBytes caps one response body (default
	// DefaultMaxResponseBytes); a larger answer is an error, not a
	// truncated observation.
	MaxResponseBytes int64
	// Transport carries the requests; nil means a private clone of
	// http.DefaultTransport. Kerberos SPNEGO plugs in here.
	Transport http.RoundTripper
	// Logger receives failover and redirect events; nil discards them.
	Logger *slog.Logger
	// Now is the clock stamped on observations; nil means time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks the configuration and normalises the RM addresses
// (scheme added when missing, trailing slash removed).
func (c *Config) Validate() error {
	if len(c.RMs) == 0 {
		return broker.Invalid("rms", "must list at least one ResourceManager web address, e.g. http://rm1:8088")
	}
	seen := map[string]bool{}
	for i, rm := range c.RMs {
		field := "rms[" + strconv.Itoa(i) + "]"
		rm = strings.TrimSpace(rm)
		if rm == "" {
			return broker.Invalid(field, "must not be empty")
		}
		if !strings.Contains(rm, "://") {
			rm = "http://" + rm
		}
		u, err := url.Parse(rm)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return broker.Invalid(field, "must be an http(s) address such as http://rm1:8088, got %q", c.RMs[i])
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return broker.Invalid(field, "must not carry a query or fragment, got %q", c.RMs[i])
		}
		rm = strings.TrimRight(u.String(), "/")
		if seen[rm] {
			return broker.Invalid(field, "%q is listed twice", rm)
		}
		seen[rm] = true
		c.RMs[i] = rm
	}
	if c.Timeout < 0 {
		return broker.Invalid("timeout", "must not be negative, got %s", c.Timeout)
	}
	if c.MaxResponseBytes < 0 {
		return broker.Invalid("max_response_bytes", "must not be negative, got %d", c.MaxResponseBytes)
	}
	return nil
}
