package broker

import (
	"strconv"
	"strings"
)

// MIGSlicesPerGPU is the number of compute slices of a MIG-capable GPU
// (A100, H100, H200, B200: 7).
const MIGSlicesPerGPU = 7

// MIGComputeSlices parses the compute slices of a MIG profile ("3g.40gb"
// → 3; "1g.10gb+me", the profile with the media engines, too).
func MIGComputeSlices(profile string) (int, bool) {
	g, mem, ok := strings.Cut(strings.TrimSuffix(profile, "+me"), "g.")
	mem, gb := strings.CutSuffix(mem, "gb")
	n, err := strconv.Atoi(g)
	if _, merr := strconv.Atoi(mem); !ok || !gb || err != nil || merr != nil || n <= 0 || n > MIGSlicesPerGPU {
		return 0, false
	}
	return n, true
}

// computeSlices is what n devices weigh in compute slices, the unit
// quotas and fair share count in (a whole GPU is MIGSlicesPerGPU): n
// whole GPUs with no profile, n MIG devices of profile otherwise (an
// unknown profile weighs a whole GPU each, the safe side).
func computeSlices(profile string, n int) int {
	if n <= 0 {
		return 0
	}
	c, ok := MIGComputeSlices(profile)
	if profile == "" || !ok {
		c = MIGSlicesPerGPU
	}
	return n * c
}

// migOf describes a MIG pool's partitioning for a reason (", as 7 MIG
// 1g.10gb each"); empty for whole GPUs.
func migOf(p *Pool) string {
	if p.MIGProfile == "" {
		return ""
	}
	return ", as " + strconv.Itoa(p.MIGPerGPU) + " MIG " + p.MIGProfile + " each"
}
