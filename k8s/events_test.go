package k8s

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

// staticPods is a podFinder over a fixed set of pods.
type staticPods map[types.UID]*corev1.Pod

func (s staticPods) podsByUID(uids map[types.UID]bool) map[types.UID]*corev1.Pod {
	out := map[types.UID]*corev1.Pod{}
	for uid := range uids {
		if p, ok := s[uid]; ok {
			out[uid] = p
		}
	}
	return out
}

func detail(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type eventsFixture struct {
	client *fake.Clientset
	ev     *PodEvents
	now    time.Time
}

func newEventsFixture(t *testing.T, cfg EventsConfig, pods ...*corev1.Pod) *eventsFixture {
	t.Helper()
	f := &eventsFixture{client: fake.NewClientset(), now: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)}
	cfg.Now = func() time.Time { return f.now }
	found := staticPods{}
	for _, p := range pods {
		found[p.UID] = p
	}
	ev, err := newPodEvents(f.client, found, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ev = ev
	return f
}

// events lists the Events written, "pod reason type: note", sorted.
func (f *eventsFixture) events(t *testing.T) []string {
	t.Helper()
	l, err := f.client.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.ReportingController != ReportingController || e.ReportingInstance == "" || e.Action == "" || e.EventTime.IsZero() {
			t.Errorf("event %s lacks what events.k8s.io/v1 requires: %+v", e.Name, e)
		}
		if e.Regarding.Kind != "Pod" || e.Regarding.UID == "" || e.Regarding.Namespace != e.Namespace {
			t.Errorf("event %s regards %+v", e.Name, e.Regarding)
		}
		out = append(out, e.Regarding.Name+" "+e.Reason+" "+e.Type+": "+e.Note)
	}
	sort.Strings(out)
	return out
}

