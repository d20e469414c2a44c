package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// params reads query parameters, rejecting unknown or repeated ones and
// collecting the first bad value as a field error.
type params struct {
	q   url.Values
	err error
}

func queryParams(r *http.Request, allowed ...string) *params {
	p := &params{q: r.URL.Query()}
	for name, vs := range p.q {
		if !contains(allowed, name) {
			p.err = broker.Invalid(name, "is not a known query parameter; allowed: %s", strings.Join(allowed, ", "))
			return p
		}
		if len(vs) > 1 {
			p.err = broker.Invalid(name, "must be given once")
			return p
		}
		if max := maxLength(name); len(vs[0]) > max {
			p.err = broker.Invalid(name, "must be at most %d bytes long, got %d", max, len(vs[0]))
			return p
		}
		if vs[0] == "" {
			p.err = broker.Invalid(name, "is empty; give a value or leave the parameter out")
			return p
		}
	}
	return p
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *params) str(name string) string { return p.q.Get(name) }

func (p *params) oneOf(name string, allowed ...string) string {
	v := p.q.Get(name)
	if v != "" && !contains(allowed, v) && p.err == nil {
		p.err = broker.Invalid(name, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
	return v
}

func (p *params) duration(name string) time.Duration {
	v := p.q.Get(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if (err != nil || d < 0) && p.err == nil {
		p.err = broker.Invalid(name, "must be a non-negative duration such as 90s or 5m, got %q", v)
	}
	return d
}

func (p *params) time(name string) time.Time {
	v := p.q.Get(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil && p.err == nil {
		p.err = broker.Invalid(name, "must be an RFC 3339 time such as 2026-11-30T12:00:00Z, got %q", v)
	}
	return t
}

func (p *params) int64(name string) (int64, bool) {
	v := p.q.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil && p.err == nil {
		p.err = broker.Invalid(name, "must be an integer, got %q", v)
	}
	return n, err == nil
}

// bool reads a true/false parameter; absent is false.
func (p *params) bool(name string) bool {
	switch v := p.q.Get(name); v {
	case "", "false":
		return false
	case "true":
		return true
	default:
		if p.err == nil {
			p.err = broker.Invalid(name, "must be true or false, got %q", v)
		}
		return false
	}
}

// limit reads the page size: 1 to store.MaxPageSize, 100 by default.
func (p *params) limit() int {
	n, ok := p.int64("limit")
	if !ok {
		return 100
	}
	if (n < 1 || n > store.MaxPageSize) && p.err == nil {
		p.err = broker.Invalid("limit", "must be between 1 and %d, got %d", store.MaxPageSize, n)
	}
	return int(n)
}

// cursorID reads an id cursor ("before") of newest-first lists.
func (p *params) cursorID(name string) int64 {
	n, ok := p.int64(name)
	if ok && n <= 0 && p.err == nil {
		p.err = broker.Invalid(name, "must be the positive id returned as next by the previous page, got %d", n)
	}
	return n
}

// Limits the OpenAPI document states.
const (
	// maxParamLength bounds a query parameter's value; maxCursorLength a
	// cursor's (after), which may hold a name of maxParamLength.
	maxParamLength  = 253
	maxCursorLength = 1024
	// maxGPUs bounds GPU counts (tenant quotas, policy limits); the default
	// cluster_max_gpus is this bound.
	maxGPUs = 1 << 20
	// maxNodes bounds a pool's node counts.
	maxNodes = 100_000
	// maxListItems and maxItemLength bound a tenant's lists.
	maxListItems  = 256
	maxItemLength = 255
)

// maxLength bounds the value of the query parameter name.
func maxLength(name string) int {
	if name == "after" {
		return maxCursorLength
	}
	return maxParamLength
}

// atMost is a field error when v exceeds max.
func atMost(field string, v, max int64) error {
	if v > max {
		return broker.Invalid(field, "must be at most %d, got %d", max, v)
	}
	return nil
}
