package rmadmin

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// appendHeader encodes an RpcResponseHeaderProto as the RM writes it.
func appendHeader(b []byte, h responseHeader) []byte {
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.callID))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, h.status)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, rpcVersion) // serverIpcVersionNum, ignored
	if h.exceptionClass != "" {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, h.exceptionClass)
	}
	if h.errorMsg != "" {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendString(b, h.errorMsg)
	}
	if h.errorDetail != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, h.errorDetail)
	}
	b = protowire.AppendTag(b, 7, protowire.BytesType) // clientId, ignored
	return protowire.AppendBytes(b, []byte("0123456789abcdef"))
}

// FuzzResponseHeader round-trips RpcResponseHeaderProto: a header encoded
// with the fields the RM sets parses back to the same values, also after
// unknown fields of every wire type, and the frame around it splits back
// into the header and the body.
func FuzzResponseHeader(f *testing.F) {
	f.Add(uint32(0), uint64(statusSuccess), "", "", uint64(0), []byte{})
	f.Add(uint32(0), uint64(statusError), StandbyException, "Operation category WRITE is not supported in state standby", uint64(2), []byte(nil))
	f.Add(uint32(0xffffffff), uint64(statusFatal), "org.apache.hadoop.ipc.IpcException", "RPC v9 only", uint64(11), []byte(nil))
	f.Add(uint32(0xfffffffe), uint64(statusSuccess), "", "", uint64(0), []byte{0x08, 0x01})
	f.Fuzz(func(t *testing.T, callID uint32, status uint64, class, msg string, detail uint64, body []byte) {
		want := responseHeader{callID: callID, status: status, exceptionClass: class, errorMsg: msg, errorDetail: detail}
		hb := appendHeader(nil, want)
		// Fields the client does not know, of every wire type, are skipped.
		hb = protowire.AppendTag(hb, 99, protowire.Fixed32Type)
		hb = protowire.AppendFixed32(hb, 7)
		hb = protowire.AppendTag(hb, 100, protowire.Fixed64Type)
		hb = protowire.AppendFixed64(hb, 7)
		hb = protowire.AppendTag(hb, 101, protowire.BytesType)
		hb = protowire.AppendString(hb, msg)
		got, err := parseResponseHeader(hb)
		if err != nil {
			t.Fatalf("parse %x: %v", hb, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
		var fr []byte
		if body == nil {
			fr = frame(hb)
		} else {
			fr = frame(hb, body)
		}
		payload, err := readFrame(bytes.NewReader(fr))
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		h, rest, err := delimited(payload)
		if err != nil || !bytes.Equal(h, hb) {
			t.Fatalf("split header: %x, %v", h, err)
		}
		if body == nil {
			if len(rest) != 0 {
				t.Fatalf("rest %x after a frame without a body", rest)
			}
			return
		}
		m, rest, err := delimited(rest)
		if err != nil || !bytes.Equal(m, body) || len(rest) != 0 {
			t.Fatalf("split body: %x rest %x, %v", m, rest, err)
		}
	})
}

// FuzzParseFrame feeds arbitrary bytes to the frame and header decoders the
// client runs on an RM's answer. Properties: no panic; a frame longer than
// the limit is refused before it is allocated; a header that parses
// re-encodes to one that parses to the same values.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 6, 4, 0x08, 0x00, 0x10, 0x00, 0x00}) // the success answer of TestWireBytes
	f.Add(frame(appendHeader(nil, responseHeader{status: statusError, exceptionClass: StandbyException, errorMsg: "standby"})))
	f.Add(frame(appendHeader(nil, responseHeader{callID: 0xffffffff, status: statusFatal, exceptionClass: "x", errorMsg: "y"})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, err := readFrame(bytes.NewReader(b))
		if len(b) >= 4 && binary.BigEndian.Uint32(b) > maxFrame && err == nil {
			t.Fatalf("frame of %d bytes accepted", binary.BigEndian.Uint32(b))
		}
		if err != nil {
			return
		}
		hb, rest, err := delimited(payload)
		if err != nil {
			return
		}
		h, err := parseResponseHeader(hb)
		if err != nil {
			return
		}
		again, err := parseResponseHeader(appendHeader(nil, h))
		if err != nil || again != h {
			t.Fatalf("re-encoded header %+v parses to %+v, %v", h, again, err)
		}
		_, _, _ = delimited(rest)
	})
}
