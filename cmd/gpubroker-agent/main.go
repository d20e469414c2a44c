package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cmd/gpubroker-agent/internal/gpu"
	"github.com/gpubroker/gpubroker/cmd/gpubroker-agent/internal/push"
	"github.com/gpubroker/gpubroker/internal/certreload"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// env is what the agent may touch of the outside world; tests replace it.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	hostname       func() (string, error)
	// openNVML returns the NVML library at path (not yet initialised).
	openNVML func(path string) nvml.Interface
	// sleep waits between pushes (nil: a real timer).
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{
		stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, hostname: os.Hostname,
		openNVML: openNVMLLibrary, now: time.Now,
	}, os.Args[1:])
	stop()
	os.Exit(code)
}

// openNVMLLibrary returns the driver's NVML library; it is loaded by Init.
func openNVMLLibrary(path string) nvml.Interface { return nvml.New(nvml.WithLibraryPath(path)) }

// usageError is bad command-line input: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// options are the parsed flags.
type options struct {
	broker, tokenFile, node, library, logLevel, caFile string
	certFile, keyFile                                  string
	interval, minBackoff, maxBackoff                   time.Duration
	allowNoGPU, once, version                          bool
}

// parseArgs parses the command line; the environment supplies NODE_NAME
// and GPUBROKER_URL when the flags are absent.
func parseArgs(e env, args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("gpubroker-agent", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.StringVar(&o.broker, "broker", "", "broker base URL, e.g. http://gpubroker.gpubroker.svc (default $GPUBROKER_URL)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the agent token (role agent); read on every push, never printed")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM file of the CA that signed an https broker's certificate (default: the system's CAs)")
	fs.StringVar(&o.certFile, "cert-file", "", "PEM client certificate naming this node (common name or DNS name), to authenticate to an https broker without a token; reloaded when it changes")
	fs.StringVar(&o.keyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&o.node, "node", "", "node name as Kubernetes or YARN knows it (default $NODE_NAME, then the host name)")
	fs.DurationVar(&o.interval, "interval", 15*time.Second, "time between reports")
	fs.DurationVar(&o.minBackoff, "min-backoff", time.Second, "first wait after a failed push; doubles per failure, with jitter")
	fs.DurationVar(&o.maxBackoff, "max-backoff", 2*time.Minute, "longest wait after failed pushes")
	fs.BoolVar(&o.allowNoGPU, "allow-no-gpu", false, "run without the NVIDIA driver and report a node without GPUs")
	fs.StringVar(&o.library, "nvml-library", "libnvidia-ml.so.1", "NVML library to load (a file name searched by the dynamic loader, or a path)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.once, "once", false, "send one report and exit (status 1 if it was not delivered)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usagef("%s", err)
	}
	if fs.NArg() > 0 {
		return o, usagef("takes no arguments, got %q", fs.Args())
	}
	if o.version {
		return o, nil
	}
	if o.broker == "" {
		o.broker = e.getenv("GPUBROKER_URL")
	}
	if o.broker == "" {
		return o, usagef("--broker: name the broker's URL (or set GPUBROKER_URL), e.g. --broker http://gpubroker.gpubroker.svc")
	}
	switch {
	case o.certFile != "" && o.keyFile == "":
		return o, usagef("--key-file: name the private key of --cert-file")
	case o.keyFile != "" && o.certFile == "":
		return o, usagef("--cert-file: name the client certificate --key-file belongs to")
	case o.certFile != "" && !strings.HasPrefix(o.broker, "https://"):
		return o, usagef("--cert-file: a client certificate needs an https broker URL, got --broker %s", o.broker)
	case o.tokenFile == "" && o.certFile == "":
		return o, usagef("--token-file: name the file holding the agent token, or give --cert-file and --key-file to authenticate by client certificate")
	}
	if o.node == "" {
		o.node = e.getenv("NODE_NAME")
	}
	if o.node == "" && e.hostname != nil {
		h, err := e.hostname()
		if err != nil {
			return o, usagef("--node: no node name given and the host name is unknown: %s", err)
		}
		o.node = h
	}
	if o.node == "" {
		return o, usagef("--node: name the node (or set NODE_NAME)")
	}
	if o.interval < time.Second {
		return o, usagef("--interval: must be at least 1s, got %s", o.interval)
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff {
		return o, usagef("--min-backoff/--max-backoff: need 0 < min-backoff <= max-backoff, got %s and %s", o.minBackoff, o.maxBackoff)
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return o, usagef("--log-level: must be debug, info, warn or error, got %q", o.logLevel)
	}
	return o, nil
}

// run executes the agent and returns the exit status: 0 when stopped by a
// signal (or --once delivered), 1 for failures such as a missing NVIDIA
// driver, 2 for bad flags.
func run(ctx context.Context, e env, args []string) int {
	o, err := parseArgs(e, args)
	if err == nil && o.version {
		fmt.Fprintln(e.stdout, "gpubroker-agent", version)
		return 0
	}
	if err == nil {
		err = agent(ctx, e, o)
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "gpubroker-agent: %s\n", ue.msg)
		return 2
	default:
		fmt.Fprintf(e.stderr, "gpubroker-agent: %s\n", err)
		return 1
	}
}

