package awssim

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API versions and XML namespaces of the two protocols.
const (
	asgVersion   = "2011-01-01"
	asgNamespace = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
	ec2Version   = "2016-11-15"
	ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"
)

// Config configures a Server.
type Config struct {
	// Region names the region in ARNs, zones and DNS names; default us-east-1.
	Region string
	// AccountID appears in ARNs; default 123456789012.
	AccountID string
	// LaunchDelay is how long a new instance stays Pending before it is
	// InService (a group's SlowLaunches fault overrides it).
	LaunchDelay time.Duration
	// BootDelay is how long after entering service the BootHook is called:
	// the time a kubelet or NodeManager takes to register.
	BootDelay time.Duration
	// TerminateDelay is how long a terminating instance stays Terminating.
	TerminateDelay time.Duration
	// LaunchRetry is how soon a group retries after a failed launch, as the
	// real service does; default 10s.
	LaunchRetry time.Duration
	// BootHook, if set, is called in its own goroutine once an instance has
	// booted, unless the instance was made to never register.
	BootHook func(Instance)
	// TerminateHook, if set, is called in its own goroutine once an
	// instance is terminated.
	TerminateHook func(Instance)
	// Latency delays every answer, as a network round trip would.
	Latency time.Duration
	// Now is the clock for timestamps; nil means time.Now. Delays always
	// run on real timers.
	Now func() time.Time
	// Logger receives one line per launch, termination and injected fault;
	// nil discards.
	Logger *slog.Logger
}

// Instance is what hooks learn about a simulated instance.
type Instance struct {
	ID             string
	Group          string
	InstanceType   string
	PrivateDNSName string
	PrivateIP      string
	LaunchTime     time.Time
	// Tags are the group's tags with PropagateAtLaunch set.
	Tags map[string]string
}

// Server is the simulator. It implements http.Handler.
type Server struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	closed    bool
	seq       int
	groups    map[string]*group
	instances map[string]*instance // by id, including terminated ones
	configs   map[string]string    // launch configuration name to instance type
	faults    faults
	calls     map[string]int
	ops       map[string]int

	srv *http.Server
	ln  net.Listener
}

// New returns a Server with defaults filled in.
func New(cfg Config) *Server {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.AccountID == "" {
		cfg.AccountID = "123456789012"
	}
	if cfg.LaunchRetry <= 0 {
		cfg.LaunchRetry = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		groups:    map[string]*group{},
		instances: map[string]*instance{},
		configs:   map[string]string{},
		faults:    newFaults(),
		calls:     map[string]int{},
		ops:       map[string]int{},
	}
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
// It returns the base URL to give the SDK clients as their endpoint.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %q: %w", addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("awssim serve", "err", err.Error())
		}
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the server and every pending timer's effect.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.srv != nil {
		return s.srv.Shutdown(ctx)
	}
	return nil
}

// Calls returns how many requests of action the server answered,
// including retries and those answered with an injected fault.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// Operations returns how many operations of action clients started: the
// requests that were not retries of an earlier attempt.
func (s *Server) Operations(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops[action]
}

// apiError is one error answer.
type apiError struct {
	status  int
	code    string
	message string
	sender  bool
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func validation(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "ValidationError", message: fmt.Sprintf(format, args...), sender: true}
}

// ServeHTTP answers one AWS query-protocol request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seq++
	reqID := fmt.Sprintf("%08x-5e1f-4c3b-9a7d-%012x", s.seq, s.seq)
	s.mu.Unlock()
	w.Header().Set("x-amzn-RequestId", reqID)

	form, err := readForm(r)
	version := form.Get("Version")
	if err != nil {
		writeError(w, version, reqID, &apiError{status: http.StatusBadRequest, code: "MalformedQueryString", message: err.Error(), sender: true})
		return
	}
	action := form.Get("Action")
	if s.cfg.Latency > 0 {
		time.Sleep(s.cfg.Latency)
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		writeError(w, version, reqID, &apiError{status: http.StatusForbidden, code: "MissingAuthenticationToken",
			message: "Request is missing Authentication Token", sender: true})
		return
	}

	s.mu.Lock()
	s.calls[action]++
	// The SDK numbers the attempts of one operation: attempt=1 starts one.
	if a := r.Header.Get("amz-sdk-request"); a == "" || strings.HasPrefix(a, "attempt=1;") {
		s.ops[action]++
	}
	if s.closed {
		s.mu.Unlock()
		writeError(w, version, reqID, &apiError{status: http.StatusServiceUnavailable, code: "ServiceUnavailable", message: "simulator closed"})
		return
	}
	if s.faults.throttle(action) {
		s.mu.Unlock()
		s.log.Info("awssim injects throttling", "action", action)
		if version == ec2Version {
			writeError(w, version, reqID, &apiError{status: http.StatusServiceUnavailable, code: "RequestLimitExceeded", message: "Request limit exceeded.", sender: true})
		} else {
			writeError(w, version, reqID, &apiError{status: http.StatusBadRequest, code: "Throttling", message: "Rate exceeded", sender: true})
		}
		return
	}
	var body any
	var aerr *apiError
	switch version {
	case asgVersion:
		body, aerr = s.autoscaling(action, form)
	case ec2Version:
		body, aerr = s.ec2(action, form)
	default:
		aerr = &apiError{status: http.StatusBadRequest, code: "InvalidAction", message: fmt.Sprintf("unsupported Version %q for action %q", version, action), sender: true}
	}
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, version, reqID, aerr)
		return
	}
	writeXML(w, http.StatusOK, body, reqID)
}

func readForm(r *http.Request) (url.Values, error) {
	if r.Method != http.MethodPost {
		return r.URL.Query(), nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return url.ParseQuery(string(b))
}

// responseMetadata is the awsquery trailer.
type responseMetadata struct {
	RequestID string `xml:"RequestId"`
}

// withRequestID lets response bodies receive the request id.
type withRequestID interface{ setRequestID(string) }

func writeXML(w http.ResponseWriter, status int, body any, reqID string) {
	if b, ok := body.(withRequestID); ok {
		b.setRequestID(reqID)
	}
	out, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, "marshal response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	out = append([]byte(xml.Header), out...)
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

type asgErrorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

type ec2ErrorResponse struct {
	XMLName xml.Name `xml:"Response"`
	Errors  struct {
		Error struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		} `xml:"Error"`
	} `xml:"Errors"`
	RequestID string `xml:"RequestID"`
}

func writeError(w http.ResponseWriter, version, reqID string, e *apiError) {
	if version == ec2Version {
		var b ec2ErrorResponse
		b.Errors.Error.Code, b.Errors.Error.Message, b.RequestID = e.code, e.message, reqID
		writeXML(w, e.status, b, reqID)
		return
	}
	b := asgErrorResponse{Xmlns: asgNamespace, RequestID: reqID}
	b.Error.Type = "Receiver"
	if e.sender {
		b.Error.Type = "Sender"
	}
	b.Error.Code, b.Error.Message = e.code, e.message
	writeXML(w, e.status, b, reqID)
}

// timestamp formats times as the query protocols do.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// members reads a list parameter: prefix.1, prefix.2, ... (EC2 style) or
// prefix.member.1, ... (awsquery style); pass the full prefix.
func members(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[fmt.Sprintf("%s.%d", prefix, i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}
