package rmadmin_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// answerFrame is one RPC answer frame: callId, status, class, message and
// an optional empty body, as Hadoop's Server writes it.
func answerFrame(callID uint32, status uint64, class, msg string, body bool) []byte {
	var h []byte
	h = protowire.AppendTag(h, 1, protowire.VarintType)
	h = protowire.AppendVarint(h, uint64(callID))
	h = protowire.AppendTag(h, 2, protowire.VarintType)
	h = protowire.AppendVarint(h, status)
	if class != "" {
		h = protowire.AppendTag(h, 4, protowire.BytesType)
		h = protowire.AppendString(h, class)
		h = protowire.AppendTag(h, 5, protowire.BytesType)
		h = protowire.AppendString(h, msg)
	}
	p := protowire.AppendBytes(nil, h)
	if body {
		p = protowire.AppendBytes(p, nil)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)
}

// FuzzClientAnswer has the real client call refreshNodes on an RM that
// answers fuzzed bytes and hangs up. Properties: the call returns; an error
// names the RM address and the method; a RemoteError carries the address,
// the method and a class and message taken from the answer; success needs
// at least one whole frame in the answer.
func FuzzClientAnswer(f *testing.F) {
	f.Add([]byte{0, 0, 0, 6, 4, 0x08, 0x00, 0x10, 0x00, 0x00})
	f.Add(answerFrame(0, 0, "", "", true))
	f.Add(answerFrame(0, 0, "", "", false))
	f.Add(append(answerFrame(0xfffffffe, 0, "", "", false), answerFrame(0, 0, "", "", true)...)) // a ping answer first
	f.Add(answerFrame(0, 1, rmadmin.StandbyException, "Operation category WRITE is not supported in state standby", false))
	f.Add(answerFrame(0, 1, "org.apache.hadoop.security.authorize.AuthorizationException", "User gpubroker is not allowed", false))
	f.Add(answerFrame(0xffffffff, 2, "org.apache.hadoop.ipc.IpcException", "RPC v9 only", false))
	f.Add([]byte{})
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ln.Close() })
	answers := make(chan []byte)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			ans := <-answers
			// Read the whole call first (preamble and two frames), so
			// closing does not reset the connection under the answer.
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(conn, make([]byte, 7)); err == nil {
				for range 2 {
					var l [4]byte
					if _, err := io.ReadFull(conn, l[:]); err != nil {
						break
					}
					if _, err := io.ReadFull(conn, make([]byte, binary.BigEndian.Uint32(l[:]))); err != nil {
						break
					}
				}
			}
			_, _ = conn.Write(ans)
			_ = conn.Close()
		}
	}()
	addr := ln.Addr().String()
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{addr}, CallTimeout: 10 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ans []byte) {
		done := make(chan error, 1)
		go func() { done <- c.RefreshNodes(context.Background(), rmadmin.Graceful, time.Minute) }()
		answers <- ans
		err := <-done
		if err == nil {
			if len(ans) < 4 || int(binary.BigEndian.Uint32(ans)) > len(ans)-4 {
				t.Fatalf("success on %x, which holds no whole frame", ans)
			}
			return
		}
		if prefix := "rm admin " + addr + ": refreshNodes: "; !strings.HasPrefix(err.Error(), prefix) {
			t.Fatalf("error %q does not start with %q", err, prefix)
		}
		var re *rmadmin.RemoteError
		if errors.As(err, &re) {
			if re.Addr != addr || re.Method != "refreshNodes" {
				t.Fatalf("remote error names %s %s", re.Addr, re.Method)
			}
			if !bytes.Contains(ans, []byte(re.Class)) || !bytes.Contains(ans, []byte(re.Message)) {
				t.Fatalf("remote error %+v carries text that is not in the answer", re)
			}
		}
	})
}
