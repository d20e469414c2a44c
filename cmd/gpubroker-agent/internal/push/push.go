package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Config configures a Pusher.
type Config struct {
	// Broker is the broker's base URL, e.g. http://gpubroker.gpubroker.svc
	// (required).
	Broker string
	// Node is the node the reports are about (required); it is part of the
	// path.
	Node string
	// TokenFile holds the agent's bearer token (required unless
	// ClientCertificate). It is read on every attempt and never logged.
	TokenFile string
	// ClientCertificate says the Client presents a client certificate
	// that authenticates the agent; without TokenFile no token is sent.
	ClientCertificate bool
	// UserAgent is sent with every request (default gpubroker-agent).
	UserAgent string
	// Client sends the requests (default: a client with a 10s timeout).
	Client *http.Client
	// Interval is the wait after a delivered or refused report (default 15s).
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed attempt
	// (defaults 1s and 2m). The wait doubles per consecutive failure and
	// is jittered to between half and all of that.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives one line per failure and per recovery (default:
	// discard).
	Logger *slog.Logger
	// Rand returns a number in [0, 1) for the jitter (default math/rand/v2).
	Rand func() float64
	// Sleep waits d or until ctx is done (default: a timer). Tests record
	// the waits through it.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (c *Config) setDefaults() error {
	if c.Broker == "" {
		return broker.Invalid("broker", "must be the broker's URL, e.g. http://gpubroker.gpubroker.svc")
	}
	u, err := url.Parse(c.Broker)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return broker.Invalid("broker", "must be an http or https URL, got %q", c.Broker)
	}
	c.Broker = strings.TrimRight(c.Broker, "/")
	if c.Node == "" {
		return broker.Invalid("node", "must name the node")
	}
	if c.TokenFile == "" && !c.ClientCertificate {
		return broker.Invalid("token_file", "must name the file holding the agent token (or authenticate by client certificate)")
	}
	if c.UserAgent == "" {
		c.UserAgent = "gpubroker-agent"
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Interval == 0 {
		c.Interval = 15 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 2 * time.Minute
	}
	switch {
	case c.Interval < 0:
		return broker.Invalid("interval", "must be positive, got %s", c.Interval)
	case c.MinBackoff < 0:
		return broker.Invalid("min_backoff", "must be positive, got %s", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return broker.Invalid("max_backoff", "must be at least min_backoff (%s), got %s", c.MinBackoff, c.MaxBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Pusher sends a node's reports to the broker.
type Pusher struct {
	cfg Config
	url string
}

// New checks cfg and returns a Pusher.
func New(cfg Config) (*Pusher, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Pusher{cfg: cfg, url: cfg.Broker + "/api/v1/nodes/" + url.PathEscape(cfg.Node) + "/report"}, nil
}

// StatusError is an answer of the broker other than 2xx.
type StatusError struct {
	// Code is the HTTP status.
	Code int
	// Message is the broker's error message, or the start of the body.
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("broker answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("broker answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Retryable reports whether sending again later may succeed: the broker
// was away, overloaded, or refused the token (which may be rotated).
// Other 4xx answers mean the report itself was refused.
func Retryable(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return true // transport errors: refused, reset, timeout
	}
	switch {
	case se.Code >= 500, se.Code == http.StatusTooManyRequests, se.Code == http.StatusRequestTimeout,
		se.Code == http.StatusUnauthorized, se.Code == http.StatusForbidden:
		return true
	}
	return false
}

// Push sends one report.
func (p *Pusher) Push(ctx context.Context, rep broker.NodeReport) error {
	token := ""
	if p.cfg.TokenFile != "" {
		var err error
		if token, err = p.token(); err != nil {
			return err
		}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode report of node %q: %w", rep.Node, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build report request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("User-Agent", p.cfg.UserAgent)
	res, err := p.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post report: %w", err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 == 2 {
		return nil
	}
	return &StatusError{Code: res.StatusCode, Message: errorMessage(raw)}
}

// token reads the token file. The token itself never appears in errors.
func (p *Pusher) token() (string, error) {
	b, err := os.ReadFile(p.cfg.TokenFile)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("token file %q must hold one token on one line", p.cfg.TokenFile)
	}
	return t, nil
}

// errorMessage extracts {"error":{"message":...,"field":...}} from a broker
// answer, or the start of a non-JSON body.
func errorMessage(raw []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
		if e.Error.Field != "" {
			return e.Error.Field + ": " + e.Error.Message
		}
		return e.Error.Message
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Backoff returns the wait after the n-th consecutive failure (n >= 1):
// MinBackoff doubled n-1 times, capped at MaxBackoff, then jittered to
// between half and all of it.
func (p *Pusher) Backoff(n int) time.Duration {
	d := p.cfg.MinBackoff
	for i := 1; i < n && d < p.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.cfg.MaxBackoff)
	return d/2 + time.Duration(p.cfg.Rand()*float64(d/2))
}

// Sampler returns the report to send now.
type Sampler func(ctx context.Context) (broker.NodeReport, error)

// Run samples and pushes until ctx is done, then returns nil. A failing
// sampler is logged and retried with backoff, like an absent broker.
func (p *Pusher) Run(ctx context.Context, sample Sampler) error {
	log := p.cfg.Logger
	failures := 0
	for {
		err := p.once(ctx, sample)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err == nil:
			if failures > 0 {
				log.InfoContext(ctx, "broker reachable again", "failed_attempts", failures)
			}
			failures = 0
			wait = p.cfg.Interval
		case !Retryable(err):
			log.ErrorContext(ctx, "broker refused the report", "error", err.Error())
			failures = 0
			wait = p.cfg.Interval
		default:
			failures++
			wait = p.Backoff(failures)
			log.WarnContext(ctx, "report not delivered; backing off", "error", err.Error(),
				"attempt", failures, "retry_in", wait.Round(time.Millisecond).String())
		}
		if p.cfg.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

func (p *Pusher) once(ctx context.Context, sample Sampler) error {
	rep, err := sample(ctx)
	if err != nil {
		return fmt.Errorf("sample GPUs: %w", err)
	}
	return p.Push(ctx, rep)
}
