package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
)

// seed writes the configuration's pools, tenants and policy into the
// store (see app.Seed).
func seed(ctx context.Context, st *store.Store, c *config, log *slog.Logger) error {
	return app.Seed(ctx, st, c.pools, c.tenants, c.policy, log)
}

// appConfig is the assembly's configuration for c: the endpoints are the
// file's; callers inject the store, clients and hooks they own.
func appConfig(c *config, log *slog.Logger, getenv func(string) string) (app.Config, error) {
	restart, err := nodeManagerRestart(c.file.YARN.NodeManagerRestart)
	if err != nil {
		return app.Config{}, err
	}
	yc, kc := c.file.YARN, c.file.Kubernetes
	return app.Config{
		DatabaseURL: c.file.Database.URL, MaxConns: c.file.Database.MaxConns,
		Pools: c.pools, FleetMembers: c.fleet, Tenants: c.tenants, Policy: c.policy,
		YARN: app.YARNConfig{RM: yc.RM, User: yc.User, Timeout: yc.Timeout.D(), AdminAddress: yc.AdminAddress,
			ExcludeFile: yc.ExcludeFile, ExcludeFileCopies: yc.ExcludeFileCopies, RestartNodeManager: restart, EvictGrace: yc.EvictGrace.D(),
			CordonLabel: yc.Cordon.Label, CordonHold: yc.Cordon.Hold.D(),
			Kerberos: yarnKerberos(yc.Kerberos, getenv)},
		Kubernetes: app.KubernetesConfig{Kubeconfig: kc.Kubeconfig, InCluster: app.InCluster(getenv), Adapter: kubeConfig(kc)},
		Cloud:      app.CloudConfig{Region: c.file.Cloud.Region, Endpoint: c.file.Cloud.Endpoint},
		Logger:     log, Period: yc.PollInterval.D(),
		TLS: app.TLSConfig{CertFile: c.file.API.TLS.CertFile, KeyFile: c.file.API.TLS.KeyFile, ClientCAFile: c.file.API.TLS.ClientCAFile,
			AgentAnyNode: c.file.API.TLS.AgentAnyNode},
		AuditRetention:       c.file.Audit.Retention.D(),
		XIDs:                 c.xids,
		AgentServiceAccounts: c.file.API.AgentServiceAccounts,
	}, nil
}

// openApp opens the assembly, reporting its configuration problems as
// usage errors.
func openApp(ctx context.Context, cfg app.Config) (*app.Main, error) {
	m, err := app.Open(ctx, cfg)
	var ue *app.UsageError
	if errors.As(err, &ue) {
		return nil, usagef("%s", ue.Msg)
	}
	return m, err
}

// kubeConfig is the adapter configuration from the file's kubernetes
// section; startup taints listed there are added to the built-in ones.
func kubeConfig(kc kubernetesConfig) k8s.Config {
	cfg := k8s.Config{GPUModelLabel: kc.GPUModelLabel, SchedulerNames: kc.SchedulerNames,
		GPUNodeLabels: kc.GPUNodeLabels, StaleAfter: kc.StaleAfter.D(), DRA: kc.DRA,
		DeviceClasses: k8s.DeviceClasses{GPU: kc.GPUDeviceClasses, MIG: kc.MIGDeviceClasses}, GPUDrivers: kc.GPUDrivers}
	if len(kc.StartupTaints) > 0 {
		cfg.StartupTaints = append(append([]string(nil), k8s.DefaultStartupTaints...), kc.StartupTaints...)
	}
	return cfg
}

// nodeManagerRestart builds the yarn.nodemanager_restart hook; nil when no
// command is configured.
func nodeManagerRestart(c nodeManagerRestartConfig) (func(context.Context, string) error, error) {
	if len(c.Command) == 0 {
		return nil, nil
	}
	timeout := c.Timeout.D()
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	hook, err := yarn.NodeManagerRestartCommand(c.Command, timeout)
	if err != nil {
		return nil, usagef("config: yarn.nodemanager_restart: %s", err)
	}
	return hook, nil
}
