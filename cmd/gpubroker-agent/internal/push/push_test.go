package push_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cmd/gpubroker-agent/internal/push"
)

const secret = "gbk_agent_s3cr3t_value"

func tokenFile(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// answer is what the fake broker does with one request.
type answer struct {
	status int    // 0: drop the connection without answering
	body   string // JSON body
}

// fakeBroker checks the protocol of every request and answers from a script;
// past the script it accepts.
type fakeBroker struct {
	t      *testing.T
	mu     sync.Mutex
	script []answer
	got    []broker.NodeReport
	tokens []string
}

func (f *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.EscapedPath() != "/base/api/v1/nodes/ip-10-0-0-1.ec2.internal/report" {
		f.t.Errorf("request %s %s", r.Method, r.URL.EscapedPath())
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		f.t.Errorf("content type %q", ct)
	}
	if ua := r.Header.Get("User-Agent"); ua != "gpubroker-agent/test" {
		f.t.Errorf("user agent %q", ua)
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		f.t.Errorf("authorization %q", r.Header.Get("Authorization"))
	}
	f.tokens = append(f.tokens, tok)
	var rep broker.NodeReport
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		f.t.Errorf("decode report: %v", err)
	}
	f.got = append(f.got, rep)
	a := answer{status: http.StatusAccepted, body: `{"latest":true}`}
	if len(f.script) > 0 {
		a, f.script = f.script[0], f.script[1:]
	}
	if a.status == 0 {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Error(err)
			return
		}
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (f *fakeBroker) requests() ([]broker.NodeReport, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]broker.NodeReport(nil), f.got...), append([]string(nil), f.tokens...)
}

// harness runs a Pusher against a fake broker, recording its waits; Run
// stops after stopAfter waits.
type harness struct {
	fb    *fakeBroker
	srv   *httptest.Server
	p     *push.Pusher
	logs  *bytes.Buffer
	waits []time.Duration
	seq   int
}

