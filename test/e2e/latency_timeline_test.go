package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// timeline records, for TestHeadlineLatency, when each burst pod and each
// GPU node passed each step of the headline path, as the test's own
// watches and the broker's log saw them, so a slow pod can be explained:
// created → unschedulable → the broker's ticks and decisions for it →
// SetDesiredCapacity → its node joined, Ready, schedulable → bound.
type timeline struct {
	mu    sync.Mutex
	pods  map[string]*podTimes  // by UID
	nodes map[string]*nodeTimes // by name
	ticks []tickTimes
}

type podTimes struct {
	name    string
	created time.Time // the Create call returned
	unsched time.Time // first Unschedulable condition on the test's watch
	bound   time.Time // first event with spec.nodeName
	node    string
}

type nodeTimes struct {
	added time.Time // first watch event
	ready time.Time // Ready=True first seen
	// sched is when the node first looked schedulable to the scheduler:
	// Ready, GPUs advertised, no not-ready/unreachable taint.
	sched time.Time
}

// tickTimes is one "tick phases" debug line of the broker: when the tick
// ended and how long its phases took.
type tickTimes struct {
	end                                        time.Time
	total, observe, persist, plan, record, act float64 // ms
}

func newTimeline() *timeline {
	return &timeline{pods: map[string]*podTimes{}, nodes: map[string]*nodeTimes{}}
}

// created notes that the pod was created (the API's answer).
func (tl *timeline) created(p *corev1.Pod) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	pt := tl.pod(string(p.UID))
	pt.name, pt.created = p.Name, time.Now()
}

func (tl *timeline) pod(uid string) *podTimes {
	pt, ok := tl.pods[uid]
	if !ok {
		pt = &podTimes{}
		tl.pods[uid] = pt
	}
	return pt
}

// unschedulableSince returns, by pod UID, when the test's watch first saw
// each pod unschedulable.
func (tl *timeline) unschedulableSince() map[string]time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := map[string]time.Time{}
	for uid, pt := range tl.pods {
		if !pt.unsched.IsZero() {
			out[uid] = pt.unsched
		}
	}
	return out
}

// tap takes the broker's per-tick debug line (engine.Runtime logs "tick
// phases" at the end of every tick).
func (tl *timeline) tap(r slog.Record) {
	if r.Message != "tick phases" {
		return
	}
	tt := tickTimes{end: r.Time}
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.Float64
		switch a.Key {
		case "total_ms":
			tt.total = v()
		case "observe_all_ms":
			tt.observe = v()
		case "persist_ms":
			tt.persist = v()
		case "plan_ms":
			tt.plan = v()
		case "record_ms":
			tt.record = v()
		case "act_ms":
			tt.act = v()
		}
		return true
	})
	tl.mu.Lock()
	tl.ticks = append(tl.ticks, tt)
	tl.mu.Unlock()
}

// watch follows the pods of ns and the GPU nodes until ctx ends.
func (tl *timeline) watch(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	c := kubeEnv.Client
	pw, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nw, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "infra-type=gpu"})
	if err != nil {
		pw.Stop()
		t.Fatal(err)
	}
	t.Cleanup(pw.Stop)
	t.Cleanup(nw.Stop)
	go func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				tl.onPod(p, time.Now())
			}
		}
	}()
	go func() {
		for ev := range nw.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Deleted {
				tl.onNode(n, time.Now())
			}
		}
	}()
}

func (tl *timeline) onPod(p *corev1.Pod, now time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	pt := tl.pod(string(p.UID))
	pt.name = p.Name
	if p.Spec.NodeName != "" && pt.bound.IsZero() {
		pt.bound, pt.node = now, p.Spec.NodeName
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && pt.unsched.IsZero() {
			pt.unsched = now
		}
	}
}

func (tl *timeline) onNode(n *corev1.Node, now time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	nt, ok := tl.nodes[n.Name]
	if !ok {
		nt = &nodeTimes{added: now}
		tl.nodes[n.Name] = nt
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && nt.ready.IsZero() {
			nt.ready = now
		}
	}
	gpus := n.Status.Allocatable[k8senv.GPUResource]
	if nodeSchedulable(n) && !gpus.IsZero() && nt.sched.IsZero() {
		nt.sched = now
	}
}

// demandHistory is the broker's record for one pod: when its demand was
// first observed (the ledger's first-seen) and its decisions.
type demandHistory struct {
	firstSeen time.Time
	decisions []broker.Decision // oldest first
}

