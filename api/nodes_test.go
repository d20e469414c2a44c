package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// nodeNames lists the names of a /nodes page.
func nodeNames(r resp) []string {
	var out []string
	for _, it := range r.items() {
		out = append(out, it.(map[string]any)["name"].(string))
	}
	return out
}

// follow reads every page of path (a /nodes query) as role, following
// next, and returns the names in order and the number of pages.
func follow(t *testing.T, e *env, path, role string) (names []string, pages int) {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	next := ""
	for pages = 1; ; pages++ {
		p := path
		if next != "" {
			p += sep + "after=" + url.QueryEscape(next)
		}
		r := e.call("GET", p, role, nil)
		want(t, r, 200, p)
		names = append(names, nodeNames(r)...)
		next, _ = r.body["next"].(string)
		if next == "" {
			return names, pages
		}
		if pages > 100 {
			t.Fatalf("%s: more than 100 pages", path)
		}
	}
}

// manyNodes is n active nodes named node-0000…, every third on YARN,
// every fifth unhealthy (its agent) and every seventh down (its side).
func manyNodes(n int) []broker.Node {
	ns := make([]broker.Node, n)
	for i := range ns {
		ns[i] = gpuNode(fmt.Sprintf("node-%04d", i))
		if i%3 == 0 {
			ns[i].Owner = broker.OwnerYARN
		}
		if i%5 == 0 {
			ns[i].Healthy, ns[i].HealthReason = false, "XID 79"
		}
		if i%7 == 0 {
			ns[i].Down, ns[i].DownSince = "kubelet NotReady", time.Now().Add(-time.Minute)
		}
	}
	return ns
}

// TestNodesPages: /nodes pages by name, 500 nodes by default and at most
// 1000; next leads through every node exactly once, in name order, also
// with filters; the last page has no next.
func TestNodesPages(t *testing.T) {
	e := newEnv(t)
	const n = 1203
	all := manyNodes(n)
	if _, err := e.st.UpsertPool(context.Background(), broker.Pool{Name: "gpu-training-group", Provider: "aws",
		Group: "gpu-training-group", GPUModel: "A100", GPUsPerNode: 8, MaxNodes: 2000, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.UpsertNodes(context.Background(), all, time.Now()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nd := range all {
		names = append(names, nd.Name)
	}

	first := e.call("GET", "/api/v1/nodes", "viewer", nil)
	want(t, first, 200, "default page")
	if got := nodeNames(first); len(got) != 500 || got[0] != "node-0000" || got[499] != "node-0499" || first.body["next"] == nil {
		t.Fatalf("default page: %d nodes from %v, next %v; want 500 from node-0000 and a next", len(got), got[:1], first.body["next"])
	}
	got, pages := follow(t, e, "/api/v1/nodes", "viewer")
	if !slices.Equal(got, names) || pages != 3 {
		t.Fatalf("default pages: %d pages, %d names; want 3 pages and all %d in order", pages, len(got), n)
	}
	max := e.call("GET", "/api/v1/nodes?limit=1000", "viewer", nil)
	if got := nodeNames(max); len(got) != 1000 || max.body["next"] == nil {
		t.Fatalf("limit=1000: %d nodes, next %v", len(got), max.body["next"])
	}
	if got, pages := follow(t, e, "/api/v1/nodes?limit=1000", "viewer"); !slices.Equal(got, names) || pages != 2 {
		t.Fatalf("limit=1000: %d pages, %d names", pages, len(got))
	}
	// A page that ends exactly at the last node has no next.
	exact := e.call("GET", "/api/v1/nodes?limit=3&after="+url.QueryEscape(cursorFor(names[n-4])), "viewer", nil)
	if got := nodeNames(exact); !slices.Equal(got, names[n-3:]) || exact.body["next"] != nil {
		t.Fatalf("last page: %v, next %v; want %v and no next", got, exact.body["next"], names[n-3:])
	}

	// Filters page too, and combine.
	for _, c := range []struct {
		query string
		keep  func(broker.Node) bool
	}{
		{"owner=yarn", func(nd broker.Node) bool { return nd.Owner == broker.OwnerYARN }},
		{"healthy=false", func(nd broker.Node) bool { return !nd.Healthy || nd.Down != "" }},
		{"healthy=true&owner=k8s", func(nd broker.Node) bool { return nd.Healthy && nd.Down == "" && nd.Owner == broker.OwnerK8s }},
		{"pool=gpu-training-group&phase=active", func(broker.Node) bool { return true }},
	} {
		var wantNames []string
		for _, nd := range all {
			if c.keep(nd) {
				wantNames = append(wantNames, nd.Name)
			}
		}
		got, _ := follow(t, e, "/api/v1/nodes?limit=97&"+c.query, "viewer")
		if !slices.Equal(got, wantNames) {
			t.Errorf("%s: %d nodes, want %d (first %v)", c.query, len(got), len(wantNames), got[:min(3, len(got))])
		}
	}
}

// cursorFor is the cursor /nodes returns after the node called name.
func cursorFor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("node:" + name))
}

// TestNodesBadInput: every bad paging or filter value is a 400 naming the
// parameter, with a message that says what to send instead.
func TestNodesBadInput(t *testing.T) {
	e := newEnv(t)
	e.seed()
	demandNext := e.call("GET", "/api/v1/demand?limit=1", "viewer", nil).body["next"].(string)
	for _, c := range []struct {
		query, field, fix string
	}{
		{"limit=0", "limit", "between 1 and 1000"},
		{"limit=-5", "limit", "between 1 and 1000"},
		{"limit=abc", "limit", "must be an integer"},
		{"limit=1001", "limit", "follow next"},
		{"limit=", "limit", "leave the parameter out"},
		{"healthy=maybe", "healthy", "true, false"},
		{"owner=mesos", "owner", "yarn, k8s, none"},
		{"phase=asleep", "phase", "must be one of"},
		{"pool=gpu-typo", "pool", "GET /api/v1/pools lists them"},
		{"after=%21%21%21", "after", "start again without after"},       // not base64
		{"after=bm9kZS0x", "after", "start again without after"},        // base64 of "node-1": no marker
		{"after=bm9kZTo", "after", "start again without after"},         // the marker without a name
		{"after=" + demandNext, "after", "start again without after"},   // another list's cursor
		{"after=" + strings.Repeat("A", 1025), "after", "at most 1024"}, // beyond the bound
		{"sort=name", "sort", "allowed: owner, phase, pool, healthy"},   // unknown parameter
		{"limit=5&limit=6", "limit", "once"},                            // repeated
		{"after=" + cursorFor("x") + "&after=" + cursorFor("y"), "after", "once"},
	} {
		r := e.call("GET", "/api/v1/nodes?"+c.query, "viewer", nil)
		wantInvalid(t, r, c.field, c.query)
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, c.fix) {
			t.Errorf("%s: message %q does not say %q", c.query, msg, c.fix)
		}
	}
	// A cursor of a long name (a DNS name may be 253 bytes) is accepted.
	long := strings.Repeat("n", 253)
	want(t, e.call("GET", "/api/v1/nodes?after="+cursorFor(long), "viewer", nil), 200, "cursor of a 253-byte name")
}

