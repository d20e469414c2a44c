package rmadmin_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestNodeLabelCordon drives the three label calls against yarnsim's admin
// server: an exclusive label no queue asks for, put on n1, keeps n1's
// container and lets nothing new land there; taking it off gives n1 back
// to the default partition.
func TestNodeLabelCordon(t *testing.T) {
	ctx := context.Background()
	r := startRM(t)
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{r.addr}})
	if err != nil {
		t.Fatal(err)
	}
	running, err := r.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "gpubroker-cordon", Exclusive: true}}); err != nil {
		t.Fatal(err)
	}
	// Adding it again with the same exclusivity is a no-op, as on the RM.
	if err := c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "gpubroker-cordon", Exclusive: true}}); err != nil {
		t.Fatalf("adding an existing label again: %v", err)
	}
	if err := c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": {"gpubroker-cordon"}}, true); err != nil {
		t.Fatal(err)
	}
	if got := r.sim.NodeLabels("n1"); !slices.Equal(got, []string{"gpubroker-cordon"}) {
		t.Fatalf("n1 labels = %v", got)
	}
	conts, _, _ := r.sim.AppContainers(running)
	if len(conts) != 1 {
		t.Fatalf("the running app has %d containers after the cordon, want 1", len(conts))
	}
	// Six GPUs free, two on n1 and four on n2: three 2-GPU containers fit
	// without the cordon; with it the third stays pending.
	if _, err := r.sim.Submit(yarnsim.AppSpec{Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, pending := r.sim.Counts(); pending != 2 {
		t.Fatalf("pending GPUs = %d, want 2: the ask must not land on the cordoned n1", pending)
	}
	// Undo: the default partition again, and the ask lands on n2 or n1.
	if err := c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": nil}, true); err != nil {
		t.Fatal(err)
	}
	if got := r.sim.NodeLabels("n1"); len(got) != 0 {
		t.Fatalf("n1 labels = %v after the undo", got)
	}
	if _, _, pending := r.sim.Counts(); pending != 0 {
		t.Fatalf("pending GPUs = %d after the cordon came off", pending)
	}
	if err := c.RemoveFromClusterNodeLabels(ctx, []string{"gpubroker-cordon"}); err != nil {
		t.Fatal(err)
	}
	if got := r.sim.ClusterLabels(); len(got) != 0 {
		t.Fatalf("cluster labels = %v after the removal", got)
	}
}

// TestNodeLabelErrors checks the RM's refusals come back as RemoteErrors
// naming the Java class, and that "labels disabled" is told apart.
func TestNodeLabelErrors(t *testing.T) {
	ctx := context.Background()
	r := startRM(t)
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{r.addr}})
	if err != nil {
		t.Fatal(err)
	}
	yarnErr := func(what string, err error, text string) {
		t.Helper()
		var re *rmadmin.RemoteError
		if !errors.As(err, &re) || re.Class != "org.apache.hadoop.yarn.exceptions.YarnException" {
			t.Fatalf("%s: err = %v, want a YarnException", what, err)
		}
		if !strings.Contains(err.Error(), "org.apache.hadoop.yarn.exceptions.YarnException") || !strings.Contains(err.Error(), text) {
			t.Fatalf("%s: error %q does not name the class and %q", what, err, text)
		}
		if rmadmin.IsNodeLabelsDisabled(err) {
			t.Fatalf("%s: %v taken for labels disabled", what, err)
		}
	}
	yarnErr("unknown label", c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": {"nope"}}, false), "known label collections")
	if err := c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "x", Exclusive: true}}); err != nil {
		t.Fatal(err)
	}
	yarnErr("unknown node", c.ReplaceLabelsOnNode(ctx, map[string][]string{"ghost": {"x"}}, true), "unknown nodes")
	yarnErr("exclusivity change", c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "x"}}), "Exclusivity cannot be modified")
	yarnErr("two labels", c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": {"x", "x2"}}, false), "2 labels specified")
	yarnErr("removing a missing label", c.RemoveFromClusterNodeLabels(ctx, []string{"nope"}), "doesn't existed")
	yarnErr("bad name", c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "no spaces"}}), "is not valid")
	// An unknown node without failOnUnknownNodes is accepted, as Hadoop
	// keeps labels for hosts that register later.
	if err := c.ReplaceLabelsOnNode(ctx, map[string][]string{"ghost": {"x"}}, false); err != nil {
		t.Fatalf("unknown node without failOnUnknownNodes: %v", err)
	}
	for _, bad := range []map[string][]string{nil, {"": {"x"}}, {"n1:port": {"x"}}, {"n1": {""}}} {
		if err := c.ReplaceLabelsOnNode(ctx, bad, false); err == nil {
			t.Errorf("ReplaceLabelsOnNode(%v) accepted", bad)
		}
	}

	sim, err := yarnsim.New(yarnsim.Config{NodeLabelsDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: filepath.Join(t.TempDir(), "exclude.xml"), Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := a.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	off, err := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"add":     off.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "x", Exclusive: true}}),
		"remove":  off.RemoveFromClusterNodeLabels(ctx, []string{"x"}),
		"replace": off.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": {"x"}}, false),
	} {
		if !rmadmin.IsNodeLabelsDisabled(err) {
			t.Errorf("%s on an RM without node labels: err = %v, want labels disabled", name, err)
		}
	}
}

