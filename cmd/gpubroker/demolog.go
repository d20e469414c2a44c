package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The demo prints one short line per decision to the terminal and writes
// the JSON log, which nobody reads scrolling past, to a file. The messages
// below are the broker's decisions and what became of them; warnings and
// errors are shown too, each distinct message at most once per
// demoWarnEvery.
var demoShown = map[string]bool{
	"action":                        true,
	"op done":                       true,
	"op cancelled, node given back": true,
	"attrition cancelled":           true,
	"preempted":                     true,
	"node released":                 true,
	"manual action":                 true,
	"demo: instance joined":         true,
}

// demoAttrs are the attributes a terminal line shows, in this order.
var demoAttrs = []string{"kind", "pool", "node", "target", "workload", "side", "priority", "reason", "err"}

const demoWarnEvery = 30 * time.Second

// humanHandler writes the demo's terminal lines.
type humanHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	attrs []slog.Attr
	// warned is when each warning message was last shown.
	warned map[string]time.Time
}

func newHumanHandler(w io.Writer) *humanHandler {
	return &humanHandler{mu: &sync.Mutex{}, w: w, warned: map[string]time.Time{}}
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	warn := r.Level >= slog.LevelWarn
	if !warn && !demoShown[r.Message] {
		return nil
	}
	vals := map[string]string{}
	for _, a := range h.attrs {
		vals[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		vals[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if warn {
		if last, ok := h.warned[r.Message]; ok && r.Time.Sub(last) < demoWarnEvery {
			return nil
		}
		h.warned[r.Message] = r.Time
	}
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05"))
	b.WriteString("  ")
	if warn {
		b.WriteString(strings.ToUpper(r.Level.String()) + " ")
	}
	b.WriteString(r.Message)
	for _, k := range demoAttrs {
		v := vals[k]
		if v == "" || v == "0" {
			continue
		}
		if k == "reason" || k == "err" {
			fmt.Fprintf(&b, " — %s", v)
			continue
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

// WithGroup keeps the terminal lines flat: the broker's decision lines use
// no groups.
func (h *humanHandler) WithGroup(string) slog.Handler { return h }

// teeHandler sends every record to each of its handlers that wants it.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}

// demoLogger builds the demo's logger: with verbose, the JSON log streams
// to stderr as serve's does; otherwise it goes to logFile (default: a new
// file in the temporary directory, whose path is returned) and the
// terminal gets one short line per decision. close flushes the file.
func demoLogger(e env, level, logFile string, verbose bool) (log *slog.Logger, path string, close func(), err error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, "", nil, usagef("--log-level: use debug, info, warn or error, got %q", level)
	}
	if verbose {
		return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: l})), "", func() {}, nil
	}
	var f *os.File
	if logFile == "" {
		f, err = os.CreateTemp("", "gpubroker-demo-*.log")
	} else {
		f, err = os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	}
	if err != nil {
		return nil, "", nil, usagef("--log-file: %s", err)
	}
	path, _ = filepath.Abs(f.Name())
	h := teeHandler{slog.NewJSONHandler(f, &slog.HandlerOptions{Level: l}), newHumanHandler(e.stdout)}
	return slog.New(h), path, func() { f.Close() }, nil
}
