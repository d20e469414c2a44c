package yarn

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/colinmarc/hdfs/v2"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// CheckpointDirKey names a job's checkpoint directory: a YARN application
// tag "gpubroker.io/checkpoint-dir=hdfs://namenode:8020/path" or a pod
// annotation with this key. YARN lowercases tags, so a path named by a tag
// must be lowercase.
const CheckpointDirKey = "gpubroker.io/checkpoint-dir"

// CheckpointDir returns the checkpoint directory named by tags, or "".
func CheckpointDir(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, CheckpointDirKey+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// CheckpointConfig configures a CheckpointReader.
type CheckpointConfig struct {
	// User is the HDFS user (simple authentication; default "gpubroker").
	User string
	// Timeout bounds one lookup, NameNode connection included (default 5s).
	Timeout time.Duration
	// CacheFor keeps a lookup's answer, known or not, this long (default
	// 1 minute), so a tick does not walk every tree again.
	CacheFor time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives lookups that failed, at debug (default: discarded).
	Logger *slog.Logger
	// Kerberos, when set, authenticates to the NameNode as its principal
	// (SASL GSSAPI; the NameNode's principal is its NameNodePrincipal,
	// nn/_HOST by default) instead of as User.
	Kerberos *Kerberos
}

// CheckpointReader reads how much work a job would lose: the time since
// the newest modification below its checkpoint directory on HDFS. It never
// fails a tick: a missing directory, an unreachable NameNode or a timeout
// make the age unknown, which victim selection treats as the worst case.
type CheckpointReader struct {
	cfg   CheckpointConfig
	mu    sync.Mutex
	cache map[string]checkpointEntry
}

var _ engine.Checkpoints = (*CheckpointReader)(nil)

type checkpointEntry struct {
	at     time.Time
	newest time.Time
	ok     bool
}

// NewCheckpointReader returns a reader for cfg.
func NewCheckpointReader(cfg CheckpointConfig) (*CheckpointReader, error) {
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.CacheFor == 0 {
		cfg.CacheFor = time.Minute
	}
	if cfg.Timeout < 0 || cfg.CacheFor < 0 {
		return nil, errors.New("checkpoint reader: Timeout and CacheFor must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &CheckpointReader{cfg: cfg, cache: map[string]checkpointEntry{}}, nil
}

// WorkAtRisk returns the time since the newest checkpoint below dir (an
// hdfs:// URI); ok is false when that is unknown.
func (r *CheckpointReader) WorkAtRisk(ctx context.Context, dir string) (age time.Duration, ok bool) {
	newest, ok := r.Newest(ctx, dir)
	if !ok {
		return 0, false
	}
	return max(r.cfg.Now().Sub(newest), 0), true
}

// Newest returns the newest modification time of dir or anything below it;
// ok is false when it cannot be read (or the tree is empty).
func (r *CheckpointReader) Newest(ctx context.Context, dir string) (time.Time, bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	if e, hit := r.cache[dir]; hit && now.Sub(e.at) < r.cfg.CacheFor {
		r.mu.Unlock()
		return e.newest, e.ok
	}
	r.mu.Unlock()
	newest, err := r.lookup(ctx, dir)
	if err != nil {
		r.cfg.Logger.Debug("checkpoint age unknown", "dir", dir, "err", err)
	}
	e := checkpointEntry{at: now, newest: newest, ok: err == nil}
	if ctx.Err() == nil { // a cancelled lookup says nothing about the tree
		r.mu.Lock()
		r.cache[dir] = e
		r.mu.Unlock()
	}
	return e.newest, e.ok
}

// lookup walks dir on its NameNode within the timeout.
func (r *CheckpointReader) lookup(ctx context.Context, dir string) (time.Time, error) {
	u, err := url.Parse(dir)
	if err != nil || u.Scheme != "hdfs" || u.Host == "" {
		return time.Time{}, fmt.Errorf("checkpoint dir %q: want hdfs://namenode[:port]/path", dir)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "8020")
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	// IMPORTANT: every connection carries the deadline, since the HDFS
	// client's calls take no context: a hung NameNode ends the walk with
	// an I/O timeout instead of blocking the tick.
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, a)
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(deadline)
		return c, nil
	}
	type result struct {
		t   time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		opts := hdfs.ClientOptions{Addresses: []string{addr}, User: r.cfg.User, NamenodeDialFunc: dial, DatanodeDialFunc: dial}
		if k := r.cfg.Kerberos; k != nil {
			opts.User = ""
			opts.KerberosClient = k.Client()
			opts.KerberosServicePrincipleName, _ = splitPrincipal(k.NameNodePrincipal())
		}
		client, err := hdfs.NewClient(opts)
		if err != nil {
			done <- result{err: fmt.Errorf("connect to namenode %s: %w", addr, err)}
			return
		}
		defer client.Close()
		var newest time.Time
		err = client.Walk(path, func(_ string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if info.ModTime().After(newest) {
				newest = info.ModTime()
			}
			return nil
		})
		if err == nil && newest.IsZero() {
			err = fs.ErrNotExist
		}
		if err != nil {
			err = fmt.Errorf("walk %s: %w", dir, err)
		}
		done <- result{newest, err}
	}()
	select {
	case res := <-done:
		return res.t, res.err
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("walk %s: %w", dir, ctx.Err())
	}
}

// CheckpointAge returns the value of broker.Workload.CheckpointAge for a
// job with these tags (or annotations as key=value): the work at risk, or
// -1 when the job names no checkpoint directory or its age is unknown, so
// the planner falls back to the job's run time, the worst case.
func (r *CheckpointReader) CheckpointAge(ctx context.Context, tags []string) time.Duration {
	dir := CheckpointDir(tags)
	if dir == "" {
		return -1
	}
	age, ok := r.WorkAtRisk(ctx, dir)
	if !ok {
		return -1
	}
	return age
}
