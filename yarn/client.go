package yarn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gpubroker/gpubroker/broker"
)

// The RM REST paths the client reads, under /ws/v1/cluster.
const (
	// PathApps asks only for live apps: an unfiltered /apps also lists
	// every finished app the RM remembers, which makes answers huge.
	PathApps = "/ws/v1/cluster/apps?states=ACCEPTED,RUNNING"
	// PathNodes names every state, so nodes being decommissioned and gone
	// are seen as such rather than as missing.
	PathNodes     = "/ws/v1/cluster/nodes?states=NEW,RUNNING,UNHEALTHY,DECOMMISSIONING,DECOMMISSIONED,LOST,REBOOTED,SHUTDOWN"
	PathScheduler = "/ws/v1/cluster/scheduler"
)

// maxRedirects bounds standby-to-active redirects within one request.
const maxRedirects = 3

// Client reads the ResourceManager REST API. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client

	mu     sync.Mutex
	active int // index in cfg.RMs of the RM that answered last

	// bufs holds the buffers of the small answers read whole between
	// polls; windows those of the large answers' stream scanners.
	bufs    bufferPool
	windows windowPool

	// cache keeps the container lists of apps between polls; nm those of
	// NodeManagers, read instead once nmMode says the RM lacks the
	// app-attempt containers endpoint.
	cache  containerCache
	nm     nmCache
	nmMode atomic.Bool
	// others keeps, per GPU node, the containers its NodeManager runs
	// for apps whose containers the RM was not asked for (apps that hold
	// no GPUs: CPU executors, ApplicationMasters), see completeNodes.
	others nmCache

	// lastApps is how many apps the last poll read, the room made for
	// the next.
	lastApps atomic.Int64
}

