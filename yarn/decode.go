package yarn

import (
	"cmp"
	"slices"
	"strings"
)

// Fast decoders of the large answers straight into the Observation's
// shapes (see scanner). They produce what json.Unmarshal into the wire
// shapes followed by their conversion produces (reference_test.go;
// TestFastDecodeMatchesReference pins it on every recorded answer); only
// values the mapping never reads are skipped unchecked, so an answer whose
// unread fields are malformed no longer fails.

// decoder is implemented by answer types that decode themselves with a
// scanner; Client.Get streams their bodies into it instead of reading
// them whole for encoding/json.
type decoder interface {
	decode(s *scanner) error
}

// appsAnswer is GET PathApps decoded into Apps (active apps only, in id
// order); present is false when the answer has no apps element.
type appsAnswer struct {
	present bool
	apps    []App
	// hint is how many apps to make room for (the last poll's count): 25,000
	// apps grown by append cost twice their size.
	hint int
}

// decodeAnswer decodes a whole body.
func (r *appsAnswer) decodeAnswer(b []byte) error { return r.decode(&scanner{b: b}) }

func (r *appsAnswer) decode(s *scanner) error {
	in := interner{}
	*r = appsAnswer{hint: r.hint}
	s.object(func() {
		if string(s.key) != "apps" {
			s.skip()
			return
		}
		if s.null() {
			r.present, r.apps = false, nil
			return
		}
		r.present, r.apps = true, r.apps[:0]
		s.object(func() {
			if string(s.key) != "app" {
				s.skip()
				return
			}
			if r.apps == nil && r.hint > 0 {
				r.apps = make([]App, 0, r.hint+r.hint/16)
			}
			r.apps = r.apps[:0]
			s.each(func() {
				s.release()
				if a, ok := s.app(&in); ok {
					r.apps = append(r.apps, a)
				}
			})
		})
	})
	if err := s.end(); err != nil {
		return err
	}
	if r.present && r.apps == nil {
		r.apps = []App{}
	}
	slices.SortFunc(r.apps, func(x, y App) int { return cmp.Compare(x.ID, y.ID) })
	return nil
}

// interner shares the strings that repeat across apps (users, queues,
// states, labels).
type interner map[string]string

func (in interner) str(s *scanner) string {
	if s.null() {
		return ""
	}
	raw, esc := s.rawString()
	if esc {
		return s.unescape(raw)
	}
	if v, ok := in[string(raw)]; ok {
		return v
	}
	v := string(raw)
	in[v] = v
	return v
}

// app decodes one AppInfo as convertApps (reference_test.go) maps it, and whether it is active.
func (s *scanner) app(in *interner) (App, bool) {
	a := App{AllocatedGPUs: -1}
	var tags string
	var riStart, riEnd int
	riNull := true
	s.object(func() {
		switch string(s.key) {
		case "id":
			a.ID = s.str()
		case "user":
			a.User = in.str(s)
		case "name":
			a.Name = s.str()
		case "queue":
			a.Queue = in.str(s)
		case "state":
			a.State = in.str(s)
		case "applicationtags":
			tags = s.str()
		case "priority":
			a.Priority = s.flexInt()
		case "startedtime":
			a.Started = millis(flexInt(s.flexInt()))
		case "runningcontainers":
			a.RunningContainers = int(s.flexInt())
		case "allocatedmb":
			a.AllocatedMB = s.flexInt()
		case "allocatedvcores":
			a.AllocatedVCores = s.flexInt()
		case "resourcerequests":
			a.Requests = a.Requests[:0]
			s.each(func() {
				if r, ok := s.request(); ok {
					a.Requests = append(a.Requests, r)
				}
			})
		case "resourceinfo":
			// Decoded below, only for apps that hold containers: it is
			// most of an app's answer.
			riNull = s.ws() == 'n'
			riStart = s.i
			s.skip()
			riEnd = s.i
		default:
			s.skip()
		}
	})
	if s.err != nil || !isActive(a.State) {
		return App{}, false
	}
	a.QueuePath = a.Queue
	if len(a.Requests) == 0 {
		a.Requests = nil
	}
	if a.RunningContainers == 0 {
		a.AllocatedGPUs = 0
	} else if riEnd > riStart && !riNull {
		if g, ok := allocatedGPUs(s.b[riStart:riEnd]); ok {
			a.AllocatedGPUs = g
		}
	}
	if tags != "" {
		a.Tags = strings.Split(tags, ",")
	}
	slices.SortFunc(a.Requests, func(x, y Request) int {
		return cmp.Or(cmp.Compare(x.Priority, y.Priority), cmp.Compare(x.AllocationRequestID, y.AllocationRequestID))
	})
	return a, true
}

