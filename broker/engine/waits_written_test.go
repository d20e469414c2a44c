package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// waitRecorder records what each tick sends to SetWaitReasons and can fail it.
type waitRecorder struct {
	*rtLedger
	sent [][]string // demand IDs per call
	fail error
}

func (l *waitRecorder) SetWaitReasons(ctx context.Context, ws []broker.Wait) error {
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.Demand)
	}
	slices.Sort(ids)
	l.sent = append(l.sent, ids)
	if l.fail != nil {
		return l.fail
	}
	return l.rtLedger.SetWaitReasons(ctx, ws)
}

// TestWaitReasonsWrittenWhenChanged: a tick sends only the waits that
// changed since this runtime last wrote them; a demand that left and came
// back (a fresh ledger row, without a reason) is sent again, a failed
// write is retried, and a new runtime sends every wait.
func TestWaitReasonsWrittenWhenChanged(t *testing.T) {
	w := newRTWorld(t, 0) // a pool of at most 0 nodes: every demand waits
	l := &waitRecorder{rtLedger: w.ledger}
	newRT := func() *Runtime {
		r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.yarn, w.k8s},
			Pools: w.cloud, Ledger: l, Now: w.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tick := func(r *Runtime) {
		t.Helper()
		if _, err := r.Tick(context.Background()); err != nil && !errors.Is(err, errWriteFailed) {
			t.Fatalf("tick: %v", err)
		}
	}
	last := func(want ...string) {
		t.Helper()
		got := l.sent[len(l.sent)-1]
		if !slices.Equal(got, want) {
			t.Fatalf("SetWaitReasons got %v, want %v", got, want)
		}
	}
	w.k8s.submit(trainingPod("a", 2, 0))
	w.k8s.submit(trainingPod("b", 2, 0))
	r := newRT()
	tick(r)
	last("k8s/a", "k8s/b")
	tick(r)
	last() // nothing changed

	// b leaves the ledger for a tick and comes back as a new row.
	w.k8s.mu.Lock()
	b := w.k8s.pending[1]
	w.k8s.pending = w.k8s.pending[:1]
	w.k8s.mu.Unlock()
	tick(r)
	last()
	w.k8s.submit(b)
	tick(r)
	last("k8s/b")

	// A failed write is sent again on the next tick.
	w.k8s.submit(trainingPod("c", 2, 0))
	l.fail = errWriteFailed
	tick(r)
	last("k8s/c")
	l.fail = nil
	tick(r)
	last("k8s/c")
	tick(r)
	last()

	// A new term's runtime knows nothing it wrote: it sends every wait.
	tick(newRT())
	last("k8s/a", "k8s/b", "k8s/c")
}

var errWriteFailed = errors.New("write failed")
