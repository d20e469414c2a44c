package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubroker/gpubroker/broker"
)

// Config configures a Store.
type Config struct {
	// URL is the PostgreSQL connection URL or keyword/value string.
	URL string
	// MaxConns caps the pool (default 10).
	MaxConns int32
	// ConnectTimeout bounds establishing a connection (default 5s).
	ConnectTimeout time.Duration
	// Logger receives store events (default: discard).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.URL == "" {
		return broker.Invalid("database.url", "must be set, e.g. postgres://user@host:5432/gpubroker")
	}
	if c.MaxConns == 0 {
		c.MaxConns = 10
	}
	if c.MaxConns < 0 {
		return broker.Invalid("database.max_conns", "must be positive, got %d", c.MaxConns)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Store is gpubroker's PostgreSQL state. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	// seen caches the last observation applied per source (see obscache.go).
	seen obsCache
	// epoch is the leader epoch this store last took (0: it never led);
	// lease is the lease that took it. Op writes carry the epoch, and a
	// write refused for a stale epoch ends the lease (see leader.go).
	epoch atomic.Int64
	lease atomic.Pointer[Lease]
}

// Open connects to the database and checks that it answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, broker.Invalid("database.url", "cannot parse the URL (%s): use postgres://user:password@host:port/dbname", parseProblem(err))
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &connectError{addr: Address(cfg.URL), err: err}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, &connectError{addr: Address(cfg.URL), err: err}
	}
	return &Store{pool: pool, cfg: cfg, log: cfg.Logger}, nil
}

// Close releases all connections.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database at %s: %w", Address(s.cfg.URL), err)
	}
	return nil
}

// Address returns host:port/database of a connection string without the
// password, for error messages and logs.
func Address(connString string) string {
	u, err := url.Parse(connString)
	if err != nil || u.Host == "" {
		// keyword/value form: let pgx parse it and rebuild the address.
		cc, perr := pgxpool.ParseConfig(connString)
		if perr != nil {
			return "(unparsable database URL)"
		}
		return fmt.Sprintf("%s:%d/%s", cc.ConnConfig.Host, cc.ConnConfig.Port, cc.ConnConfig.Database)
	}
	return u.Host + u.Path
}

// parseProblem extracts pgx's reason without echoing the connection string,
// which may hold a password.
func parseProblem(err error) string {
	var inner interface{ Unwrap() error }
	if errors.As(err, &inner) && inner.Unwrap() != nil {
		return inner.Unwrap().Error()
	}
	return "invalid syntax"
}

// connectError reports a failed connection on one line: pgx lists every
// address it tried on lines of their own, often the same line twice.
type connectError struct {
	addr string
	err  error
}

func (e *connectError) Error() string {
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(e.err.Error(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		parts = append(parts, strings.TrimSuffix(l, ":"))
	}
	return "connect to database at " + e.addr + ": " + strings.Join(parts, ": ")
}

func (e *connectError) Unwrap() error { return e.err }
