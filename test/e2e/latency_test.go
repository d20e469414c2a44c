package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
)

var (
	latencyNodes = flag.Int("latency.nodes", 0, "TestHeadlineLatency at size: background KWOK nodes (the size run: 1000)")
	latencyPods  = flag.Int("latency.pods", 0, "TestHeadlineLatency at size: running pods spread over the background nodes (the size run: 10000)")
)

// TestHeadlineLatency sends 100 one-GPU pods in bursts of 10 and measures,
// for every pod whose first answer from the broker was a scale-up, the time
// from the moment the scheduler's Unschedulable condition reached a watch
// to the SetDesiredCapacity call made for that scale-up (firstResponse).
// Pods first planned on capacity already on its way need no call and are
// counted apart, as are pods a node already there took. It reports p50,
// p90 and p99 (the cluster autoscaler takes 30 s or more; the target is p99
// under 2 s), the timelines of the slowest pods, node readiness and the
// broker's tick times, and asserts only that every pod runs in the end.
// With -latency.nodes and -latency.pods the cluster first gets that many
// KWOK nodes and running pods (CPU work, which the broker's informers watch
// and the scheduler weighs with every GPU pod), and the bursts start once
// the control plane has settled (background).
func TestHeadlineLatency(t *testing.T) {
	ensurePriorityClass(t, "low-priority", 0)
	if *latencyNodes > 0 {
		background(t, *latencyNodes, *latencyPods)
	}
	tl := newTimeline()
	w := newWorld(t, worldOptions{maxNodes: 30, unneeded: 10 * time.Minute, namespace: "burst", bootDelay: 2 * time.Second, logTap: tl.tap})
	tl.watch(t, w.ctx, w.ns)

	const bursts, perBurst = 10, 10
	for b := 0; b < bursts; b++ {
		for i := 0; i < perBurst; i++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%02d-%02d", b, i), Namespace: w.ns},
				Spec: gpuPodSpec(1, "low-priority")}
			created, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tl.created(created)
		}
		time.Sleep(3 * time.Second)
	}
	w.eventually(4*time.Minute, "all 100 pods to run", func() bool {
		pods, err := kubeEnv.Client.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				running++
			}
		}
		return running == bursts*perBurst
	})

	w.calls.mu.Lock()
	calls := append([]desiredCall(nil), w.calls.calls...)
	w.calls.mu.Unlock()
	hs := histories(t, w)
	unsched := tl.unschedulableSince()
	var lat, covered []time.Duration
	latency := map[string]time.Duration{}
	replanned, other := 0, map[string]int{}
	for uid, seen := range unsched {
		r := firstResponse(hs[uid], calls)
		switch r.kind {
		case responseCall:
			lat = append(lat, r.at.Sub(seen))
			latency[uid] = r.at.Sub(seen)
		case responseInFlight:
			covered = append(covered, r.at.Sub(seen))
			if r.replanned {
				replanned++
			}
		default:
			other[r.why]++
		}
	}
	if len(lat) == 0 {
		t.Fatalf("no pod was served by a scale-up call (%d calls; other first responses: %v)", len(calls), other)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	tl.report(t, hs, latency, calls, 8)
	t.Logf("cluster: %d background nodes, %d running pods; slowest: %s", *latencyNodes, *latencyPods, slowest(lat, 5))
	t.Logf("%d pods were first planned on capacity already on its way (unschedulable → that plan %s), %d of them bought again later "+
		"when that capacity did not serve them; %d pods had another first response: %v; %d pods were never unschedulable "+
		"(a node with free GPUs was there)", len(covered), spread(covered), replanned, len(other), other, bursts*perBurst-len(unsched))
	t.Logf("headline latency, unschedulable → SetDesiredCapacity, over %d pods served by %d scale-up calls: p50 %s, p90 %s, p99 %s, max %s",
		len(lat), len(calls), pct(0.5).Round(time.Millisecond),
		pct(0.9).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// responseKind is how the broker first answered a pending pod.
type responseKind int

const (
	responseNone     responseKind = iota
	responseCall                  // a scale-up that lists it, answered by a SetDesiredCapacity call
	responseInFlight              // a wait on capacity already on its way (no call needed)
)

// response is the broker's first answer to one pod: when, and how.
type response struct {
	kind responseKind
	at   time.Time
	// replanned: first planned on capacity on its way, the pod was later
	// listed by a scale-up (that capacity did not serve it).
	replanned bool
	why       string // for responseNone: the first decision's reason kind
}

// firstResponse finds the broker's first answer to a pod in its decisions
// (oldest first): the first scale-up decision that lists it, answered by
// the first call at or after that decision that sets its target, or the
// first wait on in-flight capacity, whichever came first.
//
// IMPORTANT: a decision is matched to a call made at or after it. Matching
// the first call with the same target anywhere in the run (as this test
// did before) pairs a re-purchase — in-flight nodes that timed out, bought
// again to the same target minutes later — with the call of an earlier,
// unrelated burst, and reported the distance between two bursts as the
// pod's latency: the "~6 s steps" of the 24.6 s tail at 1,000 nodes.
func firstResponse(h *demandHistory, calls []desiredCall) response {
	if h == nil {
		return response{why: "no decision"}
	}
	var r response
	for _, d := range h.decisions {
		switch {
		case d.Kind == string(broker.ActScaleUp):
			var a broker.Action
			if json.Unmarshal(d.Detail, &a) != nil {
				continue
			}
			call := callAfter(calls, d.At, a.Target)
			if call == nil {
				continue // journaled behind an open scale-up: a later decision's call serves it
			}
			if r.kind == responseInFlight {
				r.replanned = true
				return r
			}
			return response{kind: responseCall, at: call.At}
		case r.kind == responseNone && d.Kind == "wait" && strings.HasPrefix(d.Reason, string(broker.WaitInFlight)+":"):
			r = response{kind: responseInFlight, at: d.At}
		case r.kind == responseNone && r.why == "" && d.Kind == "wait":
			r.why, _, _ = strings.Cut(d.Reason, ":")
		}
	}
	if r.kind == responseNone && r.why == "" {
		r.why = "no decision"
	}
	return r
}

// callAfter is the first call at or after at that sets target.
func callAfter(calls []desiredCall, at time.Time, target int) *desiredCall {
	for i := range calls {
		if calls[i].Target == target && !calls[i].At.Before(at) {
			return &calls[i]
		}
	}
	return nil
}

// slowest lists the n largest of the sorted latencies, largest first.
func slowest(sorted []time.Duration, n int) string {
	var out []string
	for i := len(sorted) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, sorted[i].Round(time.Millisecond).String())
	}
	return strings.Join(out, " ")
}