// NewClient returns a client for the RMs in cfg.
func NewClient(cfg Config) (*Client, error) {
	cfg.RMs = slices.Clone(cfg.RMs)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("yarn client config: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Client{
		cfg: cfg,
		http: &http.Client{
			Transport: cfg.Transport,
			// Redirects are followed by hand: a standby RM's redirect
			// target is remembered as the active RM.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// RMs returns the configured RM addresses, normalised.
func (c *Client) RMs() []string { return slices.Clone(c.cfg.RMs) }

// Observe reads apps in ACCEPTED or RUNNING with their resource requests, the
// nodes and the queue tree, and the live containers of the RUNNING apps that
// hold GPUs (see observeContainers). On any failure it returns an error that names
// the RM addresses tried and wraps broker.ErrStale, never a partial or empty
// observation.
func (c *Client) Observe(ctx context.Context) (*Observation, error) {
	var (
		apps  = appsAnswer{hint: int(c.lastApps.Load())}
		nodes nodesAnswer
		sched schedulerResponse
		wg    sync.WaitGroup
		rms   [3]string
		errs  [3]error
	)
	for i, f := range []struct {
		path string
		v    any
	}{{PathApps, &apps}, {PathNodes, &nodes}, {PathScheduler, &sched}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rms[i], errs[i] = c.Get(ctx, f.path, f.v)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	if sched.Scheduler == nil || sched.Scheduler.SchedulerInfo == nil {
		return nil, fmt.Errorf("rm %s: %s: no schedulerInfo in the answer: %w", rms[2], PathScheduler, broker.ErrStale)
	}
	c.lastApps.Store(int64(len(apps.apps)))
	obs := &Observation{
		RM:    rms[0],
		At:    c.cfg.Now().UTC(),
		Apps:  apps.apps,
		Nodes: nodes.nodes,
	}
	obs.Scheduler, obs.Queues = convertScheduler(&sched)
	resolveQueues(obs.Apps, obs.Queues)
	if err := c.observeContainers(ctx, obs); err != nil {
		return nil, fmt.Errorf("rm %s: %w", obs.RM, err)
	}
	return obs, nil
}

// Get fetches path (under the RM root, with its query) as JSON into v,
// starting with the RM that answered last and failing over to the others on
// any failure. It returns the base URL of the RM that answered. Errors name
// every RM tried and wrap broker.ErrStale.
func (c *Client) Get(ctx context.Context, path string, v any) (string, error) {
	c.mu.Lock()
	start := c.active
	c.mu.Unlock()
	n := len(c.cfg.RMs)
	var errs []error
	for i := range n {
		rm := c.cfg.RMs[(start+i)%n]
		served, err := c.getFrom(ctx, rm, path, v)
		if err == nil {
			c.remember(served)
			return served, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("rm %s: get %s: %w", rm, path, ctx.Err())
		}
		if notFound(err) {
			// The active RM answered that the object does not exist:
			// an answer, not an outage, so no other RM is asked.
			return "", fmt.Errorf("%w: %w", broker.ErrStale, err)
		}
		errs = append(errs, err)
		if i+1 < n {
			c.cfg.Logger.WarnContext(ctx, "yarn rm failed, trying the next", "rm", rm, "path", path, "err", err)
		}
	}
	return "", fmt.Errorf("%w: %w", broker.ErrStale, errors.Join(errs...))
}

// remember makes the RM at base the first one tried next time.
func (c *Client) remember(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, rm := range c.cfg.RMs {
		if rm == base {
			c.active = i
			return
		}
	}
}

// getFrom performs one request against rm, following standby redirects.
func (c *Client) getFrom(ctx context.Context, rm, path string, v any) (string, error) {
	target := rm + path
	if c.cfg.User != "-" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		target += sep + "user.name=" + url.QueryEscape(c.cfg.User)
	}
	for hop := 0; ; hop++ {
		next, err := c.fetch(ctx, target, v)
		if err != nil {
			return "", fmt.Errorf("rm %s: get %s: %w", rm, path, err)
		}
		if next == "" {
			return origin(target), nil
		}
		if hop >= maxRedirects {
			return "", fmt.Errorf("rm %s: get %s: more than %d redirects", rm, path, maxRedirects)
		}
		c.cfg.Logger.InfoContext(ctx, "yarn rm redirects to the active rm", "rm", rm, "to", origin(next))
		target = next
	}
}

// fetch GETs target and decodes it into v. It returns a non-empty URL when
// the RM redirects (a standby RM names the active one).
func (c *Client) fetch(ctx context.Context, target string, v any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := resp.Header.Get("Location")
		if loc == "" {
			return "", fmt.Errorf("standby RM answered %s without a redirect target", resp.Status)
		}
		u, err := resp.Request.URL.Parse(loc)
		if err != nil {
			return "", fmt.Errorf("redirect target %q: %w", loc, err)
		}
		return u.String(), nil
	case resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Negotiate"):
		return "", errors.New("answered 401 asking for Kerberos (WWW-Authenticate: Negotiate): the RM is kerberized; set yarn.kerberos")
	case resp.StatusCode != http.StatusOK:
		detail, remote := errorDetail(resp)
		return "", &statusError{code: resp.StatusCode, status: resp.Status, detail: detail, remote: remote}
	}

	ct := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); !strings.HasSuffix(mt, "json") {
		detail, _ := errorDetail(resp)
		return "", fmt.Errorf("answered %q, not JSON: %s", ct, detail)
	}
	if resp.ContentLength > c.cfg.MaxResponseBytes {
		return "", fmt.Errorf("answer of %d bytes exceeds %d bytes (raise max_response_bytes)", resp.ContentLength, c.cfg.MaxResponseBytes)
	}
	body := &limitedBody{r: resp.Body, limit: c.cfg.MaxResponseBytes}
	tooLarge := func() error {
		return fmt.Errorf("answer exceeds %d bytes (raise max_response_bytes)", c.cfg.MaxResponseBytes)
	}
	// The large answers decode themselves (decode.go) as they stream in,
	// in a window of about one element: never the whole body in memory.
	if d, ok := v.(decoder); ok {
		s := newStreamScanner(body, c.windows.get())
		err := d.decode(s)
		c.windows.put(s.window())
		switch {
		case body.over():
			return "", tooLarge()
		case s.readErr() != nil:
			return "", fmt.Errorf("read answer: %w", s.readErr())
		case err != nil:
			if sc := (*scanError)(nil); errors.As(err, &sc) && sc.eof {
				return "", fmt.Errorf("decode answer: truncated JSON after %d bytes: %w", body.n, err)
			}
			return "", fmt.Errorf("decode answer: %w", err)
		}
		return "", nil
	}
	// The rest (small) go through encoding/json into their wire shapes.
	kind := bufferKind(target)
	buf := c.bufs.get(kind)
	defer c.bufs.put(kind, buf)
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength) + 1)
	}
	if _, err := buf.ReadFrom(body); err != nil {
		if body.over() {
			return "", tooLarge()
		}
		return "", fmt.Errorf("read answer: %w", err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) && se.Offset >= int64(buf.Len()) {
			return "", fmt.Errorf("decode answer: truncated JSON after %d bytes: %w", buf.Len(), err)
		}
		return "", fmt.Errorf("decode answer: %w", err)
	}
	return "", nil
}

