package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
)

// broker wiring shared by serve and plan.
type wired struct {
	st         *store.Store
	provider   *cloud.Provider
	sides      sides
	newRuntime func() (*broker.Runtime, error)
}

func wire(ctx context.Context, c *config, log *slog.Logger, migrate bool) (*wired, error) {
	if c.file.Database.URL == "" {
		return nil, usagef("no database: set database.url in the config file or GPUBROKER_DATABASE_URL")
	}
	if migrate {
		if err := store.Migrate(ctx, c.file.Database.URL); err != nil {
			return nil, usagef("%s", err)
		}
	}
	st, err := store.Open(ctx, store.Config{URL: c.file.Database.URL, MaxConns: c.file.Database.MaxConns, Logger: log})
	if err != nil {
		return nil, usagef("%s", err)
	}
	if err := seed(ctx, st, c, log); err != nil {
		st.Close()
		return nil, err
	}
	provider, err := cloud.New(ctx, cloud.Config{Region: c.file.Cloud.Region, Endpoint: c.file.Cloud.Endpoint,
		Pools: cloudPools(c.pools), Bounds: storeBounds(st), MaxProvisionTime: c.policy.MaxProvisionTime.D(), Logger: log})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("cloud provider: %w", err)
	}
	w := &wired{st: st, provider: provider}
	if len(c.file.YARN.RM) > 0 {
		ys, ya, err := yarnSide(c.file.YARN, log)
		if err != nil {
			st.Close()
			return nil, err
		}
		w.sides.observers = append(w.sides.observers, ys)
		if ya != nil {
			w.sides.actions = append(w.sides.actions, ya)
		}
	}
	if c.file.Kubernetes.Kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		client, err := kubeClient(c.file.Kubernetes.Kubeconfig)
		if err != nil {
			st.Close()
			return nil, err
		}
		ks, trigger, err := kubeSide(ctx, client, c.file.Kubernetes, log)
		if err != nil {
			st.Close()
			return nil, err
		}
		w.sides.observers = append(w.sides.observers, ks)
		w.sides.actions = append(w.sides.actions, ks)
		w.sides.trigger = trigger
	}
	checkpoints, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Logger: log})
	if err != nil {
		st.Close()
		return nil, err
	}
	observers := withRegistration(provider, w.sides.observers)
	period := c.file.YARN.PollInterval.D()
	w.newRuntime = func() (*broker.Runtime, error) {
		return broker.NewRuntime(broker.RuntimeConfig{Observers: observers, Actions: w.sides.actions,
			Pools: provider, Ledger: st.Ledger(), Logger: log, Period: period, Checkpoints: checkpoints})
	}
	return w, nil
}

func newLogger(e env, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: use debug, info, warn or error, got %q", level)
	}
	return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: l})), nil
}

func runServe(ctx context.Context, e env, args []string) error {
	fs := newFlags("serve", e)
	cfgPath := fs.String("config", "", "YAML configuration `file` (required)")
	listen := fs.String("listen", "", "API and dashboard `address` (overrides api.listen; default 127.0.0.1:8080)")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usagef("--config is required")
	}
	c, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if c.file.Database.URL == "" {
		// Keep the password out of the file: deployments pass it from a Secret.
		c.file.Database.URL = e.getenv("GPUBROKER_DATABASE_URL")
	}
	log, err := newLogger(e, *level)
	if err != nil {
		return err
	}
	w, err := wire(ctx, c, log, true)
	if err != nil {
		return err
	}
	defer w.st.Close()
	addr := *listen
	if addr == "" {
		addr = c.file.API.Listen
	}
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	return serve(ctx, e, w, addr, log, nil)
}

// serve runs the API and, while leading, the tick loop, until ctx ends.
// ready, when set, receives the listening address.
func serve(ctx context.Context, e env, w *wired, addr string, log *slog.Logger, ready func(string)) error {
	first, err := w.newRuntime()
	if err != nil {
		return err
	}
	ar := &apiRuntime{}
	ar.rt.Store(first)
	handler, err := api.New(api.Config{Store: w.st, Runtime: ar, Logger: log, Registry: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("listen on %s: %s", addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving the API and dashboard", "address", "http://"+ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	go func() { errc <- lead(ctx, w.st, ar, w.newRuntime, w.sides.trigger, log) }()
	go prune(ctx, w.st, ar, log)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// retention is how long capacity samples and decisions are kept.
const retention = 7 * 24 * time.Hour

// prune deletes samples and decisions older than the retention, hourly, on
// the leader, so the audit tables stay bounded.
func prune(ctx context.Context, st *store.Store, ar *apiRuntime, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !ar.leader.Load() {
			continue
		}
		if err := st.PruneSamples(ctx, time.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			log.Warn("prune samples and decisions", "err", err)
		}
	}
}
