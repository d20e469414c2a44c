package rmadmin

import (
	"net"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzReplaceLabelsOnNodeRequest encodes fuzzed node keys and labels.
// Properties: an accepted input decodes back, through the field numbers of
// ReplaceLabelsOnNodeRequestProto, NodeIdToLabelsProto and NodeIdProto, to
// the same hosts, ports (0 for a bare host) and labels, with
// failOnUnknownNodes kept; an input refused names no panic.
func FuzzReplaceLabelsOnNodeRequest(f *testing.F) {
	f.Add("gpu07.example.com", "gpubroker-cordon", "gpu08:8041", "", true)
	f.Add("h1", "x", "h1:0", "y", false)
	f.Add("", "x", "[::1]:45454", "z", true)
	f.Add("h:99999999999", "x", "h:-1", "x", false)
	f.Fuzz(func(t *testing.T, k1, l1, k2, l2 string, fail bool) {
		in := map[string][]string{k1: {l1}, k2: nil}
		if l2 != "" {
			in[k2] = []string{l2}
		}
		b, err := replaceLabelsOnNodeRequest(in, fail)
		if err != nil {
			return
		}
		got := map[string][]string{}
		gotFail := false
		err = eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) {
			switch num {
			case 1:
				host, port, labels := "", int64(-99), []string(nil)
				_ = eachField(s, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) {
					switch num {
					case 1:
						_ = eachField(s, func(num protowire.Number, _ protowire.Type, v uint64, s []byte) {
							switch num {
							case 1:
								host = string(s)
							case 2:
								port = int64(int32(v))
							}
						})
					case 2:
						labels = append(labels, string(s))
					}
				})
				got[net.JoinHostPort(host, strconv.FormatInt(port, 10))] = labels
			case 2:
				gotFail = v != 0
			}
		})
		if err != nil {
			t.Fatalf("encoding of %v does not parse: %v", in, err)
		}
		if gotFail != fail {
			t.Fatalf("failOnUnknownNodes = %v, want %v", gotFail, fail)
		}
		if len(got) != len(in) {
			t.Fatalf("decoded %v from %v", got, in)
		}
		for k, ls := range in {
			host, port, err := splitNode(k)
			if err != nil {
				t.Fatalf("accepted key %q does not split: %v", k, err)
			}
			dk := net.JoinHostPort(host, strconv.Itoa(int(port)))
			if !slices.Equal(got[dk], ls) {
				t.Fatalf("node %q: decoded labels %q, want %q", k, got[dk], ls)
			}
		}
	})
}
