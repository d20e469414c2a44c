package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpubroker/gpubroker/store"
)

// ReadModel keeps the answers of the read routes the dashboards poll
// (/capacity, /demand, /nodes) in memory, one generation at a time: the
// leader starts a new generation after each tick, and every replica does
// when PostgreSQL notifies it (store.ListenChanged), so within a
// generation an answer is computed once, by the route's own handler
// against the store, and every other request with the same query is
// served from memory. Each answer carries a strong ETag (a hash of its
// body): a client that sends it back in If-None-Match gets 304 Not
// Modified without a body, in this generation and in later ones while the
// answer stays the same.
//
// An answer is therefore as of the first request after the latest change
// (wait_seconds and at included), and at most MaxAge old: a replica that
// misses notifications (its listening connection is down) still refreshes.
type ReadModel struct {
	cfg ReadModelConfig
	id  string // this replica's, to ignore its own notifications
	gen atomic.Uint64

	mu      sync.Mutex
	entries map[string]*answer // by path and query, of generation entGen
	entGen  uint64
	bytes   int
	// shared are values several answers of generation entGen are cut
	// from (the node list every page of /nodes is a slice of).
	shared map[string]*sharedValue
}

// ReadModelConfig configures a ReadModel.
type ReadModelConfig struct {
	// MaxAge bounds how long an answer is served without a new
	// generation (default 10s, two ticks).
	MaxAge time.Duration
	// MaxBytes bounds the bodies kept per generation (default 256 MiB);
	// answers past it are computed per request.
	MaxBytes int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// NewReadModel returns an empty read model.
func NewReadModel(cfg ReadModelConfig) *ReadModel {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 10 * time.Second
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &ReadModel{cfg: cfg, id: hex.EncodeToString(id[:]), entries: map[string]*answer{}, shared: map[string]*sharedValue{}}
}

// Changed starts a new generation: every answer is computed again on its
// next request. It returns the notification payload to send to the other
// replicas (store.NotifyChanged).
func (m *ReadModel) Changed() string {
	return m.id + ":" + strconv.FormatUint(m.gen.Add(1), 10)
}

// Notified handles a notification payload from store.ListenChanged: one
// from another replica (or an empty one, sent on reconnecting) starts a
// new generation; this replica's own is ignored, as Changed already did.
func (m *ReadModel) Notified(payload string) {
	if sender, _, _ := strings.Cut(payload, ":"); payload != "" && sender == m.id {
		return
	}
	m.gen.Add(1)
}

// answer is one computed answer; ready is closed when it is.
type answer struct {
	ready  chan struct{}
	gen    uint64 // the generation it belongs to
	at     time.Time
	status int
	header http.Header
	body   []byte
	etag   string
	// gzipped is body compressed, made on the first request that accepts
	// it (a list of 5,000 nodes is 1.3 MB, about a tenth of that gzipped).
	gzipOnce sync.Once
	gzipped  []byte
}

// gzipBody returns the body gzipped.
func (a *answer) gzipBody() []byte {
	a.gzipOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // a valid level: no error
		_, _ = zw.Write(a.body)                          // into memory: no error
		_ = zw.Close()
		a.gzipped = b.Bytes()
	})
	return a.gzipped
}

// acceptsGzip reports whether the request's Accept-Encoding lists gzip
// with a nonzero weight.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
				return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
			}
		}
	}
	return false
}

// cached serves a read route from the model (see ReadModel). Only 200
// answers are kept; any other is passed on as the handler wrote it.
func (s *server) cached(next http.Handler) http.Handler {
	m := s.cfg.ReadModel
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, compute := m.lookup(cacheKey(r))
		if compute {
			m.fill(a, next, r)
		}
		<-a.ready
		if a.status != http.StatusOK {
			writeBody(w, a, a.body)
			return
		}
		h := w.Header()
		// The gzipped representation has a tag of its own (RFC 9110 8.8.3).
		gz := acceptsGzip(r) && len(a.body) >= 1024
		etag := a.etag
		if gz {
			etag = strings.TrimSuffix(etag, `"`) + `-gzip"`
		}
		h.Set("ETag", etag)
		h.Set("Vary", "Accept-Encoding")
		// Stored but revalidated on every use: the ETag makes that cheap.
		h.Set("Cache-Control", "private, no-cache")
		if etagMatch(r.Header.Get("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if gz {
			h.Set("Content-Encoding", "gzip")
			writeBody(w, a, a.gzipBody())
			return
		}
		writeBody(w, a, a.body)
	})
}

// cacheKey is the answer's identity: the route and query, and for a
// tenant-admin its tenant, since its answers are scoped (scope.go) while
// every other role gets the same one.
func cacheKey(r *http.Request) string {
	key := r.URL.Path + "?" + r.URL.RawQuery
	if tok, _ := principal(r); tok.Role == store.RoleTenantAdmin {
		key += "#tenant=" + tok.Tenant
	}
	return key
}

// lookup returns the current answer for key, or a new one the caller must
// compute (compute true). Concurrent misses on one key share one
// computation.
func (m *ReadModel) lookup(key string) (a *answer, compute bool) {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	gen := m.gen.Load() // under mu: never older than entGen
	m.advance(gen)
	if a := m.entries[key]; a != nil && now.Sub(a.at) < m.cfg.MaxAge {
		return a, false
	}
	a = &answer{ready: make(chan struct{}), gen: gen, at: now}
	if m.bytes < m.cfg.MaxBytes {
		m.entries[key] = a
	}
	return a, true
}

