package k8s

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Dynamic Resource Allocation: a pod that asks for GPUs through
// ResourceClaims has no nvidia.com/gpu in its requests. Its claims'
// device requests of a GPU DeviceClass are its GPU demand.

// The DeviceClasses NVIDIA's DRA driver publishes: whole GPUs, and MIG
// devices.
const (
	DefaultGPUDeviceClass = "gpu.nvidia.com"
	DefaultMIGDeviceClass = "mig.nvidia.com"
)

// DeviceClasses says which DeviceClasses are GPUs and which MIG devices.
type DeviceClasses struct {
	GPU []string
	MIG []string
}

// DefaultDeviceClasses are NVIDIA's.
func DefaultDeviceClasses() DeviceClasses {
	return DeviceClasses{GPU: []string{DefaultGPUDeviceClass}, MIG: []string{DefaultMIGDeviceClass}}
}

// ClaimRequest is what one ResourceClaim asks of GPUs, as the planner can
// plan it.
type ClaimRequest struct {
	// GPUs are whole GPUs asked with ExactCount.
	GPUs int64
	// AllGPUs is set when a request asks for every GPU of the node it
	// lands on (allocation mode All): the broker plans one whole node.
	AllGPUs bool
	// MIG counts MIG devices by resource-style name
	// ("nvidia.com/mig-1g.10gb"), as the device plugin's mixed strategy
	// names them.
	MIG map[string]int64
	// Models are the GPU products the claim's selectors allow (their
	// productName without the "NVIDIA " prefix); empty: any.
	Models []string
	// MinMemoryMiB is the least memory a GPU must have (a selector on the
	// device's memory capacity); 0: any.
	MinMemoryMiB int
	// NotUnderstood, when set, says which selector the broker cannot
	// evaluate: the claim is unsatisfiable for the planner, never bought
	// for on a guess.
	NotUnderstood string
}

// IsZero reports whether the claim asks for no GPU at all.
func (r ClaimRequest) IsZero() bool {
	return r.GPUs == 0 && !r.AllGPUs && len(r.MIG) == 0 && r.NotUnderstood == ""
}

// MaxDeviceCount bounds a claim's ExactCount (the API allows 128 devices
// per request; more than a node holds is planned as asked).
const MaxDeviceCount = 128

// ClaimGPURequest maps a claim's device requests to GPU demand. Requests
// of other DeviceClasses (NICs, FPGAs) are not GPU demand. A prioritized
// list (firstAvailable) is planned by its first GPU alternative, the one
// the scheduler tries first.
func ClaimGPURequest(spec *resourcev1.ResourceClaimSpec, classes DeviceClasses) ClaimRequest {
	var out ClaimRequest
	for i := range spec.Devices.Requests {
		req := &spec.Devices.Requests[i]
		class, mode, count, sels := "", resourcev1.DeviceAllocationMode(""), int64(0), []resourcev1.DeviceSelector(nil)
		switch {
		case req.Exactly != nil:
			e := req.Exactly
			class, mode, count, sels = e.DeviceClassName, e.AllocationMode, e.Count, e.Selectors
		case len(req.FirstAvailable) > 0:
			for j := range req.FirstAvailable {
				sub := &req.FirstAvailable[j]
				if slices.Contains(classes.GPU, sub.DeviceClassName) || slices.Contains(classes.MIG, sub.DeviceClassName) {
					class, mode, count, sels = sub.DeviceClassName, sub.AllocationMode, sub.Count, sub.Selectors
					break
				}
			}
		}
		isGPU, isMIG := slices.Contains(classes.GPU, class), slices.Contains(classes.MIG, class)
		if !isGPU && !isMIG {
			continue
		}
		if mode == "" {
			mode = resourcev1.DeviceAllocationModeExactCount
		}
		if count <= 0 {
			count = 1
		}
		count = min(count, MaxDeviceCount)
		sel, err := parseSelectors(sels)
		if err != nil {
			out.NotUnderstood = fmt.Sprintf("request %q: %s", req.Name, err)
			continue
		}
		models := mergeModels(out.Models, sel.models)
		if models != nil && len(models) == 0 {
			out.NotUnderstood = fmt.Sprintf("request %q asks for another GPU product than the claim's other requests: the broker plans one product per pod", req.Name)
			continue
		}
		out.Models = models
		if sel.minMemMiB > 0 && isMIG {
			out.NotUnderstood = fmt.Sprintf("request %q selects MIG devices by memory: a MIG device's memory is its profile's; select the profile instead", req.Name)
			continue
		}
		out.MinMemoryMiB = max(out.MinMemoryMiB, sel.minMemMiB)
		switch {
		case isMIG:
			if sel.profile == "" {
				out.NotUnderstood = fmt.Sprintf("request %q asks for MIG devices of class %s without a profile selector (device.attributes[%q].profile == \"1g.10gb\"): the slice size is unknown", req.Name, class, class)
				continue
			}
			if mode == resourcev1.DeviceAllocationModeAll {
				out.NotUnderstood = fmt.Sprintf("request %q asks for all MIG devices of a node: the broker plans MIG slices by count", req.Name)
				continue
			}
			if out.MIG == nil {
				out.MIG = map[string]int64{}
			}
			out.MIG[MIGPrefix+sel.profile] += count
		case mode == resourcev1.DeviceAllocationModeAll:
			out.AllGPUs = true
		default:
			out.GPUs += count
		}
	}
	return out
}

