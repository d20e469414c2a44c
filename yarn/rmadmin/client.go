package rmadmin

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// StandbyException is the class a standby RM answers with; the client then
// fails over to the next RM.
const StandbyException = "org.apache.hadoop.ipc.StandbyException"

// Config configures a Client.
type Config struct {
	// Addrs are the admin addresses (host:port) of every RM of an HA pair
	// or group, tried in order; at least one.
	Addrs []string
	// User is the effective user the RM checks against yarn.admin.acl
	// (default "gpubroker").
	User string
	// DialTimeout bounds connecting to one RM (default 5s).
	DialTimeout time.Duration
	// CallTimeout bounds one call on one RM (default 30s).
	CallTimeout time.Duration
	// Logger receives failovers (default: discarded).
	Logger *slog.Logger
	// Kerberos, when set, authenticates every connection with SASL
	// GSSAPI as its principal (which is then the effective user, not
	// User), for an RM with hadoop.security.authentication=kerberos.
	Kerberos Kerberos
	// ServerPrincipal is the RM's yarn.resourcemanager.principal, with
	// _HOST standing for the admin address's host (default "rm/_HOST").
	ServerPrincipal string
}

func (c Config) withDefaults() Config {
	if c.User == "" {
		c.User = "gpubroker"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ServerPrincipal == "" {
		c.ServerPrincipal = "rm/_HOST"
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if len(c.Addrs) == 0 {
		return errors.New("rmadmin: at least one RM admin address is needed")
	}
	for _, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("rmadmin: admin address %q: %w", a, err)
		}
	}
	if c.DialTimeout < 0 || c.CallTimeout < 0 {
		return errors.New("rmadmin: timeouts must not be negative")
	}
	return nil
}

// RemoteError is an exception the RM answered with. Class keeps the Java
// exception class so callers can tell a standby RM, an ACL refusal or a bad
// argument apart.
type RemoteError struct {
	Addr    string
	Method  string
	Class   string
	Message string
	// Fatal is true when the server closed the connection (a protocol
	// error rather than a failed call).
	Fatal bool
}

func (e *RemoteError) Error() string {
	msg := e.Message
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] // the rest is the Java stack trace
	}
	return fmt.Sprintf("rm admin %s: %s: %s: %s", e.Addr, e.Method, e.Class, msg)
}

// IsStandby reports whether err is a StandbyException from an RM.
func IsStandby(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Class == StandbyException
}

// Client calls the RM admin protocol. Every call opens its own connection:
// admin calls are rare and a fresh connection has no state to go stale.
// It is safe for concurrent use.
type Client struct {
	cfg    Config
	mu     sync.Mutex
	active int // index of the RM that answered last
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg}, nil
}

// RefreshNodes makes the RM re-read its include and exclude files. Hosts
// newly excluded are decommissioned as t says; with Graceful, timeout (if
// positive) overrides the per-host timeouts of the exclude file. Hosts
// removed from the exclude file are recommissioned.
func (c *Client) RefreshNodes(ctx context.Context, t DecommissionType, timeout time.Duration) error {
	_, err := c.call(ctx, "refreshNodes", refreshNodesRequest(t, timeout))
	return err
}

// UpdateNodeResource sets the total resource of the node nodeID (host:port,
// as the RM's node id) until the NodeManager re-registers. When the new
// total is below what runs there, containers are preempted after
// overCommit; a negative overCommit never preempts.
func (c *Client) UpdateNodeResource(ctx context.Context, nodeID string, r Resource, overCommit time.Duration) error {
	req, err := updateNodeResourceRequest(nodeID, r, overCommit)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, "updateNodeResource", req)
	return err
}

