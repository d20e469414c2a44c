package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/internal/memlimit"
)

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
	if limit, from := memlimit.Apply(e.getenv, "/", memlimit.DefaultRatio); limit > 0 {
		log.Info("go memory limit set below the cgroup's", "limit_bytes", limit, "from", from)
	} else {
		log.Debug("no go memory limit set", "why", from)
	}
	addr := *listen
	if addr == "" {
		addr = c.file.API.Listen
	}
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	cfg, err := appConfig(c, log, e.getenv)
	if err != nil {
		return err
	}
	cfg.Migrate, cfg.Seed, cfg.Listen = true, true, addr
	m, err := openApp(ctx, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	return runApp(ctx, m)
}

// runApp runs the assembly until ctx ends, its problems as usage errors.
func runApp(ctx context.Context, m *app.Main) error {
	err := m.Run(ctx)
	var ue *app.UsageError
	if errors.As(err, &ue) {
		return usagef("%s", ue.Msg)
	}
	return err
}
