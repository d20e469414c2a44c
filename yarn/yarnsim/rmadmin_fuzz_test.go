package yarnsim

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// pipeConn is a connection that reads a fixed input and records what is
// written; serveConn sees the end of the input as the client hanging up.
type pipeConn struct {
	net.Conn // nil: only the methods below are used
	in       io.Reader
	out      bytes.Buffer
}

func (c *pipeConn) Read(b []byte) (int, error)  { return c.in.Read(b) }
func (c *pipeConn) Write(b []byte) (int, error) { return c.out.Write(b) }

// recordCalls returns the bytes the real rmadmin client sends for each of
// its calls, answered by an RM that says success.
func recordCalls(f *testing.F) [][]byte {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			var buf bytes.Buffer
			pre := make([]byte, 7)
			_, _ = io.ReadFull(conn, pre)
			buf.Write(pre)
			for range 2 {
				var l [4]byte
				_, _ = io.ReadFull(conn, l[:])
				b := make([]byte, binary.BigEndian.Uint32(l[:]))
				_, _ = io.ReadFull(conn, b)
				buf.Write(l[:])
				buf.Write(b)
			}
			got <- buf.Bytes()
			_, _ = conn.Write(responseFrame(0, 0, "", "", nil, []byte{}))
			_ = conn.Close()
		}
	}()
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{ln.Addr().String()}, User: "ops"})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	var calls [][]byte
	for _, call := range []func() error{
		func() error { return c.RefreshNodes(ctx, rmadmin.Graceful, 30*time.Second) },
		func() error { return c.RefreshNodes(ctx, rmadmin.Forceful, 0) },
		func() error { return c.RefreshNodes(ctx, rmadmin.Normal, 0) },
		func() error {
			return c.UpdateNodeResource(ctx, "n1:8041", rmadmin.Resource{MemoryMB: 8192, VCores: 8, Others: map[string]int64{"yarn.io/gpu": 2}}, -1)
		},
		func() error {
			return c.UpdateNodeResource(ctx, "n2:8041", rmadmin.Resource{MemoryMB: 8192, VCores: 8, Others: map[string]int64{"yarn.io/gpu": -1}}, 0)
		},
		func() error {
			return c.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: "gpubroker-cordon", Exclusive: true}, {Name: "shared"}})
		},
		func() error {
			return c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": {"gpubroker-cordon"}, "n2:40002": {"shared"}}, true)
		},
		func() error { return c.ReplaceLabelsOnNode(ctx, map[string][]string{"n1": nil}, false) },
		func() error { return c.RemoveFromClusterNodeLabels(ctx, []string{"gpubroker-cordon"}) },
	} {
		if err := call(); err != nil {
			f.Fatal(err)
		}
		calls = append(calls, <-got)
	}
	return calls
}

// FuzzAdminServerRequest feeds fuzzed client bytes to yarnsim's Hadoop IPC
// decoder (serveConn), seeded with the bytes the real rmadmin client sends.
// Properties: no panic; every answer is a whole frame holding an
// RpcResponseHeaderProto whose status is SUCCESS, ERROR or FATAL, a
// failure carries an exception class and a success none; and whatever the
// calls did, every node keeps a capability AddNode would accept (GPUs not
// negative) with the scheduler's free-GPU books matching the nodes, and at
// most one label, a cluster label.
func FuzzAdminServerRequest(f *testing.F) {
	calls := recordCalls(f)
	for _, c := range calls {
		f.Add(c)
	}
	f.Add(append(calls[3], calls[0][7:]...)) // two calls on one connection
	// Labels added, put on nodes, taken off and removed, on one connection.
	f.Add(append(append(append(slices.Clone(calls[5]), calls[6][7:]...), calls[7][7:]...), calls[8][7:]...))
	f.Add([]byte("hrpc\x09\x00\x21")) // SASL: a fatal answer
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		sim, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"n1", "n2"} {
			if err := sim.AddNode(NodeSpec{Host: h, GPUs: 4}); err != nil {
				t.Fatal(err)
			}
		}
		a, err := NewAdminServer(sim, AdminConfig{ExcludePath: filepath.Join(t.TempDir(), "exclude.xml")})
		if err != nil {
			t.Fatal(err)
		}
		c := &pipeConn{in: bytes.NewReader(in)}
		a.serveConn(c)

		out := c.out.Bytes()
		for len(out) > 0 {
			if len(out) < 4 || int(binary.BigEndian.Uint32(out)) > len(out)-4 {
				t.Fatalf("answer is not a whole frame: %x", out)
			}
			n := binary.BigEndian.Uint32(out)
			payload := out[4 : 4+n]
			out = out[4+n:]
			hdr, n2 := protowire.ConsumeBytes(payload)
			if n2 < 0 {
				t.Fatalf("answer header is not delimited: %x", payload)
			}
			status, class := uint64(99), ""
			if err := walk(hdr, func(num protowire.Number, v uint64, s []byte) {
				switch num {
				case 2:
					status = v
				case 4:
					class = string(s)
				}
			}); err != nil {
				t.Fatalf("answer header %x: %v", hdr, err)
			}
			switch {
			case status > 2:
				t.Fatalf("answer status %d", status)
			case status == 0 && class != "":
				t.Fatalf("success with exception class %q", class)
			case status != 0 && class == "":
				t.Fatalf("failure (status %d) without an exception class", status)
			}
		}

		sim.mu.Lock()
		defer sim.mu.Unlock()
		free := map[string]int{}
		for host, n := range sim.nodes {
			if n.spec.GPUs < 0 {
				t.Errorf("node %s has %d GPUs after %x", host, n.spec.GPUs, in)
			}
			if n.state == "RUNNING" {
				free[label(n.spec.Labels)] += n.freeGPUs()
			}
			if len(n.spec.Labels) > 1 {
				t.Errorf("node %s has labels %v: YARN allows one", host, n.spec.Labels)
			}
			for _, l := range n.spec.Labels {
				if _, ok := sim.clusterLabels[l]; !ok {
					t.Errorf("node %s carries label %q that is not a cluster label", host, l)
				}
			}
		}
		for l, g := range free {
			if sim.freeByLabel[l] != g {
				t.Errorf("free GPUs of label %q: books say %d, nodes %d", l, sim.freeByLabel[l], g)
			}
		}
	})
}
