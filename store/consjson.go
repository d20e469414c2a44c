package store

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/gpubroker/gpubroker/broker"
)

// constraintsJSON returns json.Marshal(c) as a string, byte for byte, without
// reflection when every string in c is plain printable ASCII (the usual
// labels, models and taints); otherwise it calls json.Marshal. encoding/json
// was the largest client-side cost of a full 50,000-row apply.
// TestConstraintsJSONMatchesMarshal compares the two, and fails when a field
// is added to the types without being added here.
func constraintsJSON(c *broker.Constraints) string {
	return string(appendConstraintsJSON(make([]byte, 0, 64), c))
}

// appendConstraintsJSON appends constraintsJSON(c) to b.
func appendConstraintsJSON(b []byte, c *broker.Constraints) []byte {
	if !plainConstraints(c) {
		j, err := json.Marshal(c)
		if err != nil {
			// Constraints hold only strings, slices and maps of strings:
			// encoding/json cannot fail on them.
			panic(fmt.Sprintf("encode constraints: %v", err))
		}
		return append(b, j...)
	}
	start := len(b)
	b = append(b, '{')
	field := func(name string) {
		if len(b) > start+1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	str := func(s string) {
		b = append(b, '"')
		b = append(b, s...)
		b = append(b, '"')
	}
	strs := func(ss []string) {
		b = append(b, '[')
		for i, s := range ss {
			if i > 0 {
				b = append(b, ',')
			}
			str(s)
		}
		b = append(b, ']')
	}
	if len(c.GPUModels) > 0 {
		field("gpu_models")
		strs(c.GPUModels)
	}
	if len(c.NodeSelector) > 0 {
		field("node_selector")
		keys := make([]string, 0, len(c.NodeSelector))
		for k := range c.NodeSelector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			str(k)
			b = append(b, ':')
			str(c.NodeSelector[k])
		}
		b = append(b, '}')
	}
	if len(c.Affinity) > 0 {
		field("affinity")
		b = append(b, '[')
		for i, t := range c.Affinity {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"requirements":`...)
			if t.Requirements == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, '[')
				for j, r := range t.Requirements {
					if j > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"key":`...)
					str(r.Key)
					b = append(b, `,"operator":`...)
					str(r.Operator)
					if len(r.Values) > 0 {
						b = append(b, `,"values":`...)
						strs(r.Values)
					}
					b = append(b, '}')
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(c.Tolerations) > 0 {
		field("tolerations")
		b = append(b, '[')
		for i, t := range c.Tolerations {
			if i > 0 {
				b = append(b, ',')
			}
			n := len(b)
			b = append(b, '{')
			opt := func(name, v string) {
				if v == "" {
					return
				}
				if len(b) > n+1 {
					b = append(b, ',')
				}
				b = append(b, '"')
				b = append(b, name...)
				b = append(b, '"', ':')
				str(v)
			}
			opt("key", t.Key)
			opt("operator", t.Operator)
			opt("value", t.Value)
			opt("effect", t.Effect)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if c.NodeLabel != "" {
		field("node_label")
		str(c.NodeLabel)
	}
	if c.MIGProfile != "" {
		field("mig_profile")
		str(c.MIGProfile)
	}
	if c.MinGPUMemoryMiB != 0 {
		field("min_gpu_memory_mib")
		b = strconv.AppendInt(b, int64(c.MinGPUMemoryMiB), 10)
	}
	b = append(b, '}')
	return b
}

// plainConstraints reports whether every string of c needs no JSON escape
// (printable ASCII other than ", \ and the <, >, & that encoding/json
// escapes).
func plainConstraints(c *broker.Constraints) bool {
	for _, s := range c.GPUModels {
		if !plainJSON(s) {
			return false
		}
	}
	for k, v := range c.NodeSelector {
		if !plainJSON(k) || !plainJSON(v) {
			return false
		}
	}
	for _, t := range c.Affinity {
		for _, r := range t.Requirements {
			if !plainJSON(r.Key) || !plainJSON(r.Operator) {
				return false
			}
			for _, v := range r.Values {
				if !plainJSON(v) {
					return false
				}
			}
		}
	}
	for _, t := range c.Tolerations {
		if !plainJSON(t.Key) || !plainJSON(t.Operator) || !plainJSON(t.Value) || !plainJSON(t.Effect) {
			return false
		}
	}
	return plainJSON(c.NodeLabel) && plainJSON(c.MIGProfile)
}

func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