// histories reads every decision and closed demand row of the world's
// store, by pod UID.
func histories(t *testing.T, w *world) map[string]*demandHistory {
	t.Helper()
	out := map[string]*demandHistory{}
	get := func(id string) *demandHistory {
		uid := strings.TrimPrefix(id, "k8s/")
		h, ok := out[uid]
		if !ok {
			h = &demandHistory{}
			out[uid] = h
		}
		return h
	}
	var all []broker.Decision
	for before := int64(0); ; {
		ds, err := w.st.ListDecisions(w.ctx, store.DecisionFilter{Limit: store.MaxPageSize, BeforeID: before})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ds...)
		if len(ds) < store.MaxPageSize {
			break
		}
		before = ds[len(ds)-1].ID
	}
	slices.Reverse(all)
	for _, d := range all {
		if d.Kind == string(broker.ActScaleUp) {
			var a broker.Action
			if json.Unmarshal(d.Detail, &a) == nil {
				for _, id := range a.Serves {
					get(id).decisions = append(get(id).decisions, d)
				}
			}
			continue
		}
		if d.Demand != "" && d.Kind == "wait" {
			get(d.Demand).decisions = append(get(d.Demand).decisions, d)
		}
	}
	closed, err := w.st.ListHistory(w.ctx, store.HistoryFilter{Source: broker.SourceK8s, Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range closed {
		get(c.Key).firstSeen = c.FirstSeen
	}
	return out
}

// report logs the timeline of the n slowest measured pods (latency by pod
// UID; hs their broker history), a summary of node readiness and of the
// broker's ticks.
func (tl *timeline) report(t *testing.T, hs map[string]*demandHistory, latency map[string]time.Duration, calls []desiredCall, n int) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	uids := make([]string, 0, len(latency))
	for uid := range latency {
		uids = append(uids, uid)
	}
	slices.SortFunc(uids, func(a, b string) int { return cmp.Compare(latency[b], latency[a]) })
	rel := func(base, at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%+.3fs", at.Sub(base).Seconds())
	}
	for _, uid := range uids[:min(n, len(uids))] {
		pt := tl.pods[uid]
		base := pt.unsched
		var b strings.Builder
		fmt.Fprintf(&b, "timeline %s (latency %s), relative to unschedulable: created %s, ledger first seen %s",
			pt.name, latency[uid].Round(time.Millisecond), rel(base, pt.created), rel(base, hs[uid].firstSeenOr()))
		if h := hs[uid]; h != nil {
			for _, d := range h.decisions {
				reason := d.Reason
				if len(reason) > 110 {
					reason = reason[:110] + "…"
				}
				fmt.Fprintf(&b, "\n    %s tick %d %s: %s", rel(base, d.At), d.Tick, d.Kind, reason)
			}
		}
		for _, c := range calls {
			if c.At.Equal(base.Add(latency[uid])) {
				fmt.Fprintf(&b, "\n    %s SetDesired(%s, %d), the call that answered it", rel(base, c.At), c.Pool, c.Target)
			}
		}
		fmt.Fprintf(&b, "\n    %s bound to %s", rel(base, pt.bound), pt.node)
		if nt, ok := tl.nodes[pt.node]; ok {
			fmt.Fprintf(&b, " (node joined %s, Ready %s, schedulable %s)", rel(base, nt.added), rel(base, nt.ready), rel(base, nt.sched))
		}
		t.Log(b.String())
	}

	var toBound []time.Duration
	for _, pt := range tl.pods {
		if !pt.unsched.IsZero() && !pt.bound.IsZero() {
			toBound = append(toBound, pt.bound.Sub(pt.unsched))
		}
	}
	t.Logf("all %d pods: unschedulable → bound %s", len(tl.pods), spread(toBound))

	var toReady, toSched []time.Duration
	for _, nt := range tl.nodes {
		if !nt.ready.IsZero() {
			toReady = append(toReady, nt.ready.Sub(nt.added))
		}
		if !nt.sched.IsZero() {
			toSched = append(toSched, nt.sched.Sub(nt.added))
		}
	}
	t.Logf("GPU nodes: %d joined; joined → Ready %s; joined → schedulable %s", len(tl.nodes), spread(toReady), spread(toSched))

	var totals, gaps []time.Duration
	var slowest tickTimes
	for i, tt := range tl.ticks {
		totals = append(totals, time.Duration(tt.total*float64(time.Millisecond)))
		if tt.total > slowest.total {
			slowest = tt
		}
		if i > 0 {
			gaps = append(gaps, tt.end.Sub(tl.ticks[i-1].end))
		}
	}
	t.Logf("broker ticks: %d; duration %s; between tick ends %s; slowest: total %.0f ms (observe %.0f, persist %.0f, plan %.0f, record %.0f, act %.0f)",
		len(tl.ticks), spread(totals), spread(gaps), slowest.total, slowest.observe, slowest.persist, slowest.plan, slowest.record, slowest.act)
}

func (h *demandHistory) firstSeenOr() time.Time {
	if h == nil {
		return time.Time{}
	}
	return h.firstSeen
}

// spread formats p50/p90/max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s p90 %s max %s", at(0.5), at(0.9), s[len(s)-1].Round(time.Millisecond))
}