// selectorFacts are what the understood selector forms say.
type selectorFacts struct {
	models    []string // nil: any
	profile   string
	minMemMiB int
}

// The CEL forms the broker evaluates, after spaces are removed:
// device.driver == "…"; the productName attribute equal to one string or
// in a list of strings; the MIG profile attribute equal to a string; and
// the memory capacity compared with a quantity (compareTo(...) >= 0 or
// > 0, isGreaterThan); and conjunctions (&&) of them.
var (
	celMemCompare  = regexp.MustCompile(`^device\.capacity\["[^"]+"\]\.memory\.compareTo\(quantity\("([^"]+)"\)\)(>=|>)0$`)
	celMemGreater  = regexp.MustCompile(`^device\.capacity\["[^"]+"\]\.memory\.isGreaterThan\(quantity\("([^"]+)"\)\)$`)
	celDriver      = regexp.MustCompile(`^device\.driver=="[^"]*"$`)
	celProduct     = regexp.MustCompile(`^device\.attributes\["[^"]+"\]\.productName=="([^"]+)"$`)
	celProductIn   = regexp.MustCompile(`^device\.attributes\["[^"]+"\]\.productName\s*in\s*\[((?:"[^"]+",?)+)\]$`)
	celMIGProfile  = regexp.MustCompile(`^device\.attributes\["[^"]+"\]\.profile=="([0-9]+g\.[0-9]+gb)"$`)
	celQuotedWords = regexp.MustCompile(`"([^"]+)"`)
)

