package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

var (
	latencyNodes = flag.Int("latency.nodes", 0, "TestHeadlineLatency at size: background KWOK nodes (the size run: 1000)")
	latencyPods  = flag.Int("latency.pods", 0, "TestHeadlineLatency at size: running pods spread over the background nodes (the size run: 10000)")
)

// TestHeadlineLatency sends 100 one-GPU pods in bursts of 10 and measures,
// for every pod whose demand a scale-up served, the time from the moment
// the scheduler's Unschedulable condition reached a watch to the broker's
// SetDesiredCapacity call. It reports p50 and p99 (the cluster autoscaler
// takes 30 s or more; the target is p99 under 2 s) and asserts only that
// every pod runs in the end. With -latency.nodes and -latency.pods the
// cluster first gets that many KWOK nodes and running pods (CPU work, which
// the broker's informers watch and the scheduler weighs with every GPU pod).
func TestHeadlineLatency(t *testing.T) {
	ensurePriorityClass(t, "low-priority", 0)
	if *latencyNodes > 0 {
		background(t, *latencyNodes, *latencyPods)
	}
	w := newWorld(t, worldOptions{maxNodes: 30, unneeded: 10 * time.Minute, namespace: "burst", bootDelay: 2 * time.Second})

	var mu sync.Mutex
	unsched := map[string]time.Time{} // pod UID → first seen unschedulable
	watcher, err := kubeEnv.Client.CoreV1().Pods(w.ns).Watch(w.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	go func() {
		for ev := range watcher.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					mu.Lock()
					if _, seen := unsched[string(p.UID)]; !seen {
						unsched[string(p.UID)] = time.Now()
					}
					mu.Unlock()
				}
			}
		}
	}()

	const bursts, perBurst = 10, 10
	for b := 0; b < bursts; b++ {
		for i := 0; i < perBurst; i++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%02d-%02d", b, i), Namespace: w.ns},
				Spec: gpuPodSpec(1, "low-priority")}
			if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
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

	ds, err := w.st.ListDecisions(w.ctx, store.DecisionFilter{Kind: string(broker.ActScaleUp), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	w.calls.mu.Lock()
	calls := append([]desiredCall(nil), w.calls.calls...)
	w.calls.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	served := map[string]bool{}
	// Oldest first: a pod served by an early scale-up may be listed again
	// by a later one while its node boots; its latency is the first call.
	slices.Reverse(ds)
	for _, d := range ds {
		var a broker.Action
		if err := json.Unmarshal(d.Detail, &a); err != nil {
			t.Fatal(err)
		}
		var call *desiredCall
		for i := range calls {
			if calls[i].Target == a.Target {
				call = &calls[i]
				break
			}
		}
		if call == nil {
			continue // planned but journaled behind an open scale-up: served by a later call
		}
		for _, id := range a.Serves {
			uid := id[len("k8s/"):]
			seen, ok := unsched[uid]
			if !ok || served[uid] {
				continue
			}
			served[uid] = true
			lat = append(lat, call.At.Sub(seen))
		}
	}
	if len(lat) == 0 {
		t.Fatalf("no pod was served by a scale-up call (%d decisions, %d calls)", len(ds), len(calls))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("cluster: %d background nodes, %d running pods; slowest: %s", *latencyNodes, *latencyPods, slowest(lat, 5))
	t.Logf("headline latency, unschedulable → SetDesiredCapacity, over %d pods served by %d scale-up calls "+
		"(%d pods placed on capacity already on its way): p50 %s, p90 %s, p99 %s, max %s",
		len(lat), len(calls), bursts*perBurst-len(lat), pct(0.5).Round(time.Millisecond),
		pct(0.9).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// slowest lists the n largest of the sorted latencies, largest first.
func slowest(sorted []time.Duration, n int) string {
	var out []string
	for i := len(sorted) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, sorted[i].Round(time.Millisecond).String())
	}
	return strings.Join(out, " ")
}