func agent(ctx context.Context, e env, o options) error {
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.logLevel))
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	if o.tokenFile != "" {
		if _, err := os.Stat(o.tokenFile); err != nil {
			return usagef("--token-file: %s", err)
		}
	}
	now := e.now
	if now == nil {
		now = time.Now
	}

	reader, err := gpu.Open(ctx, gpu.Config{NVML: e.openNVML(o.library), Library: o.library, Logger: log})
	switch {
	case errors.Is(err, gpu.ErrNoLibrary) && o.allowNoGPU:
		log.InfoContext(ctx, "no NVIDIA driver; reporting a node without GPUs (--allow-no-gpu)", "library", o.library)
		reader = nil
	case errors.Is(err, gpu.ErrNoLibrary):
		return fmt.Errorf("no NVIDIA driver on this node (%w); install the driver, point --nvml-library at libnvidia-ml.so.1, or pass --allow-no-gpu to report a node without GPUs", err)
	case err != nil:
		return err
	}
	watchDone := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	if reader != nil {
		go func() {
			defer close(watchDone)
			_ = reader.Watch(watchCtx)
		}()
		defer func() {
			stopWatch()
			<-watchDone
			if err := reader.Close(); err != nil {
				log.WarnContext(ctx, "close NVML", "error", err.Error())
			}
		}()
	} else {
		close(watchDone)
		defer stopWatch()
	}

	sample := func(ctx context.Context) (broker.NodeReport, error) {
		rep := broker.NodeReport{Node: o.node, At: now().UTC(), AgentVersion: version, GPUs: []broker.GPUReport{}}
		if reader == nil {
			return rep, nil
		}
		rep.DriverVersion = reader.DriverVersion()
		gpus, err := reader.Sample(ctx)
		if err != nil {
			return rep, err
		}
		rep.GPUs = gpus
		return rep, nil
	}

	client, err := httpClient(o.caFile, o.certFile, o.keyFile, log)
	if err != nil {
		return err
	}
	p, err := push.New(push.Config{
		Broker: o.broker, Node: o.node, TokenFile: o.tokenFile, ClientCertificate: o.certFile != "",
		UserAgent: "gpubroker-agent/" + version, Client: client,
		Interval: o.interval, MinBackoff: o.minBackoff, MaxBackoff: o.maxBackoff, Logger: log, Sleep: e.sleep,
	})
	if err != nil {
		var ve *broker.ValidationError
		if errors.As(err, &ve) {
			return usagef("--%s: %s", strings.ReplaceAll(ve.Field, "_", "-"), ve.Problem)
		}
		return err
	}
	if o.once {
		rep, err := sample(ctx)
		if err != nil {
			return fmt.Errorf("sample GPUs: %w", err)
		}
		if err := p.Push(ctx, rep); err != nil {
			return fmt.Errorf("report node %q to %s: %w", o.node, o.broker, err)
		}
		util, healthy, reason := rep.Health()
		fmt.Fprintf(e.stdout, "reported node %s: %d GPUs, utilisation %.2f, healthy %t%s\n",
			o.node, len(rep.GPUs), util, healthy, prefixed("; ", reason))
		return nil
	}
	log.InfoContext(ctx, "agent started", "node", o.node, "broker", o.broker, "interval", o.interval.String(),
		"driver", func() string {
			if reader == nil {
				return "none"
			}
			return reader.DriverVersion()
		}())
	return p.Run(ctx, sample)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// httpClient returns the client for the broker: the system's CAs, or only
// the one in caFile; with certFile and keyFile it presents that client
// certificate, reloaded when the files change.
func httpClient(caFile, certFile, keyFile string, log *slog.Logger) (*http.Client, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	if caFile == "" && certFile == "" {
		return c, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, usagef("--ca-file: %s", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca-file: %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		r, err := certreload.New(certreload.Config{CertFile: certFile, KeyFile: keyFile, Logger: log})
		var ve *broker.ValidationError
		if errors.As(err, &ve) {
			return nil, usagef("--%s: %s", strings.ReplaceAll(strings.TrimSuffix(ve.Field, "_file"), "_", "-")+"-file", ve.Problem)
		}
		if err != nil {
			return nil, err
		}
		tc.GetClientCertificate = r.ClientCertificate
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	c.Transport = tr
	return c, nil
}