func newHarness(t *testing.T, script []answer, tokenPath string, stopAfter int, cancel *context.CancelFunc) *harness {
	t.Helper()
	h := &harness{fb: &fakeBroker{t: t, script: script}, logs: &bytes.Buffer{}}
	h.srv = httptest.NewServer(h.fb)
	t.Cleanup(h.srv.Close)
	var err error
	h.p, err = push.New(push.Config{
		Broker: h.srv.URL + "/base/", Node: "ip-10-0-0-1.ec2.internal", TokenFile: tokenPath, UserAgent: "gpubroker-agent/test",
		Interval: 15 * time.Second, MinBackoff: time.Second, MaxBackoff: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(h.logs, nil)),
		Rand:   func() float64 { return 0.5 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.waits = append(h.waits, d)
			if len(h.waits) >= stopAfter {
				(*cancel)()
			}
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sampler returns a fresh report per call, numbered by its utilisation.
func (h *harness) sampler(ctx context.Context) (broker.NodeReport, error) {
	h.seq++
	return broker.NodeReport{Node: "ip-10-0-0-1.ec2.internal", At: time.Date(2026, 11, 30, 12, 0, h.seq, 0, time.UTC),
		GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-0", Utilisation: float64(h.seq) / 100}}}, nil
}

func TestBackoffDoublesWithJitterAndCaps(t *testing.T) {
	for _, c := range []struct {
		rand float64
		want []time.Duration
	}{
		{0, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{0.999999, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
	} {
		p, err := push.New(push.Config{Broker: "http://b", Node: "n", TokenFile: "t", MinBackoff: time.Second,
			MaxBackoff: 10 * time.Second, Rand: func() float64 { return c.rand }})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range c.want {
			got := p.Backoff(i + 1).Round(time.Millisecond)
			if got != want {
				t.Errorf("rand %g: Backoff(%d) = %s, want %s", c.rand, i+1, got, want)
			}
		}
	}
}

func TestRunBacksOffWhileTheBrokerIsAwayAndSendsTheLatestSample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	script := []answer{
		{status: 0}, // connection dropped
		{status: http.StatusServiceUnavailable, body: `{"error":{"code":"unavailable","message":"database unreachable"}}`},
		{status: http.StatusTooManyRequests, body: `{"error":{"code":"busy","message":"slow down"}}`},
		{status: http.StatusBadGateway, body: "<html>bad gateway</html>"},
	}
	h := newHarness(t, script, tokenFile(t, secret), 6, &cancel)
	if err := h.p.Run(ctx, h.sampler); err != nil {
		t.Fatalf("Run returned %v on cancellation", err)
	}
	// Four failures: 1s, 2s, 4s, 8s jittered to 3/4 each; then the normal interval.
	want := []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 6 * time.Second, 15 * time.Second, 15 * time.Second}
	if d := cmp.Diff(want, h.waits); d != "" {
		t.Fatalf("waits (-want +got):\n%s", d)
	}
	got, tokens := h.fb.requests()
	if len(got) != 6 {
		t.Fatalf("%d requests, want 6", len(got))
	}
	// Every attempt carried a fresh sample: the latest wins, nothing is queued.
	for i, r := range got {
		if r.At.Second() != i+1 || tokens[i] != secret {
			t.Fatalf("request %d: sample %d, token ok %t", i, r.At.Second(), tokens[i] == secret)
		}
	}
	logs := h.logs.String()
	for _, want := range []string{"database unreachable", "slow down", "bad gateway", "broker reachable again", "failed_attempts=4"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, secret) {
		t.Fatal("the token appears in the log")
	}
}

func TestRunDoesNotHammerARefusedReport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	script := []answer{{status: http.StatusBadRequest,
		body: `{"error":{"code":"invalid","field":"gpus[0].utilisation","message":"must be between 0 and 1, got 1.5"}}`}}
	h := newHarness(t, script, tokenFile(t, secret), 2, &cancel)
	if err := h.p.Run(ctx, h.sampler); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]time.Duration{15 * time.Second, 15 * time.Second}, h.waits); d != "" {
		t.Fatalf("a refused report waits the interval, not a backoff (-want +got):\n%s", d)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "gpus[0].utilisation: must be between 0 and 1, got 1.5") {
		t.Fatalf("log lacks the broker's message:\n%s", logs)
	}
}

func TestRejectedTokenBacksOffAndARotatedTokenIsPickedUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := tokenFile(t, "old-token")
	script := []answer{
		{status: http.StatusUnauthorized, body: `{"error":{"code":"unauthenticated","message":"unknown token"}}`},
		{status: http.StatusUnauthorized, body: `{"error":{"code":"unauthenticated","message":"unknown token"}}`},
	}
	h := newHarness(t, script, path, 3, &cancel)
	calls := 0
	sampler := func(ctx context.Context) (broker.NodeReport, error) {
		calls++
		if calls == 2 { // the operator rotates the Secret
			if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return h.sampler(ctx)
	}
	if err := h.p.Run(ctx, sampler); err != nil {
		t.Fatal(err)
	}
	_, tokens := h.fb.requests()
	if d := cmp.Diff([]string{"old-token", secret, secret}, tokens); d != "" {
		t.Fatalf("tokens sent (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]time.Duration{750 * time.Millisecond, 1500 * time.Millisecond, 15 * time.Second}, h.waits); d != "" {
		t.Fatalf("waits (-want +got):\n%s", d)
	}
}

func TestPushErrors(t *testing.T) {
	// Connection refused: a port that was just free.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rep := broker.NodeReport{Node: "n", At: time.Now()}
	p, err := push.New(push.Config{Broker: "http://" + addr, Node: "n", TokenFile: tokenFile(t, secret)})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Push(context.Background(), rep)
	if err == nil || !push.Retryable(err) || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), secret) {
		t.Fatalf("refused: %v", err)
	}

	for _, c := range []struct{ body, want string }{
		{"", "must hold one token"},
		{"two words", "must hold one token"},
	} {
		p, _ := push.New(push.Config{Broker: "http://" + addr, Node: "n", TokenFile: tokenFile(t, c.body)})
		if err := p.Push(context.Background(), rep); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token %q: %v", c.body, err)
		}
	}
	p, _ = push.New(push.Config{Broker: "http://" + addr, Node: "n", TokenFile: filepath.Join(t.TempDir(), "missing")})
	if err := p.Push(context.Background(), rep); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing token file: %v", err)
	}

	for code, retry := range map[int]bool{500: true, 503: true, 429: true, 408: true, 401: true, 403: true, 400: false, 404: false, 409: false, 422: false} {
		if got := push.Retryable(&push.StatusError{Code: code}); got != retry {
			t.Errorf("Retryable(%d) = %t", code, got)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg   push.Config
		field string
	}{
		{push.Config{Node: "n", TokenFile: "t"}, "broker"},
		{push.Config{Broker: "gpubroker:8080", Node: "n", TokenFile: "t"}, "broker"},
		{push.Config{Broker: "http://b", TokenFile: "t"}, "node"},
		{push.Config{Broker: "http://b", Node: "n"}, "token_file"},
		{push.Config{Broker: "http://b", Node: "n", TokenFile: "t", MinBackoff: time.Minute, MaxBackoff: time.Second}, "max_backoff"},
	} {
		_, err := push.New(c.cfg)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%+v: %v, want a validation error on %s", c.cfg, err, c.field)
		}
	}
}