// call runs method on the active RM, failing over to the others when one
// is a standby or cannot be reached. refreshNodes, updateNodeResource,
// addToClusterNodeLabels and replaceLabelsOnNode are idempotent, so a retry
// after a broken connection is safe; removeFromClusterNodeLabels retried
// after a first try that went through answers that the label is gone.
func (c *Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	c.mu.Lock()
	start := c.active
	c.mu.Unlock()
	var errs []error
	n := len(c.cfg.Addrs)
	for i := range n {
		idx := (start + i) % n
		addr := c.cfg.Addrs[idx]
		resp, err := c.callOne(ctx, addr, method, req)
		if err == nil {
			c.mu.Lock()
			c.active = idx
			c.mu.Unlock()
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		var re *RemoteError
		if errors.As(err, &re) && !re.Fatal && re.Class != StandbyException {
			return nil, err // the active RM refused: another would too
		}
		errs = append(errs, err)
		if i < n-1 {
			c.cfg.Logger.Info("rm admin failover", "method", method, "rm", addr, "err", err)
		}
	}
	return nil, errors.Join(errs...)
}

// callOne makes one call on one RM over a fresh connection.
func (c *Client) callOne(ctx context.Context, addr, method string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rm admin %s: %s: dial: %w", addr, method, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	clientID := make([]byte, 16)
	_, _ = rand.Read(clientID)
	const callID = 0
	r := bufio.NewReader(conn)
	user := c.cfg.User
	var out []byte
	var sess *saslSession
	if k := c.cfg.Kerberos; k != nil {
		// IMPORTANT: with Kerberos the effective user is the principal
		// itself; any other name would ask the RM for impersonation.
		user = k.Principal()
		sess, err = c.handshake(conn, r, addr)
		if err != nil {
			k.Record(addr, "", "", err)
			var re *RemoteError
			if errors.As(err, &re) {
				re.Method = method + ": sasl as " + k.Principal()
				return nil, re
			}
			return nil, fmt.Errorf("rm admin %s: %s: as %s: %w", addr, method, k.Principal(), err)
		}
		k.Record(addr, "sasl "+qopName(sess.qop), "", nil)
	} else {
		out = preamble()
	}
	calls := append(frame(rpcRequestHeader(connectionContextID, clientID), connectionContext(user, Protocol)),
		frame(rpcRequestHeader(callID, clientID), requestHeader(method), req)...)
	if sess.wrapped() {
		if calls, err = sess.wrapOut(calls); err != nil {
			return nil, fmt.Errorf("rm admin %s: %s: %w", addr, method, err)
		}
	}
	out = append(out, calls...)
	if _, err := conn.Write(out); err != nil {
		return nil, c.ioErr(ctx, addr, method, "write", err)
	}
	read := func() ([]byte, error) { return readFrame(r) }
	if sess.wrapped() {
		read = (&wrappedReader{r: r, s: sess, addr: addr}).next
	}
	for {
		b, err := read()
		if err != nil {
			var re *RemoteError
			if errors.As(err, &re) {
				re.Method = method
				return nil, re
			}
			return nil, c.ioErr(ctx, addr, method, "read answer", err)
		}
		hb, rest, err := delimited(b)
		if err != nil {
			return nil, fmt.Errorf("rm admin %s: %s: answer header: %w", addr, method, err)
		}
		h, err := parseResponseHeader(hb)
		if err != nil {
			return nil, fmt.Errorf("rm admin %s: %s: answer header: %w", addr, method, err)
		}
		if h.status == statusFatal {
			return nil, &RemoteError{Addr: addr, Method: method, Class: h.exceptionClass, Message: h.errorMsg, Fatal: true}
		}
		if h.callID != callID {
			continue // e.g. a ping answer; not ours
		}
		if h.status == statusError {
			return nil, &RemoteError{Addr: addr, Method: method, Class: h.exceptionClass, Message: h.errorMsg}
		}
		if len(rest) == 0 {
			return nil, nil
		}
		body, _, err := delimited(rest)
		if err != nil {
			return nil, fmt.Errorf("rm admin %s: %s: answer: %w", addr, method, err)
		}
		return body, nil
	}
}

func (c *Client) ioErr(ctx context.Context, addr, method, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("rm admin %s: %s: %s: %w", addr, method, what, ctx.Err())
	}
	return fmt.Errorf("rm admin %s: %s: %s: %w", addr, method, what, err)
}