// TestNodesPagesOneGeneration: with the read model, every page of one
// generation is cut from the same node list, so a client following next
// sees one consistent list even while the store changes; each page has
// its own ETag and 304; the next generation shows the change, and an old
// cursor goes on after its name.
func TestNodesPagesOneGeneration(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	r := replica(t, e)
	if err := e.st.UpsertNodes(ctx, []broker.Node{gpuNode("n1"), gpuNode("n2"), gpuNode("n3"), gpuNode("n4"), gpuNode("n5")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	p1 := r.call("GET", "/api/v1/nodes?limit=2&pool=gpu-training-group&owner=k8s", "viewer", nil)
	want(t, p1, 200, "page 1")
	if got := nodeNames(p1); !slices.Equal(got, []string{"ip-10-0-0-1", "n1"}) {
		t.Fatalf("page 1: %v", got)
	}
	next := p1.body["next"].(string)
	// The store changes without a new generation: a node appears in the
	// range of page 2. A page read from the store now would show it.
	if err := e.st.UpsertNodes(ctx, []broker.Node{gpuNode("n1a")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	page2 := "/api/v1/nodes?limit=2&pool=gpu-training-group&owner=k8s&after=" + next
	p2 := r.call("GET", page2, "viewer", nil)
	if got := nodeNames(p2); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Fatalf("page 2 of the same generation: %v, want [n2 n3] (cut from the list page 1 was)", got)
	}
	e1, e2 := p1.header.Get("ETag"), p2.header.Get("ETag")
	if e1 == "" || e2 == "" || e1 == e2 {
		t.Fatalf("ETags of pages 1 and 2: %q, %q; want two different ones", e1, e2)
	}
	want(t, r.call("GET", page2, "viewer", nil, "If-None-Match: "+e2), 304, "page 2 with its ETag")
	want(t, r.call("GET", page2, "viewer", nil, "If-None-Match: "+e1), 200, "page 2 with page 1's ETag")

	// A write through the API starts a new generation: page 2 of the
	// same cursor now shows the new node, under a new ETag.
	want(t, r.call("PUT", "/api/v1/nodes/n5/protection", "admin", map[string]any{"protected": true}), 200, "protect")
	p2 = r.call("GET", page2, "viewer", nil, "If-None-Match: "+e2)
	want(t, p2, 200, "page 2 of the next generation")
	if got := nodeNames(p2); !slices.Equal(got, []string{"n1a", "n2"}) || p2.header.Get("ETag") == e2 {
		t.Fatalf("page 2 of the next generation: %v, ETag %q (was %q)", got, p2.header.Get("ETag"), e2)
	}
}

// TestNodesTenantAdminPages: a tenant-admin's pages are scoped as the
// full list was (work of other tenants left out) and are not the
// admin's answer served from the read model.
func TestNodesTenantAdminPages(t *testing.T) {
	e := newEnv(t)
	e.seedTwoTenants()
	r := replica(t, e)
	for range 2 { // the second time from the read model
		admin := r.call("GET", "/api/v1/nodes?limit=1", "admin", nil)
		ml := r.call("GET", "/api/v1/nodes?limit=1", "ml-admin", nil)
		want(t, admin, 200, "admin page")
		want(t, ml, 200, "tenant-admin page")
		if !strings.Contains(admin.raw, "uid-b9") || !strings.Contains(ml.raw, "uid-a9") || strings.Contains(ml.raw, "uid-b9") ||
			strings.Contains(ml.raw, "okapi") {
			t.Fatalf("admin page %s\ntenant-admin page %s\nwant okapi-lab's work in the admin's only", admin.raw, ml.raw)
		}
	}
}