// allocatedGPUs sums yarn.io/gpu over an app resourceInfo's partitions;
// false when it does not decode (the app's GPUs are then unknown).
func allocatedGPUs(b []byte) (int, bool) {
	s := &scanner{b: b}
	gpus := 0
	s.object(func() {
		if string(s.key) != "resourceusagesbypartition" {
			s.skip()
			return
		}
		gpus = 0
		s.each(func() {
			var g int64
			s.object(func() {
				switch string(s.key) {
				case "used":
					_, _, g, _, _ = s.resource(GPUResource)
				default:
					s.skip()
				}
			})
			gpus += int(g)
		})
	})
	if s.end() != nil {
		return 0, false
	}
	return gpus, true
}

// request decodes one ResourceRequest, and whether it is an ANY request
// for GPUs with containers pending.
func (s *scanner) request() (Request, bool) {
	var (
		r          Request
		name       string
		gpus       int64
		containers int64
	)
	s.object(func() {
		switch string(s.key) {
		case "priority":
			if s.ws() == '{' {
				r.Priority = 0
				s.object(func() {
					if string(s.key) == "priority" {
						r.Priority = int32(s.flexInt())
					} else {
						s.skip()
					}
				})
			} else {
				r.Priority = int32(s.flexInt())
			}
		case "allocationrequestid":
			r.AllocationRequestID = s.flexInt()
		case "resourcename":
			name = s.str()
		case "capability":
			r.MemoryMB, r.VCores, gpus, _, _ = s.resource(GPUResource)
		case "numcontainers":
			containers = s.flexInt()
		case "relaxlocality":
			r.RelaxLocality = s.boolean()
		case "nodelabelexpression":
			r.NodeLabel = s.str()
		case "executiontyperequest":
			r.ExecutionType = ""
			s.object(func() {
				if string(s.key) == "executiontype" {
					r.ExecutionType = s.str()
				} else {
					s.skip()
				}
			})
		default:
			s.skip()
		}
	})
	if name != AnyResource || containers <= 0 || gpus <= 0 {
		return Request{}, false
	}
	r.Containers, r.GPUsPerContainer = int(containers), int(gpus)
	return r, true
}

// nodesAnswer is GET PathNodes decoded into Nodes (in host order, one per
// host); present is false when the answer has no nodes element.
type nodesAnswer struct {
	present bool
	nodes   []Node
}

// decodeAnswer decodes a whole body.
func (r *nodesAnswer) decodeAnswer(b []byte) error { return r.decode(&scanner{b: b}) }

func (r *nodesAnswer) decode(s *scanner) error {
	in := interner{}
	*r = nodesAnswer{}
	s.object(func() {
		if string(s.key) != "nodes" {
			s.skip()
			return
		}
		if s.null() {
			r.present, r.nodes = false, nil
			return
		}
		r.present, r.nodes = true, r.nodes[:0]
		s.object(func() {
			if string(s.key) != "node" {
				s.skip()
				return
			}
			r.nodes = r.nodes[:0]
			s.each(func() {
				s.release()
				r.nodes = append(r.nodes, s.node(&in))
			})
		})
	})
	if err := s.end(); err != nil {
		return err
	}
	if !r.present {
		r.nodes = nil
		return nil
	}
	if r.nodes == nil {
		r.nodes = []Node{}
	}
	r.nodes = finishNodes(r.nodes)
	return nil
}