// advance drops what older generations kept once gen is newer; m.mu is
// held.
func (m *ReadModel) advance(gen uint64) {
	if m.entGen < gen {
		m.entries, m.shared, m.entGen, m.bytes = map[string]*answer{}, map[string]*sharedValue{}, gen, 0
	}
}

// genKey carries the generation of the answer a handler computes.
type genKey struct{}

// sharedValue is one value of a generation; ready is closed when it is
// computed.
type sharedValue struct {
	ready chan struct{}
	at    time.Time
	v     any
	err   error
}

// share returns the value of key in the generation of the answer being
// computed on ctx (the current one outside an answer), computing it with
// fn once per generation (and at most MaxAge old), so every answer of a
// generation cut from it agrees: every page of /nodes is a slice of one
// node list. fn runs without ctx's cancellation, since other requests
// wait for it. An error is not kept.
func (m *ReadModel) share(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	gen, ok := ctx.Value(genKey{}).(uint64)
	if !ok {
		gen = m.gen.Load()
	}
	now := m.cfg.Now()
	m.mu.Lock()
	m.advance(gen)
	if m.entGen != gen {
		// An answer of a generation already replaced: its value would
		// be dropped at once, so compute it for this answer alone.
		m.mu.Unlock()
		return fn(context.WithoutCancel(ctx))
	}
	sv := m.shared[key]
	compute := sv == nil || now.Sub(sv.at) >= m.cfg.MaxAge
	if compute {
		sv = &sharedValue{ready: make(chan struct{}), at: now}
		m.shared[key] = sv
	}
	m.mu.Unlock()
	if compute {
		m.compute(key, sv, func() (any, error) { return fn(context.WithoutCancel(ctx)) })
	}
	select {
	case <-sv.ready:
		return sv.v, sv.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// compute fills sv with fn's value and publishes it; on an error (or a
// panic, which goes on up to the recoverer) it drops sv, so the next
// request computes the value again.
func (m *ReadModel) compute(key string, sv *sharedValue, fn func() (any, error)) {
	sv.err = fmt.Errorf("compute %s: did not finish", key)
	defer func() {
		if sv.err != nil {
			m.mu.Lock()
			if m.shared[key] == sv {
				delete(m.shared, key)
			}
			m.mu.Unlock()
		}
		close(sv.ready)
	}()
	sv.v, sv.err = fn()
}

// fill computes a with the route's handler and publishes it.
func (m *ReadModel) fill(a *answer, next http.Handler, r *http.Request) {
	// IMPORTANT: every request of the generation waits for this answer,
	// so the client that happens to compute it going away must not cancel
	// it: a canceled store read answers nothing, which was kept as an
	// empty 200 for the whole generation.
	r = r.WithContext(context.WithValue(context.WithoutCancel(r.Context()), genKey{}, a.gen))
	rec := &recorder{header: http.Header{}}
	defer func() {
		a.status, a.header, a.body = rec.status, rec.header, rec.body.Bytes()
		if a.status == 0 {
			a.status = http.StatusOK
		}
		sum := sha256.Sum256(a.body)
		a.etag = `"` + hex.EncodeToString(sum[:12]) + `"`
		m.mu.Lock()
		key := cacheKey(r) // as lookup's: a tenant-admin's answer is its tenant's
		if m.entries[key] == a {
			if a.status == http.StatusOK {
				m.bytes += len(a.body)
			} else {
				delete(m.entries, key)
			}
		}
		m.mu.Unlock()
		close(a.ready)
	}()
	next.ServeHTTP(rec, r)
}

// recorder is the ResponseWriter a cached answer is computed into.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// writeBody writes a's status and headers with body (a's, or gzipped).
func writeBody(w http.ResponseWriter, a *answer, body []byte) {
	h := w.Header()
	for k, vs := range a.header {
		if _, set := h[k]; !set {
			h[k] = vs
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(a.status)
	_, _ = w.Write(body) // the client went away; nothing to do
}

// etagMatch is If-None-Match's weak comparison (RFC 9110 13.1.2): "*" or
// any listed tag equal to etag, W/ prefixes ignored.
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// invalidateOnWrite starts a new generation of the read model after every
// successful write through this API (a pool bound, a node's protection,
// a manual operation), so this replica's next read shows it, and tells
// the other replicas. Agents' reports and dry-run plans do not.
func (s *server) invalidateOnWrite(next http.Handler) http.Handler {
	m := s.cfg.ReadModel
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !changesReads(r) {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status < 400 {
			payload := m.Changed()
			if err := s.st.NotifyChanged(r.Context(), payload); err != nil {
				s.log.Warn("notify replicas of a write", "err", err)
			}
		}
	})
}

// changesReads reports whether r may change what the cached routes
// answer: writes do, except a dry-run plan and an agent's report (every
// node sends one at an interval; the next tick merges it into the nodes).
func changesReads(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	return !(r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/report") || r.URL.Path == "/api/v1/plan"))
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
