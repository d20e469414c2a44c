package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestScaleUpNeverLowersARaisedGroup: a scale-up planned from a group of 0
// nodes has not set its target yet (its first call failed) when someone
// raises the group to 3 outside the broker. The step re-reads the group,
// finds it above the planned target, and ends the op to plan again: it
// never sends the lower target, which would let AWS pick instances to
// terminate.
func TestScaleUpNeverLowersARaisedGroup(t *testing.T) {
	w := newRTWorld(t, 5)
	r := w.runtime()
	w.k8s.submit(trainingPod("elastic-gpu-training", 2, 1000000))
	w.cloud.failSet = errors.New("throttled")
	w.tick(r)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].Target != 1 || ups[0].Step != broker.StepSetDesired {
		t.Fatalf("scale-up op before the raise: %+v", ups)
	}

	w.cloud.mu.Lock()
	w.cloud.failSet = nil
	p := w.cloud.pools[rtPool]
	for i := range 3 {
		id := fmt.Sprintf("i-ext%d", i)
		p.Instances = append(p.Instances, broker.Instance{ID: id, Hostname: "node-" + id, Phase: broker.PhaseBooting})
	}
	p.Desired = 3
	w.cloud.mu.Unlock()

	w.clock.Add(time.Minute)
	w.tick(r)
	for _, target := range w.cloud.setCalls {
		if target < 3 {
			t.Fatalf("SetDesired calls %v: a scale-up lowered the raised group to %d", w.cloud.setCalls, target)
		}
	}
	op := w.ledger.opsOf(broker.ActScaleUp)[0]
	if op.State != broker.OpFailed || !strings.Contains(op.LastError, "planning again") {
		t.Fatalf("scale-up after the raise: state %s, error %q; want failed, planning again", op.State, op.LastError)
	}
}