// node decodes one NodeInfo as convertNodes (reference_test.go) maps it.
func (s *scanner) node(in *interner) Node {
	var (
		n                Node
		hostName         string
		used, avail, tot int64
		totalOK          bool
	)
	s.object(func() {
		switch string(s.key) {
		case "rack":
			n.Rack = in.str(s)
		case "state":
			n.State = in.str(s)
		case "id":
			n.ID = s.str()
		case "nodehostname":
			hostName = s.str()
		case "nodehttpaddress":
			n.HTTPAddress = s.str()
		case "lasthealthupdate":
			n.LastHealth = millis(flexInt(s.flexInt()))
		case "version":
			n.Version = in.str(s)
		case "healthreport":
			n.HealthReport = in.str(s)
		case "numcontainers":
			n.Containers = int(s.flexInt())
		case "usedmemorymb":
			n.UsedMemoryMB = s.flexInt()
		case "usedvirtualcores":
			n.UsedVCores = s.flexInt()
		case "nodelabels":
			n.Labels = n.Labels[:0]
			s.each(func() {
				if l := in.str(s); l != "" {
					n.Labels = append(n.Labels, l)
				}
			})
		case "totalresource":
			_, _, tot, _, totalOK = s.resource(GPUResource)
		case "usedresource":
			_, _, used, _, _ = s.resource(GPUResource)
		case "availableresource":
			_, _, avail, _, _ = s.resource(GPUResource)
		default:
			s.skip()
		}
	})
	if !totalOK {
		// RMs before 3.2 have no totalResource.
		tot = used + avail
	}
	if len(n.Labels) == 0 {
		n.Labels = nil
	}
	n.Host = hostName
	if n.Host == "" {
		n.Host, _, _ = strings.Cut(n.ID, ":")
	}
	n.GPUsTotal, n.GPUsUsed, n.GPUsAvailable = int(tot), int(used), int(avail)
	return n
}

// containersAnswer is an attempt's containers answer (ContainersInfo,
// containersResponse in reference_test.go) decoded into the live
// Containers: Hadoop 3.3 and 3.5 render it without its root element,
// {"container": [...]}, the wrapped {"containers": {"container": ...}} is
// read too.
type containersAnswer struct {
	containers []Container
}

// decodeAnswer decodes a whole body.
func (r *containersAnswer) decodeAnswer(b []byte) error { return r.decode(&scanner{b: b}) }

func (r *containersAnswer) decode(s *scanner) error {
	r.containers = nil
	var bare, wrapped []Container
	s.object(func() {
		switch string(s.key) {
		case "container":
			bare = bare[:0]
			s.each(func() {
				s.release()
				if ct, ok := s.container(); ok {
					bare = append(bare, ct)
				}
			})
		case "containers":
			wrapped = wrapped[:0]
			s.object(func() {
				if string(s.key) != "container" {
					s.skip()
					return
				}
				wrapped = wrapped[:0]
				s.each(func() {
					s.release()
					if ct, ok := s.container(); ok {
						wrapped = append(wrapped, ct)
					}
				})
			})
		default:
			s.skip()
		}
	})
	if err := s.end(); err != nil {
		return err
	}
	r.containers = make([]Container, 0, len(bare)+len(wrapped))
	r.containers = append(append(r.containers, bare...), wrapped...)
	return nil
}

// container decodes one ContainerInfo as convertContainers maps it, and
// whether it is live (not COMPLETE).
func (s *scanner) container() (Container, bool) {
	var (
		ct             Container
		node, assigned string
	)
	s.object(func() {
		switch string(s.key) {
		case "containerid":
			ct.ID = s.str()
		case "allocatedmb":
			ct.MemoryMB = s.flexInt()
		case "allocatedvcores":
			ct.VCores = s.flexInt()
		case "assignednodeid":
			assigned = s.str()
		case "priority":
			ct.Priority = int32(s.flexInt())
		case "startedtime":
			ct.Started = millis(flexInt(s.flexInt()))
		case "containerstate":
			ct.State = s.str()
		case "nodeid":
			node = s.str()
		case "allocatedresources":
			ct.GPUs = 0
			s.object(func() {
				if string(s.key) != "entry" {
					s.skip()
					return
				}
				ct.GPUs = 0
				s.each(func() {
					var k string
					var v int64
					s.object(func() {
						switch string(s.key) {
						case "key":
							k = s.str()
						case "value":
							v = s.flexInt()
						default:
							s.skip()
						}
					})
					if k == GPUResource {
						ct.GPUs = int(v)
					}
				})
			})
		default:
			s.skip()
		}
	})
	if ct.State == "COMPLETE" {
		return Container{}, false
	}
	if node == "" {
		node = assigned
	}
	ct.NodeID = node
	ct.Host, _, _ = strings.Cut(node, ":")
	return ct, true
}