func TestPodEventsSayWhyEachPodWaits(t *testing.T) {
	a, b, c, d := gpuPod("ml", "a", 2), gpuPod("ml", "b", 2), gpuPod("vision", "c", 8), gpuPod("ml", "d", 4)
	f := newEventsFixture(t, EventsConfig{ProvisionTime: func(context.Context) time.Duration { return 10 * time.Minute }}, a, b, c, d)
	f.ev.Decisions(context.Background(), []broker.Decision{
		{At: f.now, Kind: string(broker.ActScaleUp), Demand: "k8s/" + string(a.UID), Pool: "gpu-training-group",
			Reason: "2 pods need 4 GPUs", Detail: detail(t, broker.Action{Kind: broker.ActScaleUp, Pool: "gpu-training-group", Target: 3,
				Serves: []string{"k8s/" + string(a.UID), "yarn/application_1_0001/1"}, Reason: "2 pods need 4 GPUs"})},
		{At: f.now, Kind: "wait", Demand: "k8s/" + string(b.UID), Tenant: "ml", Reason: "over-quota: tenant ml uses 16 of its 16 GPUs",
			Detail: detail(t, broker.Wait{Demand: "k8s/" + string(b.UID), Reason: broker.WaitQuota, Detail: "tenant ml uses 16 of its 16 GPUs (running work and admitted demand); 2 more GPUs would exceed it"})},
		{At: f.now, Kind: "wait", Demand: "k8s/" + string(c.UID), Tenant: "vision",
			Detail: detail(t, broker.Wait{Demand: "k8s/" + string(c.UID), Reason: broker.WaitUnsatisfiable, Detail: "8 GPUs on one node: the largest pool has 4 per node"})},
		{At: f.now, Kind: string(broker.ActPreempt), Demand: "k8s/" + string(d.UID), Node: "ip-10-0-1-10",
			Detail: detail(t, broker.Action{Kind: broker.ActPreempt, Node: "ip-10-0-1-10", Serves: []string{"k8s/" + string(d.UID)},
				Victims: []broker.Workload{{Source: broker.SourceK8s, Key: "u9", Name: "batch/etl-3", Priority: 10, GPUs: 4}},
				Reason:  "ml/d outranks batch/etl-3", GPUHoursLost: 1.5})},
		// A wait the pod needs no Event for, and a YARN demand: nothing.
		{At: f.now, Kind: "wait", Demand: "yarn/application_1_0002/1", Detail: detail(t, broker.Wait{Demand: "yarn/application_1_0002/1", Reason: broker.WaitQuota})},
	})
	got := f.events(t)
	want := []string{
		"a ScaleUpTriggered Normal: pod triggered scale-up: pool gpu-training-group to 3 nodes; its GPUs are expected by 11:10:00 UTC (max provision time 10m0s): 2 pods need 4 GPUs",
		"b WaitingForQuota Normal: waiting for quota: tenant ml uses 16 of its 16 GPUs (running work and admitted demand); 2 more GPUs would exceed it",
		"c Unsatisfiable Warning: no gpubroker pool can ever serve this pod: 8 GPUs on one node: the largest pool has 4 per node",
		"d Preempting Normal: preempting batch/etl-3 (priority 10, 4 GPUs) on node ip-10-0-1-10 for this pod: ml/d outranks batch/etl-3 (1.5 GPU-hours of work lost since the last checkpoints)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPodEventsAreNotRepeated(t *testing.T) {
	a := gpuPod("ml", "a", 2)
	f := newEventsFixture(t, EventsConfig{}, a)
	wait := func(reason broker.WaitReason, msg string) []broker.Decision {
		return []broker.Decision{{At: f.now, Kind: "wait", Demand: "k8s/" + string(a.UID), Tenant: "ml",
			Detail: detail(t, broker.Wait{Demand: "k8s/" + string(a.UID), Reason: reason, Detail: msg})}}
	}
	ctx := context.Background()
	f.ev.Decisions(ctx, wait(broker.WaitQuota, "tenant ml uses 16 of its 16 GPUs"))
	f.ev.Decisions(ctx, wait(broker.WaitQuota, "tenant ml uses 16 of its 16 GPUs"))
	f.now = f.now.Add(time.Hour)
	f.ev.Decisions(ctx, wait(broker.WaitQuota, "tenant ml uses 16 of its 16 GPUs"))
	if got := f.events(t); len(got) != 1 {
		t.Fatalf("the same reason and message three times wrote %d events: %q", len(got), got)
	}
	// A new message is news; going back to the first is news again.
	f.ev.Decisions(ctx, wait(broker.WaitQuota, "tenant ml uses 14 of its 16 GPUs"))
	f.now = f.now.Add(time.Second) // event names carry the time
	f.ev.Decisions(ctx, wait(broker.WaitQuota, "tenant ml uses 16 of its 16 GPUs"))
	if got := f.events(t); len(got) != 3 {
		t.Fatalf("three different messages in a row wrote %d events: %q", len(got), got)
	}
}

func TestPodEventsSkipScheduledAndGonePods(t *testing.T) {
	placed := gpuPod("ml", "placed", 2, onNode("n1", corev1.PodRunning))
	f := newEventsFixture(t, EventsConfig{}, placed)
	f.ev.Decisions(context.Background(), []broker.Decision{
		{At: f.now, Kind: "wait", Demand: "k8s/" + string(placed.UID), Detail: detail(t, broker.Wait{Demand: "k8s/" + string(placed.UID), Reason: broker.WaitUnsatisfiable, Detail: "x"})},
		{At: f.now, Kind: "wait", Demand: "k8s/no-such-pod", Detail: detail(t, broker.Wait{Demand: "k8s/no-such-pod", Reason: broker.WaitUnsatisfiable, Detail: "x"})},
	})
	if got := f.events(t); len(got) != 0 {
		t.Errorf("events for a scheduled and a missing pod: %q", got)
	}
	if len(f.ev.want) != 0 || len(f.ev.last) != 0 {
		t.Errorf("kept state for pods that need no event: want %v, last %v", f.ev.want, f.ev.last)
	}
}

func TestPodEventsAreRateBounded(t *testing.T) {
	var pods []*corev1.Pod
	var ds []broker.Decision
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		p := gpuPod("ml", n, 1)
		pods = append(pods, p)
		ds = append(ds, broker.Decision{Kind: "wait", Demand: "k8s/" + string(p.UID),
			Detail: detail(t, broker.Wait{Demand: "k8s/" + string(p.UID), Reason: broker.WaitPoolMax, Detail: "gpu-training-group is at its max of 5 nodes"})})
	}
	f := newEventsFixture(t, EventsConfig{Burst: 2, Rate: 1}, pods...)
	ctx := context.Background()
	f.ev.Decisions(ctx, ds)
	if got := f.events(t); len(got) != 2 {
		t.Fatalf("burst of 2: wrote %d events", len(got))
	}
	f.ev.Decisions(ctx, nil) // no time passed: no budget
	if got := f.events(t); len(got) != 2 {
		t.Fatalf("without budget: wrote %d events", len(got))
	}
	f.now = f.now.Add(10 * time.Second) // the bucket refills to its burst, not beyond
	f.ev.Decisions(ctx, nil)
	if got := f.events(t); len(got) != 4 {
		t.Fatalf("after a refill to the burst of 2: %d events, want 4", len(got))
	}
	f.now = f.now.Add(time.Second)
	f.ev.Decisions(ctx, ds) // the same decisions again: only the one still owed
	got := f.events(t)
	if len(got) != 5 {
		t.Fatalf("deferred events: %d written in all, want 5 (one per pod): %q", len(got), got)
	}
	for _, e := range got {
		if !strings.Contains(e, "NotTriggerScaleUp Normal: pod did not trigger scale-up (pool-max): gpu-training-group is at its max of 5 nodes") {
			t.Errorf("event %q", e)
		}
	}
}

func TestEventsConfigRefusesBadValues(t *testing.T) {
	for _, c := range []EventsConfig{{Rate: -1}, {Burst: -1}} {
		if _, err := newPodEvents(fake.NewClientset(), staticPods{}, c, nil); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestPodEventsForgetPodsThatLeft(t *testing.T) {
	a, b := gpuPod("ml", "a", 1), gpuPod("ml", "b", 1)
	f := newEventsFixture(t, EventsConfig{}, a, b)
	pods := f.ev.pods.(staticPods)
	wait := func(p *corev1.Pod) []broker.Decision {
		return []broker.Decision{{Kind: "wait", Demand: "k8s/" + string(p.UID),
			Detail: detail(t, broker.Wait{Demand: "k8s/" + string(p.UID), Reason: broker.WaitGang, Detail: "2 of 4 units fit"})}}
	}
	ctx := context.Background()
	f.ev.Decisions(ctx, append(wait(a), wait(b)...))
	if len(f.ev.last) != 2 {
		t.Fatalf("remembered %d pods, want 2", len(f.ev.last))
	}
	delete(pods, a.UID)                                                 // a was deleted
	pods[b.UID] = gpuPod("ml", "b", 1, onNode("n1", corev1.PodRunning)) // b was scheduled
	for i := 1; i < pruneEvery; i++ {
		f.ev.Decisions(ctx, nil)
	}
	if len(f.ev.last) != 0 {
		t.Errorf("after %d batches still remembers %v", pruneEvery, f.ev.last)
	}
}
