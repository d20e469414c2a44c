package rmadmin_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

type rm struct {
	sim     *yarnsim.Sim
	admin   *yarnsim.AdminServer
	addr    string
	exclude string
}

func startRM(t testing.TB) rm {
	t.Helper()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"n1", "n2"} {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	ex := filepath.Join(t.TempDir(), "exclude.xml")
	a, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: ex, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := a.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return rm{sim: sim, admin: a, addr: addr, exclude: ex}
}

func TestRefreshNodesFailsOverFromStandby(t *testing.T) {
	ctx := context.Background()
	standby, active := startRM(t), startRM(t)
	standby.admin.SetStandby(true)
	// A dead address first, then a standby, then the active RM.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{deadAddr, standby.addr, active.addr}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(active.exclude, []byte(`<hosts><host><name>n1</name></host></hosts>`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.RefreshNodes(ctx, rmadmin.Normal, 0); err != nil {
		t.Fatalf("refreshNodes: %v", err)
	}
	// The active RM decommissioned n1 at once (NORMAL).
	if got := nodeState(t, active.sim, "n1"); got != "DECOMMISSIONED" {
		t.Fatalf("n1 is %s after a NORMAL refresh, want DECOMMISSIONED", got)
	}
	// Every RM a standby: the error keeps the Java class.
	active.admin.SetStandby(true)
	err = c.RefreshNodes(ctx, rmadmin.Graceful, time.Minute)
	if !rmadmin.IsStandby(err) {
		t.Fatalf("err = %v, want a StandbyException", err)
	}
	if !strings.Contains(err.Error(), "org.apache.hadoop.ipc.StandbyException") {
		t.Fatalf("error %q does not name the exception class", err)
	}
}

func TestUpdateNodeResourceAndRemoteErrors(t *testing.T) {
	ctx := context.Background()
	r := startRM(t)
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{r.addr}})
	if err != nil {
		t.Fatal(err)
	}
	res := rmadmin.Resource{MemoryMB: 8192, VCores: 8, Others: map[string]int64{"yarn.io/gpu": 0}}
	if err := c.UpdateNodeResource(ctx, "n2:1", res, -1); err != nil {
		t.Fatal(err)
	}
	_, _, pending := r.sim.Counts()
	if pending != 0 {
		t.Fatalf("pending = %d", pending)
	}
	// n2 has no GPUs now: two 4-GPU containers fit on n1 only.
	if _, err := r.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, pending := r.sim.Counts(); pending != 4 {
		t.Fatalf("pending GPUs = %d, want 4 (n2 set to 0 GPUs)", pending)
	}
	res.Others["yarn.io/gpu"] = 4
	if err := c.UpdateNodeResource(ctx, "n2:1", res, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, pending := r.sim.Counts(); pending != 0 {
		t.Fatalf("pending GPUs = %d after n2 got its GPUs back", pending)
	}

	err = c.UpdateNodeResource(ctx, "nope:1", res, 0)
	var re *rmadmin.RemoteError
	if !errors.As(err, &re) || re.Class != "org.apache.hadoop.yarn.exceptions.YarnException" || rmadmin.IsStandby(err) {
		t.Fatalf("err = %v, want a YarnException", err)
	}
	if err := c.UpdateNodeResource(ctx, "no-port", res, 0); err == nil {
		t.Fatal("a node id without a port was accepted")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []rmadmin.Config{{}, {Addrs: []string{"no-port"}}, {Addrs: []string{"h:1"}, CallTimeout: -1}} {
		if _, err := rmadmin.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestWireBytes checks the bytes of a refreshNodes call against Hadoop's
// documented layout: "hrpc", version 9, service class 0, auth NONE, then
// 4-byte-length frames of varint-delimited protobuf messages.
func TestWireBytes(t *testing.T) {
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
		// Answer: callId 0, SUCCESS, then an empty response.
		_, _ = conn.Write([]byte{0, 0, 0, 6, 4, 0x08, 0x00, 0x10, 0x00, 0x00})
	}()
	c, _ := rmadmin.New(rmadmin.Config{Addrs: []string{ln.Addr().String()}, User: "ops"})
	if err := c.RefreshNodes(context.Background(), rmadmin.Graceful, 30*time.Second); err != nil {
		t.Fatalf("refreshNodes: %v", err)
	}
	b := <-got
	if !bytes.HasPrefix(b, []byte("hrpc\x09\x00\x00")) {
		t.Fatalf("preamble = %q", b[:7])
	}
	for _, want := range [][]byte{
		[]byte(rmadmin.Protocol),
		[]byte("\x0a\x03ops"),              // UserInformationProto.effectiveUser
		[]byte("\x0a\x0crefreshNodes"),     // RequestHeaderProto.methodName
		[]byte("\x04\x08\x02\x10\x1e"),     // RefreshNodesRequestProto: GRACEFUL, 30 s
		[]byte("\x08\x02\x10\x00\x18\x05"), // rpcKind PROTOBUF, FINAL_PACKET, callId -3 (zigzag 5)
	} {
		if !bytes.Contains(b, want) {
			t.Errorf("request bytes lack %q:\n%q", want, b)
		}
	}
}

// complete reports whether b holds the preamble and two whole frames.
func complete(b []byte) bool {
	b = b[7:]
	for range 2 {
		if len(b) < 4 {
			return false
		}
		n := int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])
		if len(b) < 4+n {
			return false
		}
		b = b[4+n:]
	}
	return true
}

func nodeState(t *testing.T, sim *yarnsim.Sim, host string) string {
	t.Helper()
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	c, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := c.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := obs.Node(host)
	return n.State
}