// captureCall runs call against a listener that answers success and
// returns the bytes the client sent.
func captureCall(t *testing.T, call func(c *rmadmin.Client) error) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		var buf bytes.Buffer
		tmp := make([]byte, 4096)
		for buf.Len() < 7+4 || !complete(buf.Bytes()) {
			n, err := conn.Read(tmp)
			buf.Write(tmp[:n])
			if err != nil {
				break
			}
		}
		got <- buf.Bytes()
		_, _ = conn.Write([]byte{0, 0, 0, 6, 4, 0x08, 0x00, 0x10, 0x00, 0x00})
	}()
	c, _ := rmadmin.New(rmadmin.Config{Addrs: []string{ln.Addr().String()}})
	if err := call(c); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// TestLabelWireBytes checks each label call's request message byte for
// byte against the field numbers of yarn_server_resourcemanager_service_protos
// and yarn_protos (NodeLabelProto, NodeIdToLabelsProto, NodeIdProto).
func TestLabelWireBytes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		call   func(c *rmadmin.Client) error
		method string
		body   string
	}{
		{"add", func(c *rmadmin.Client) error {
			return c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "cx", Exclusive: true}, {Name: "s", Exclusive: false}})
		}, "addToClusterNodeLabels",
			// nodeLabels (2) {name (1) "cx", isExclusive (2) true}, {name "s", isExclusive false}
			"\x0f\x12\x06\x0a\x02cx\x10\x01\x12\x05\x0a\x01s\x10\x00"},
		{"remove", func(c *rmadmin.Client) error {
			return c.RemoveFromClusterNodeLabels(ctx, []string{"cx", "s"})
		}, "removeFromClusterNodeLabels",
			// nodeLabels (1) "cx", "s"
			"\x07\x0a\x02cx\x0a\x01s"},
		{"replace", func(c *rmadmin.Client) error {
			return c.ReplaceLabelsOnNode(ctx, map[string][]string{"h2:8041": nil, "h1": {"cx"}}, true)
		}, "replaceLabelsOnNodes",
			// nodeToLabels (1) {nodeId (1) {host "h1", port 0}, nodeLabels (2) "cx"},
			// {nodeId {host "h2", port 8041}}, failOnUnknownNodes (2) true
			"\x1b\x0a\x0c\x0a\x06\x0a\x02h1\x10\x00\x12\x02cx\x0a\x09\x0a\x07\x0a\x02h2\x10\xe9\x3e\x10\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := captureCall(t, tc.call)
			if !bytes.Contains(b, append([]byte{byte(len(tc.method))}, tc.method...)) {
				t.Errorf("no method name %q in %q", tc.method, b)
			}
			if !bytes.HasSuffix(b, []byte(tc.body)) {
				t.Errorf("request message:\n got %q\nwant suffix %q", b, tc.body)
			}
		})
	}
}
