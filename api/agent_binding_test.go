package api_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/certtest"
)

// xid79 is a report of node with XID 79 (GPU fallen off the bus) dated at.
func xid79(node string, at time.Time) map[string]any {
	return map[string]any{"node": node, "at": at.UTC().Format(time.RFC3339Nano),
		"gpus": []any{map[string]any{"index": 0, "uuid": "GPU-0", "utilisation": 0, "xids": []int{79}}}}
}

// noReport fails unless node has no stored report: a refused report must
// not reach the store.
func noReport(t *testing.T, st *store.Store, node string) {
	t.Helper()
	if r, err := st.LatestReport(context.Background(), node); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("node %s has a report %+v (%v); a refused report must not be stored", node, r, err)
	}
}

// TestAgentTokenReportsOnlyForItsNodes: an attacker holding the real agent
// token of gpu-1 reports XID 79 for gpu-2, which would have it drained and
// replaced: 403, and nothing is stored. A token bound to a pool reports for
// the nodes the broker knows in that pool only; an agent token bound to
// nothing (made before tokens were bound) reports for no node.
func TestAgentTokenReportsOnlyForItsNodes(t *testing.T) {
	e := newEnv(t)
	e.seed() // ip-10-0-0-1..3 in pool gpu-training-group
	ctx := context.Background()
	now := time.Now()

	one, tok, err := e.st.CreateAgentToken(ctx, "agent-gpu-1", []string{"gpu-1"}, "", time.Time{})
	if err != nil || len(tok.Nodes) != 1 {
		t.Fatalf("create: %+v %v", tok, err)
	}
	want(t, e.call("POST", "/api/v1/nodes/gpu-1/report", one, xid79("gpu-1", now)), 202, "own node")
	r := e.call("POST", "/api/v1/nodes/gpu-2/report", one, xid79("gpu-2", now))
	want(t, r, 403, "another node's report with the token of gpu-1")
	if !strings.Contains(r.raw, "bound to node(s) gpu-1") {
		t.Fatalf("refusal does not say why: %s", r.raw)
	}
	noReport(t, e.st, "gpu-2")
	if ts, err := e.st.ListTokens(ctx); err != nil || ts[len(ts)-1].Name != "agent-gpu-1" || fmt.Sprint(ts[len(ts)-1].Nodes) != "[gpu-1]" {
		t.Fatalf("the bound token as listed: %+v %v", ts, err)
	}

	pool, _, err := e.st.CreateAgentToken(ctx, "agent-gpu-pool", nil, "gpu-training-group", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/report", pool, xid79("ip-10-0-0-2", now)), 202, "a node of the pool")
	r = e.call("POST", "/api/v1/nodes/gpu-9/report", pool, xid79("gpu-9", now))
	want(t, r, 403, "a node the broker does not know, with a pool token")
	noReport(t, e.st, "gpu-9")
	other, _, err := e.st.CreateAgentToken(ctx, "agent-cpu-pool", nil, "cpu-node-group", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r = e.call("POST", "/api/v1/nodes/ip-10-0-0-1/report", other, xid79("ip-10-0-0-1", now))
	want(t, r, 403, "a node of another pool")
	if !strings.Contains(r.raw, "it is in pool gpu-training-group") {
		t.Fatalf("refusal does not name the node's pool: %s", r.raw)
	}
	noReport(t, e.st, "ip-10-0-0-1")

	legacy, _, err := e.st.CreateToken(ctx, "old-agent", store.RoleAgent, "")
	if err != nil {
		t.Fatal(err)
	}
	r = e.call("POST", "/api/v1/nodes/gpu-3/report", legacy, xid79("gpu-3", now))
	want(t, r, 403, "an unbound agent token")
	if !strings.Contains(r.raw, "--role agent --node gpu-3") {
		t.Fatalf("refusal does not say how to fix it: %s", r.raw)
	}
	noReport(t, e.st, "gpu-3")

	if _, _, err := e.st.CreateAgentToken(ctx, "bad", []string{"*.ec2.internal"}, "", time.Time{}); !isInvalid(err, "node") {
		t.Fatalf("a wildcard node binding: %v", err)
	}
	if _, _, err := e.st.CreateAgentToken(ctx, "bad", []string{"a"}, "gpu-training-group", time.Time{}); !isInvalid(err, "pool") {
		t.Fatalf("nodes and a pool: %v", err)
	}
	if _, _, err := e.st.CreateAgentToken(ctx, "bad", nil, "", time.Time{}); !isInvalid(err, "node") {
		t.Fatalf("no binding: %v", err)
	}
}

func isInvalid(err error, field string) bool {
	var ve *broker.ValidationError
	return errors.As(err, &ve) && ve.Field == field
}

// TestReportTimeIsTheServers: a report dated more than two minutes ahead
// of the server's clock is refused naming at (an hour ahead was accepted
// and then stayed "fresh" for an hour); within the skew it is stored, and
// its freshness is when the server received it: a received_at the agent
// sends is ignored.
func TestReportTimeIsTheServers(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	r := e.call("POST", "/api/v1/nodes/n1/report", "agent", xid79("n1", now.Add(time.Hour)))
	wantInvalid(t, r, "at", "a report an hour ahead")
	if !strings.Contains(r.raw, "ahead of the server") {
		t.Fatalf("refusal does not say why: %s", r.raw)
	}
	noReport(t, e.st, "n1")
	rep := xid79("n1", now.Add(time.Minute))
	rep["received_at"] = now.Add(time.Hour).UTC().Format(time.RFC3339)
	want(t, e.call("POST", "/api/v1/nodes/n1/report", "agent", rep), 202, "a report a minute ahead (clock skew)")
	got, err := e.st.LatestReport(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ReceivedAt.Sub(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("received_at %s, want the server's time about %s (not the agent's)", got.ReceivedAt, now)
	}
}

// TestWildcardCertificateNeedsAgentAnyNode: a certificate with a wildcard
// DNS name reports for the nodes it matches only with
// api.tls.agent_any_node (off, it is refused: TestClientCertificate…); a
// certificate that names gpu-1 never reports for gpu-10.
func TestWildcardCertificateNeedsAgentAnyNode(t *testing.T) {
	ca := certtest.NewCA(t, "agents CA")
	e := newEnv(t)
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(), AuthCacheTTL: -1,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil)), AgentAnyNode: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "broker", "127.0.0.1").TLS},
		ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	post := func(c *http.Client, node string) (int, string) {
		t.Helper()
		res, err := c.Post(srv.URL+"/api/v1/nodes/"+node+"/report", "application/json",
			strings.NewReader(`{"at":"`+time.Now().UTC().Format(time.RFC3339)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	wild := tlsClient(ca, ca.Issue(t, "agents", "*.ec2.internal").TLS)
	if code, body := post(wild, "ip-10-0-0-9.ec2.internal"); code != 202 {
		t.Fatalf("wildcard certificate with agent_any_node: %d %s", code, body)
	}
	one := tlsClient(ca, ca.Issue(t, "gpu-1").TLS)
	if code, body := post(one, "gpu-10"); code != 403 {
		t.Fatalf("the certificate of gpu-1 reporting for gpu-10: %d %s", code, body)
	}
	noReport(t, e.st, "gpu-10")
}

// nodeTokens stands in for the Kubernetes TokenReview (k8s.AgentReviewer,
// tested on a real API server): each token belongs to one node's pod.
type nodeTokens map[string]string

func (n nodeTokens) ReviewAgent(_ context.Context, token string) (string, string, error) {
	node, ok := n[token]
	if !ok {
		return "", "", broker.ErrNotFound
	}
	return node, "system:serviceaccount:gpubroker:gpubroker-agent on node " + node, nil
}

// TestServiceAccountAgentReportsOnlyForItsNode: with agent service
// accounts configured, the projected token of the agent pod on gpu-1
// reports for gpu-1 and is refused (403) for gpu-2; an unknown token is
// 401, and gpubroker tokens still work.
func TestServiceAccountAgentReportsOnlyForItsNode(t *testing.T) {
	e := newEnv(t)
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(), AuthCacheTTL: -1,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil)), AgentReviewer: nodeTokens{"sa-token-of-gpu-1": "gpu-1"}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	now := time.Now()
	want(t, e.call("POST", "/api/v1/nodes/gpu-1/report", "sa-token-of-gpu-1", xid79("gpu-1", now)), 202, "own node")
	r := e.call("POST", "/api/v1/nodes/gpu-2/report", "sa-token-of-gpu-1", xid79("gpu-2", now))
	want(t, r, 403, "another node's report with the pod token of gpu-1")
	noReport(t, e.st, "gpu-2")
	want(t, e.call("GET", "/api/v1/tenants", "sa-token-of-gpu-1", nil), 403, "a pod token reading tenants")
	want(t, e.call("POST", "/api/v1/nodes/gpu-1/report", "forged", xid79("gpu-1", now)), 401, "an unknown token")
	want(t, e.call("GET", "/api/v1/tenants", "viewer", nil), 200, "a gpubroker token")
}
