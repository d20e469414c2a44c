package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestFirstResponse checks how TestHeadlineLatency attributes a pod to the
// broker's first answer, on the histories that fooled it at 1,000 nodes: a
// pod first planned on a node already on its way, bought again to a target
// that an earlier burst's call had set, must not take that earlier call's
// time (it reported the distance between two bursts as latency).
func TestFirstResponse(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	scaleUp := func(s float64, target int) broker.Decision {
		b, err := json.Marshal(broker.Action{Kind: broker.ActScaleUp, Pool: poolName, Target: target})
		if err != nil {
			t.Fatal(err)
		}
		return broker.Decision{At: at(s), Kind: string(broker.ActScaleUp), Detail: b}
	}
	wait := func(s float64, reason broker.WaitReason) broker.Decision {
		return broker.Decision{At: at(s), Kind: "wait", Reason: string(reason) + ": detail"}
	}
	calls := []desiredCall{
		{At: at(0.3), Pool: poolName, Target: 3},
		{At: at(24.9), Pool: poolName, Target: 25}, // a later burst's call
		{At: at(122.5), Pool: poolName, Target: 25},
	}
	for _, tc := range []struct {
		name      string
		decisions []broker.Decision
		want      response
	}{
		{"served by a call", []broker.Decision{scaleUp(0.2, 3), wait(1.2, broker.WaitInFlight)},
			response{kind: responseCall, at: at(0.3)}},
		{"re-purchase to a target an earlier call set", []broker.Decision{wait(0.2, broker.WaitInFlight), wait(121, broker.WaitBackoff), scaleUp(122.4, 25)},
			response{kind: responseInFlight, at: at(0.2), replanned: true}},
		{"the call after the decision, not the first with its target", []broker.Decision{scaleUp(100, 25)},
			response{kind: responseCall, at: at(122.5)}},
		{"journaled behind an open op: a later decision's call", []broker.Decision{scaleUp(0.2, 4), scaleUp(20, 25)},
			response{kind: responseCall, at: at(24.9)}},
		{"no answer yet", []broker.Decision{wait(0.2, broker.WaitBackoff)},
			response{why: string(broker.WaitBackoff)}},
		{"no decision", nil, response{why: "no decision"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firstResponse(&demandHistory{decisions: tc.decisions}, calls)
			if got != tc.want {
				t.Errorf("firstResponse = %+v, want %+v", got, tc.want)
			}
		})
	}
}