// parseSelectors evaluates the CEL selectors the broker understands and
// refuses any other, naming it.
func parseSelectors(sels []resourcev1.DeviceSelector) (selectorFacts, error) {
	var f selectorFacts
	for _, s := range sels {
		if s.CEL == nil {
			continue
		}
		expr := s.CEL.Expression
		for term := range strings.SplitSeq(stripSpaces(expr), "&&") {
			switch {
			case celDriver.MatchString(term):
			case celProduct.MatchString(term):
				m := productModel(celProduct.FindStringSubmatch(term)[1])
				if m == "" {
					return f, fmt.Errorf("selector not understood: a blank productName in %s", strconv.Quote(expr))
				}
				f.models = mergeModels(f.models, []string{m})
			case celProductIn.MatchString(term):
				var ms []string
				for _, m := range celQuotedWords.FindAllStringSubmatch(celProductIn.FindStringSubmatch(term)[1], -1) {
					if pm := productModel(m[1]); pm != "" {
						ms = append(ms, pm)
					}
				}
				if len(ms) == 0 {
					return f, fmt.Errorf("selector not understood: only blank productNames in %s", strconv.Quote(expr))
				}
				f.models = mergeModels(f.models, ms)
			case celMemCompare.MatchString(term), celMemGreater.MatchString(term):
				m := celMemCompare.FindStringSubmatch(term)
				strict := m == nil || m[2] == ">"
				if m == nil {
					m = celMemGreater.FindStringSubmatch(term)
				}
				q, err := resource.ParseQuantity(m[1])
				if err != nil || q.Sign() < 0 {
					return f, fmt.Errorf("selector not understood: memory quantity %q in %s", m[1], strconv.Quote(expr))
				}
				b := q.Value()
				if strict {
					b++
				}
				f.minMemMiB = max(f.minMemMiB, int((b+(1<<20)-1)>>20))
			case celMIGProfile.MatchString(term):
				p := celMIGProfile.FindStringSubmatch(term)[1]
				if f.profile != "" && f.profile != p {
					return f, fmt.Errorf("selector not understood: two MIG profiles (%s, %s)", f.profile, p)
				}
				f.profile = p
			default:
				return f, fmt.Errorf("selector not understood: %s", strconv.Quote(expr))
			}
		}
	}
	if f.models != nil && len(f.models) == 0 {
		return f, fmt.Errorf("selectors allow no GPU product at all")
	}
	return f, nil
}

// stripSpaces removes every space outside quotes (CEL ignores them) and
// keeps the one around "in", which the regexp needs.
func stripSpaces(s string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
		case !quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			if strings.HasPrefix(s[i:], " in ") {
				b.WriteString(" in ")
				i += 3
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// productModel is a pool's GPU model for a DRA productName: NVIDIA's
// driver publishes "NVIDIA A10G"; pools name "A10G".
func productModel(product string) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(product), "NVIDIA "))
}

// mergeModels intersects two model sets (nil: any).
func mergeModels(a, b []string) []string {
	switch {
	case a == nil:
		return slices.Clone(b)
	case b == nil:
		return a
	}
	out := []string{}
	for _, m := range a {
		if slices.Contains(b, m) && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// draServed reports whether pods' ResourceClaims are observed: mode "on",
// or "auto" where the API server serves resource.k8s.io/v1 (Kubernetes
// 1.34 and later); "off" never.
func draServed(client kubernetes.Interface, mode string) (bool, error) {
	switch mode {
	case "off":
		return false, nil
	case "on":
		return true, nil
	}
	_, err := client.Discovery().ServerResourcesForGroupVersion(resourcev1.SchemeGroupVersion.String())
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), discovery.IsGroupDiscoveryFailedError(err), strings.Contains(err.Error(), "not found"):
		return false, nil
	}
	return false, fmt.Errorf("discover %s (set kubernetes.dra to on or off to skip it): %w", resourcev1.SchemeGroupVersion, err)
}

func podUnbound(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "")
}

// draPodRequest is what a pending pod's ResourceClaims ask of GPUs, and
// the claim the first reason not to plan them names.
type draPodRequest struct {
	req   ClaimRequest
	claim string
}