// errTooLarge ends a body read past its limit.
var errTooLarge = errors.New("answer too large")

// limitedBody reads an answer up to limit bytes and counts them; reading
// past the limit fails with errTooLarge (over reports it), so a huge
// answer is refused after limit bytes, not held.
type limitedBody struct {
	r        io.Reader
	limit, n int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.n > l.limit {
		return 0, errTooLarge
	}
	if rest := l.limit + 1 - l.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.limit {
		return n, errTooLarge
	}
	return n, err
}

// over reports whether the body went past the limit.
func (l *limitedBody) over() bool { return l.n > l.limit }

// windowPool keeps stream scanners' windows between answers.
type windowPool struct{ p sync.Pool }

func (w *windowPool) get() []byte {
	if b, ok := w.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 0, 2*scanChunk)
}

func (w *windowPool) put(b []byte) {
	if cap(b) > 4<<20 {
		return // a huge element: let it go
	}
	w.p.Put(&b)
}

var titleRE = regexp.MustCompile(`(?is)<title>\s*(.*?)\s*</title>`)

// statusError is an RM answer other than 200 or a redirect.
type statusError struct {
	code           int
	status, detail string
	// remote is the RemoteException's exception name when the RM's own
	// exception handler wrote the body (the RM answered, it did not
	// merely lack the path).
	remote string
}

func (e *statusError) Error() string { return "answered " + e.status + ": " + e.detail }

// notFound reports whether err is the RM's own 404: a RemoteException
// NotFoundException, as for an application the RM no longer knows.
func notFound(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusNotFound && se.remote == "NotFoundException"
}

// errorDetail summarises an unexpected body: the RemoteException message, an
// HTML page's title, or the start of the text; and the RemoteException's
// exception name, if any.
func errorDetail(resp *http.Response) (string, string) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	var re remoteException
	if json.Unmarshal(b, &re) == nil && re.RemoteException != nil {
		return re.RemoteException.Exception + ": " + re.RemoteException.Message, re.RemoteException.Exception
	}
	if m := titleRE.FindSubmatch(b); m != nil {
		return "HTML page " + strings.Join(strings.Fields(string(m[1])), " "), ""
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		s = "empty body"
	}
	return s, ""
}

// origin returns scheme://host of a URL.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host + strings.TrimSuffix(strings.SplitN(u.Path, "/ws/", 2)[0], "/")
}

// bufferPool keeps the buffers of the answers read whole (the scheduler's,
// small ones) between polls. Unlike a sync.Pool it is not emptied by the
// garbage collector, which runs several times a poll at scale. Each kind
// of answer remembers its last size, so answers fetched together each get
// a buffer that fits.
type bufferPool struct {
	mu   sync.Mutex
	free []*bytes.Buffer
	last map[string]int
}

// maxPooledBuffers bounds the buffers kept: one per bulk answer and per
// container call in flight.
const maxPooledBuffers = containerConcurrency + 4

// bufferKind names the kind of answer target is: its path, with the ids of
// per-app paths left out.
func bufferKind(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	if strings.HasPrefix(u.Path, "/ws/v1/cluster/apps/") {
		return "per-app"
	}
	return u.Path
}

// get returns the smallest kept buffer that holds the last answer of kind,
// or else the largest, grown to fit it.
func (p *bufferPool) get(kind string) *bytes.Buffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := p.last[kind]
	best := -1
	for i, b := range p.free {
		switch {
		case best < 0:
			best = i
		case b.Cap() >= want && (p.free[best].Cap() < want || b.Cap() < p.free[best].Cap()):
			best = i
		case p.free[best].Cap() < want && b.Cap() > p.free[best].Cap():
			best = i
		}
	}
	var b *bytes.Buffer
	if best < 0 {
		b = new(bytes.Buffer)
	} else {
		b = p.free[best]
		p.free[best] = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	}
	b.Reset()
	// Room for the answer and bytes.Buffer.ReadFrom's last read.
	b.Grow(want + bytes.MinRead)
	return b
}

// put keeps buf for the next poll and remembers the size of its answer;
// huge buffers and those beyond the bound are dropped.
func (p *bufferPool) put(kind string, buf *bytes.Buffer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]int{}
	}
	if n := buf.Len(); kind == "per-app" {
		// Per-app answers differ in size: remember a decaying maximum.
		p.last[kind] = max(n, p.last[kind]*7/8)
	} else {
		p.last[kind] = n
	}
	if buf.Cap() > 256<<20 || len(p.free) >= maxPooledBuffers {
		return
	}
	buf.Reset()
	p.free = append(p.free, buf)
}
