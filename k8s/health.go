package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpubroker/gpubroker/broker"
)

// health tracks whether the informer caches can still be trusted. An
// informer whose watch breaks keeps serving its last state without a word:
// client-go retries a refused watch internally and calls the watch error
// handler only for failures that end a ListAndWatch. So two signals are
// kept, and either makes the side stale:
//
//   - a probe lists nodes and pods (one object each) from the API server
//     every StaleAfter/3; when none has succeeded for StaleAfter (apiserver
//     unreachable, RBAC revoked), the caches may be that old;
//   - a watch error marks its informer failing until the informer has
//     synced a newer resource version (it relisted or received an event or
//     bookmark), or StaleAfter passes without another error while the
//     probe succeeds.
type health struct {
	client     kubernetes.Interface
	staleAfter time.Duration
	now        func() time.Time

	mu       sync.Mutex
	probeOK  time.Time // last successful probe (or cache sync)
	probeErr string    // latest probe failure since probeOK
	failing  map[string]watchFailure
}

// watchFailure is an informer's latest watch error.
type watchFailure struct {
	at  time.Time
	rv  string // the informer's synced resource version at the error
	err string
}

// watchErrorHandler records watch errors of the informer named name, after
// client-go's default handling (logging, relist decisions).
func (h *health) watchErrorHandler(name string, inf cache.SharedIndexInformer) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if ctx.Err() != nil || errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			// Stopping, a watch closed normally, or history compacted: the
			// reflector relists at once; a failing relist reports again.
			return
		}
		h.mu.Lock()
		h.failing[name] = watchFailure{at: h.now(), rv: inf.LastSyncResourceVersion(), err: err.Error()}
		h.mu.Unlock()
	}
}

// synced records the informers' initial sync as a successful call.
func (h *health) synced() {
	h.mu.Lock()
	h.probeOK, h.probeErr = h.now(), ""
	h.mu.Unlock()
}

// run probes the API server until ctx ends.
func (h *health) run(ctx context.Context) {
	every := max(h.staleAfter/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, h.staleAfter)
		err := h.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		if err != nil {
			h.probeErr = err.Error()
		} else {
			h.probeOK, h.probeErr = h.now(), ""
		}
		h.mu.Unlock()
	}
}

// probe lists one node and one pod: the two kinds destructive decisions
// rest on, with the verb the informers use, so revoked list rights show.
func (h *health) probe(ctx context.Context) error {
	if _, err := h.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	if _, err := h.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	return nil
}

// stale returns why the caches cannot be trusted now, or "".
func (h *health) stale(informers map[string]cache.SharedIndexInformer) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var why []string
	if age := now.Sub(h.probeOK); age > h.staleAfter {
		msg := fmt.Sprintf("no call to the API server succeeded for %s (bound %s)", age.Round(time.Millisecond), h.staleAfter)
		if h.probeErr != "" {
			msg += ": " + h.probeErr
		}
		why = append(why, msg)
	}
	names := make([]string, 0, len(h.failing))
	for name := range h.failing {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := h.failing[name]
		inf := informers[name]
		resynced := inf != nil && inf.LastSyncResourceVersion() != f.rv
		quiet := now.Sub(f.at) > h.staleAfter && h.probeOK.After(f.at)
		if resynced || quiet {
			delete(h.failing, name)
			continue
		}
		why = append(why, fmt.Sprintf("%s watch failing since %s: %s", name, f.at.UTC().Format(time.RFC3339), f.err))
	}
	return strings.Join(why, "; ")
}

// staleError wraps why as the Observe error.
func staleError(why string) error {
	return fmt.Errorf("observe kubernetes: %s: %w", why, broker.ErrStale)
}