// draRequest sums the GPU requests of pod's claims that are not allocated
// yet: a claim by name (shared by the pods that name it: counted for the
// first only, by counted), the claim the controller generated from the
// pod's template, or, before it exists, the template itself.
func (o *Observer) draRequest(pod *corev1.Pod, counted map[string]bool) draPodRequest {
	var out draPodRequest
	note := func(claim string, r ClaimRequest) {
		if r.NotUnderstood != "" && out.req.NotUnderstood == "" {
			out.req.NotUnderstood, out.claim = r.NotUnderstood, claim
		}
		if r.AllGPUs && out.req.NotUnderstood == "" {
			out.req.NotUnderstood, out.claim = "allocation mode All (every GPU of the node it lands on): the broker plans GPUs by count; ask for the node's GPU count with ExactCount", claim
		}
		out.req.GPUs += r.GPUs
		out.req.MinMemoryMiB = max(out.req.MinMemoryMiB, r.MinMemoryMiB)
		for k, v := range r.MIG {
			if out.req.MIG == nil {
				out.req.MIG = map[string]int64{}
			}
			out.req.MIG[k] += v
		}
		if r.Models != nil {
			out.req.Models = mergeModels(out.req.Models, r.Models)
			if len(out.req.Models) == 0 && out.req.NotUnderstood == "" {
				out.req.NotUnderstood, out.claim = "its claims ask for GPU products that exclude each other", claim
			}
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		name := ""
		switch {
		case pc.ResourceClaimName != nil:
			name = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
			if name == "" {
				// Not generated yet: the template says what it will ask.
				if t, ok := cached[*resourcev1.ResourceClaimTemplate](o.claimTemplates, pod.Namespace+"/"+*pc.ResourceClaimTemplateName); ok {
					note("template "+t.Name, ClaimGPURequest(&t.Spec.Spec, o.cfg.DeviceClasses))
				}
				continue
			}
		default:
			continue
		}
		key := pod.Namespace + "/" + name
		claim, ok := cached[*resourcev1.ResourceClaim](o.resourceClaims, key)
		if !ok || claim.Status.Allocation != nil || counted[key] {
			// Unknown yet, already allocated (its devices exist), or
			// counted for another pod that shares it.
			continue
		}
		counted[key] = true
		note(name, ClaimGPURequest(&claim.Spec, o.cfg.DeviceClasses))
	}
	return out
}

// add merges the DRA request into a pod's container request and its
// constraints (the claims' GPU products narrow the pod's models). It
// copies what it changes: the cached request and facts are shared.
func (d *draPodRequest) add(req GPURequest, facts *pendingFacts) (GPURequest, *pendingFacts) {
	req.GPUs += d.req.GPUs
	if len(d.req.MIG) > 0 {
		mig := maps.Clone(req.MIG)
		if mig == nil {
			mig = map[string]int64{}
		}
		for k, v := range d.req.MIG {
			mig[k] += v
		}
		req.MIG = mig
	}
	if d.req.MinMemoryMiB > facts.constraints.MinGPUMemoryMiB {
		f := *facts
		f.constraints.MinGPUMemoryMiB = d.req.MinMemoryMiB
		facts = &f
	}
	if len(d.req.Models) > 0 {
		models := mergeModels(nilIfEmpty(facts.constraints.GPUModels), d.req.Models)
		if len(models) == 0 {
			if d.req.NotUnderstood == "" {
				d.req.NotUnderstood = fmt.Sprintf("its GPU products (%s) and the pod's GPU model constraint (%s) exclude each other",
					strings.Join(d.req.Models, ", "), strings.Join(facts.constraints.GPUModels, ", "))
			}
			return req, facts
		}
		f := *facts
		f.constraints.GPUModels = models
		facts = &f
	}
	return req, facts
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// draAllocated counts the GPU devices (whole GPUs, and MIG devices by
// profile) allocated to pod's claims, each claim once per node (claimed):
// the devices of results whose request is of a GPU or MIG DeviceClass.
func (c *classifier) draAllocated(pod *corev1.Pod, claimed map[string]bool) GPURequest {
	var req GPURequest
	for _, pc := range pod.Spec.ResourceClaims {
		name := ""
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				name = *st.ResourceClaimName
			}
		}
		key := pod.Namespace + "/" + name
		if name == "" || claimed[key] {
			continue
		}
		claim, ok := c.objs.resourceClaim(pod.Namespace, name)
		if !ok || claim.Status.Allocation == nil {
			continue
		}
		claimed[key] = true
		kinds := requestKinds(&claim.Spec, c.cfg.DeviceClasses)
		for _, r := range claim.Status.Allocation.Devices.Results {
			k, ok := kinds[r.Request]
			if !ok {
				top, _, _ := strings.Cut(r.Request, "/")
				k = kinds[top]
			}
			switch {
			case k.gpu:
				req.GPUs++
			case k.mig:
				if req.MIG == nil {
					req.MIG = map[string]int64{}
				}
				// An unknown profile counts as a whole GPU (the safe side).
				req.MIG[MIGPrefix+k.profile]++
			}
		}
	}
	return req
}

// requestKind is what a claim's request (or subrequest, "req/sub") asks.
type requestKind struct {
	gpu     bool
	mig     bool
	profile string
}

// requestKinds maps a claim's request names to the kind of device each asks.
func requestKinds(spec *resourcev1.ResourceClaimSpec, classes DeviceClasses) map[string]requestKind {
	out := map[string]requestKind{}
	kind := func(class string, sels []resourcev1.DeviceSelector) requestKind {
		switch {
		case slices.Contains(classes.GPU, class):
			return requestKind{gpu: true}
		case slices.Contains(classes.MIG, class):
			f, _ := parseSelectors(sels)
			return requestKind{mig: true, profile: f.profile}
		}
		return requestKind{}
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			out[r.Name] = kind(r.Exactly.DeviceClassName, r.Exactly.Selectors)
		}
		for _, sub := range r.FirstAvailable {
			out[r.Name+"/"+sub.Name] = kind(sub.DeviceClassName, sub.Selectors)
		}
	}
	return out
}

// sliceNodeIndex indexes ResourceSlices by the node they publish for.
const sliceNodeIndex = "node"

func sliceNode(obj any) ([]string, error) {
	if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
		return []string{*s.Spec.NodeName}, nil
	}
	return nil, nil
}

// nodeSliceDevices counts the GPU devices the ResourceSlices of node
// publish from a GPU driver: whole GPUs (devices whose "type" attribute is
// "gpu", or that have none) and MIG devices ("type" "mig") by their
// "profile" attribute, as nvidia.com/mig-<profile> names them; and the
// least memory of its whole GPUs in MiB (their "memory" capacity; 0 when
// none says). Of a pool's slices only the newest generation counts, as the
// scheduler reads them.
func nodeSliceDevices(inf cache.SharedIndexInformer, node string, drivers []string) (GPURequest, int) {
	var out GPURequest
	objs, err := inf.GetIndexer().ByIndex(sliceNodeIndex, node)
	if err != nil {
		return out, 0
	}
	newest := map[string]int64{}
	for _, o := range objs {
		s := o.(*resourcev1.ResourceSlice)
		key := s.Spec.Driver + "/" + s.Spec.Pool.Name
		newest[key] = max(newest[key], s.Spec.Pool.Generation)
	}
	memMiB := 0
	for _, o := range objs {
		s := o.(*resourcev1.ResourceSlice)
		if !slices.Contains(drivers, s.Spec.Driver) || s.Spec.Pool.Generation < newest[s.Spec.Driver+"/"+s.Spec.Pool.Name] {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			typ := "gpu"
			if t, ok := d.Attributes["type"]; ok {
				typ = ""
				if t.StringValue != nil {
					typ = *t.StringValue
				}
			}
			switch typ {
			case "gpu":
				out.GPUs++
				if c, ok := d.Capacity["memory"]; ok {
					if m := int(c.Value.Value() >> 20); m > 0 && (memMiB == 0 || m < memMiB) {
						memMiB = m
					}
				}
			case "mig":
				p, ok := d.Attributes["profile"]
				if !ok || p.StringValue == nil {
					continue
				}
				if out.MIG == nil {
					out.MIG = map[string]int64{}
				}
				out.MIG[MIGPrefix+*p.StringValue]++
			}
		}
	}
	return out, memMiB
}
