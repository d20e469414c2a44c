package yarnsim

import (
	"bufio"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// AdminConfig configures an AdminServer.
type AdminConfig struct {
	// ExcludePath is the RM's yarn.resourcemanager.nodes.exclude-path,
	// read at every refreshNodes: XML when it ends in .xml, else one host
	// a line. A missing file excludes nothing.
	ExcludePath string
	// DefaultTimeout is the graceful decommission timeout of hosts without
	// one (yarn.resourcemanager.nodemanager-graceful-decommission-timeout-secs,
	// default 3600s).
	DefaultTimeout time.Duration
	// Tick is how often decommissioning nodes are checked, as the RM does
	// on NodeManager heartbeats (default 100ms).
	Tick time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// AdminServer serves the RM admin protocol (Hadoop IPC, RPC v9 with
// protobuf) for a Sim: refreshNodes with the exclude file (NORMAL,
// GRACEFUL with per-host or per-call timeouts, FORCEFUL) and
// updateNodeResource, and the node-label calls (addToClusterNodeLabels,
// removeFromClusterNodeLabels, replaceLabelsOnNode; labels.go). Like the RM, a gracefully decommissioned node stays
// DECOMMISSIONING until its containers are gone and every app that ran one
// there has ended, or its timeout ends (its containers are then lost); a
// graceful refresh with another timeout changes it, counted from the
// decommission's start, a DECOMMISSIONED NodeManager stays down until
// RestartNodeManager (nodemanager.go), and a host taken out of the file and
// refreshed while DECOMMISSIONING is RUNNING again. The frames are decoded here, apart
// from the client in yarn/rmadmin, so each checks the other.
type AdminServer struct {
	sim     *Sim
	cfg     AdminConfig
	mu      sync.Mutex
	ln      net.Listener
	standby bool
	// until is the graceful deadline of each decommissioning host (zero:
	// none), start when its decommission began and timeout what it was
	// given: a graceful refresh with another timeout moves until, counted
	// from start, as the RM's DecommissioningNodesWatcher does.
	until   map[string]time.Time
	start   map[string]time.Time
	timeout map[string]time.Duration
	// runs are RunOn apps by host: they end when their container does.
	runs map[string][]string
	// registered is what each NodeManager registered with, kept when
	// updateNodeResource overrides it; a restart registers it again.
	registered map[string]NodeSpec
	conns      sync.WaitGroup
	stop       chan struct{}
}

// NewAdminServer returns an admin server for sim; Start listens.
func NewAdminServer(sim *Sim, cfg AdminConfig) (*AdminServer, error) {
	if cfg.ExcludePath == "" {
		return nil, errors.New("yarnsim admin: ExcludePath must be set")
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = time.Hour
	}
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &AdminServer{sim: sim, cfg: cfg, until: map[string]time.Time{}, start: map[string]time.Time{},
		timeout: map[string]time.Duration{}, runs: map[string][]string{},
		registered: map[string]NodeSpec{}, stop: make(chan struct{})}, nil
}

// Start listens on addr (host:port, port 0 for any) and returns the
// address bound.
func (a *AdminServer) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("yarnsim admin: listen %s: %w", addr, err)
	}
	a.mu.Lock()
	a.ln = ln
	a.mu.Unlock()
	go a.tickLoop()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.conns.Add(1)
			go func() {
				defer a.conns.Done()
				defer c.Close()
				a.serveConn(c)
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// Close stops listening and waits for open connections.
func (a *AdminServer) Close() error {
	a.mu.Lock()
	ln := a.ln
	a.ln = nil
	a.mu.Unlock()
	if ln == nil {
		return nil
	}
	close(a.stop)
	err := ln.Close()
	a.conns.Wait()
	return err
}

// SetStandby makes every call fail with a StandbyException, as a standby
// RM of an HA pair answers.
func (a *AdminServer) SetStandby(standby bool) {
	a.mu.Lock()
	a.standby = standby
	a.mu.Unlock()
}

// RunOn starts an app in queue with one container of gpus GPUs placed on
// host, which finishes after d; the app ends with its container, also
// when a decommission cuts it off.
func (a *AdminServer) RunOn(queue, host string, gpus int, d time.Duration) (string, error) {
	id, _, err := a.place(placeApp{queue: queue, d: d, oneShot: true}, Placement{Host: host, GPUs: gpus})
	return id, err
}

// Placement is one container of Spread: its host and GPUs; a Trap
// container survives GRACEFUL_SHUTDOWN (a process that traps SIGTERM), so
// only FORCEFUL_SHUTDOWN stops it early; the simulator gives the trap to
// all of its app's containers.
type Placement struct {
	Host string
	GPUs int
	Trap bool
}

// Spread starts an app in queue with one container per placement, on
// its host, as the test launcher's spread does: the app finishes after
// d; a container that ends is not asked for again, and the app runs on
// with the others. It returns the app and its container ids in order.
func (a *AdminServer) Spread(queue string, d time.Duration, ps ...Placement) (string, []string, error) {
	return a.place(placeApp{queue: queue, d: d}, ps...)
}

// Restartable starts an app in queue tagged tag with one container on
// p.Host, as the test launcher's restartable does: the app finishes after
// d, and a container that ends early is asked for again, anywhere in the
// default partition (its AM resumes from its checkpoint). It returns the
// app and its first container.
func (a *AdminServer) Restartable(queue string, d time.Duration, tag string, p Placement) (string, string, error) {
	id, ids, err := a.place(placeApp{queue: queue, d: d, tags: []string{tag}, reask: true}, p)
	if err != nil {
		return "", "", err
	}
	return id, ids[0], nil
}

// placeApp is what place starts: an app in queue that finishes after d;
// oneShot ends it with its container, reask asks again for a container
// that ended (else it is not asked for again).
type placeApp struct {
	queue          string
	d              time.Duration
	tags           []string
	oneShot, reask bool
}

func (a *AdminServer) place(pa placeApp, ps ...Placement) (string, []string, error) {
	queue, d, oneShot := pa.queue, pa.d, pa.oneShot
	reqs := make([]RequestSpec, len(ps))
	for i, p := range ps {
		reqs[i] = RequestSpec{Priority: int32(1 + i), Containers: 0, GPUs: p.GPUs}
	}
	id, err := a.sim.Submit(AppSpec{Queue: queue, Tags: pa.tags, Requests: reqs})
	if err != nil {
		return "", nil, err
	}
	s := a.sim
	s.mu.Lock()
	ap := s.appByID[id]
	need := map[string]int{}
	for _, p := range ps {
		need[p.Host] += p.GPUs
	}
	for h, g := range need {
		if n := s.nodes[h]; n == nil || n.state != "RUNNING" || n.freeGPUs() < g {
			s.mu.Unlock()
			_ = s.Finish(id)
			return "", nil, fmt.Errorf("yarnsim: run on %s: node not RUNNING with %d GPUs free", h, g)
		}
	}
	s.rules.init()
	ids := make([]string, len(ps))
	for i, p := range ps {
		n := s.nodes[p.Host]
		r := ap.requests[i].spec
		n.usedGPUs += p.GPUs
		n.usedMem += r.MemoryMB
		n.usedVCores += r.VCores
		n.containers++
		if n.allocs[ap] == nil {
			n.allocs[ap] = map[int]int{}
		}
		n.allocs[ap][i]++
		ids[i] = s.newContainer(ap, n, i).id
		s.freeByLabel[label(n.spec.Labels)] -= p.GPUs
		ap.running++
		ap.usedGPUs += p.GPUs
		ap.usedMem += r.MemoryMB
		ap.usedCores += r.VCores
		if p.Trap {
			s.rules.ignoreTERM[id] = true
		}
	}
	switch {
	case oneShot:
		s.rules.oneShot[id] = true // the app ends with its container
	case !pa.reask:
		s.rules.noReask[id] = true
	}
	s.live = nil
	s.mu.Unlock()
	if oneShot {
		// A NodeManager that stops ends the app with its container; a
		// Spread app loses only the containers on that host.
		a.mu.Lock()
		for h := range need {
			a.runs[h] = append(a.runs[h], id)
		}
		a.mu.Unlock()
	}
	time.AfterFunc(d, func() { _ = s.Finish(id) })
	return id, ids, nil
}

// tickLoop ends graceful decommissions whose nodes are empty or whose
// timeout has passed.
func (a *AdminServer) tickLoop() {
	t := time.NewTicker(a.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.progress()
		}
	}
}

func (a *AdminServer) progress() {
	now := a.cfg.Now()
	// IMPORTANT: the sim's lock is taken before a.mu, as refreshNodes and
	// updateNodeResource do; never the other way round.
	a.sim.mu.Lock()
	a.mu.Lock()
	var done []string
	for host, until := range a.until {
		n := a.sim.nodes[host]
		timedOut := !until.IsZero() && !now.Before(until) // zero: an infinite timeout
		// DecommissioningNodesWatcher: READY once no container runs and no
		// app that ran one there still runs (WAIT_APP), or at the timeout.
		if n == nil || n.state != "DECOMMISSIONING" || n.containers == 0 && len(n.ran) == 0 || timedOut {
			done = append(done, host)
			a.forget(host)
		}
	}
	a.mu.Unlock()
	a.sim.mu.Unlock()
	for _, host := range done {
		a.decommissioned(host)
	}
}

// decommissioned sets host DECOMMISSIONED if it is decommissioning or
// live, ending the RunOn apps whose containers it cuts off.
func (a *AdminServer) decommissioned(host string) {
	a.sim.mu.Lock()
	n := a.sim.nodes[host]
	ok := n != nil && (n.state == "DECOMMISSIONING" || n.state == "RUNNING" || n.state == "UNHEALTHY")
	a.sim.mu.Unlock()
	if !ok {
		return
	}
	a.mu.Lock()
	runs := a.runs[host]
	delete(a.runs, host)
	a.mu.Unlock()
	for _, id := range runs {
		_ = a.sim.Finish(id)
	}
	_ = a.sim.SetNodeState(host, "DECOMMISSIONED")
}

// readExclude returns the excluded hosts with their timeouts (0: none).
func (a *AdminServer) readExclude() (map[string]time.Duration, error) {
	b, err := os.ReadFile(a.cfg.ExcludePath)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]time.Duration{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	if !strings.HasSuffix(a.cfg.ExcludePath, ".xml") {
		for _, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			for _, h := range strings.Fields(line) {
				out[h] = 0
			}
		}
		return out, nil
	}
	if strings.TrimSpace(string(b)) == "" {
		return out, nil
	}
	var doc struct {
		Hosts []struct {
			Name    string `xml:"name"`
			Timeout string `xml:"timeout"`
		} `xml:"host"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", a.cfg.ExcludePath, err)
	}
	for _, h := range doc.Hosts {
		var d time.Duration
		if t := strings.TrimSpace(h.Timeout); t != "" {
			secs, err := strconv.Atoi(t)
			if err != nil {
				return nil, fmt.Errorf("parse %s: host %s: timeout %q: %w", a.cfg.ExcludePath, h.Name, t, err)
			}
			d = time.Duration(secs) * time.Second
		}
		out[strings.TrimSpace(h.Name)] = d
	}
	return out, nil
}

// refreshNodes applies the exclude file as the RM's NodesListManager does.
func (a *AdminServer) refreshNodes(typ int, timeout time.Duration, hasTimeout bool) error {
	ex, err := a.readExclude()
	if err != nil {
		return err
	}
	type change struct{ host, state string }
	var changes []change
	var now []string
	a.sim.mu.Lock()
	for host, n := range a.sim.nodes {
		t, excluded := ex[host]
		d := a.cfg.DefaultTimeout // the graceful timeout: the host's own, else the call's
		if t != 0 {
			d = t
		} else if hasTimeout {
			d = timeout
		}
		switch {
		case excluded && (n.state == "RUNNING" || n.state == "UNHEALTHY" || n.state == "NEW"):
			if typ == 2 { // GRACEFUL
				changes = append(changes, change{host, "DECOMMISSIONING"})
				a.mu.Lock()
				a.start[host] = a.cfg.Now()
				a.setTimeout(host, d)
				a.mu.Unlock()
			} else {
				now = append(now, host)
			}
		case excluded && n.state == "DECOMMISSIONING" && typ == 2:
			// NodesListManager sends a DECOMMISSIONING node whose timeout
			// differs a new GRACEFUL_DECOMMISSION; RMNodeImpl takes the new
			// timeout, still counted from the decommission's start.
			a.mu.Lock()
			if _, ok := a.start[host]; ok && a.timeout[host] != d {
				a.setTimeout(host, d)
			}
			a.mu.Unlock()
		case excluded && n.state == "DECOMMISSIONING":
			now = append(now, host)
		case !excluded && n.state == "DECOMMISSIONING":
			changes = append(changes, change{host, "RUNNING"})
			a.mu.Lock()
			a.forget(host)
			a.mu.Unlock()
		}
	}
	a.sim.mu.Unlock()
	for _, c := range changes {
		if err := a.sim.SetNodeState(c.host, c.state); err != nil {
			return err
		}
	}
	for _, h := range now {
		a.decommissioned(h)
	}
	return nil
}

// setTimeout gives decommissioning host the graceful timeout d (negative:
// infinite) from its start. Callers hold a.mu.
func (a *AdminServer) setTimeout(host string, d time.Duration) {
	a.timeout[host] = d
	if d < 0 {
		a.until[host] = time.Time{}
		return
	}
	a.until[host] = a.start[host].Add(d)
}

// forget drops a host's decommission. Callers hold a.mu.
func (a *AdminServer) forget(host string) {
	delete(a.until, host)
	delete(a.start, host)
	delete(a.timeout, host)
}

// updateNodeResource sets a node's total GPUs (and memory, vcores).
func (a *AdminServer) updateNodeResource(host string, mem, vcores int64, gpus int) error {
	s := a.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[host]
	if n == nil {
		return fmt.Errorf("node %s is not found", host)
	}
	if gpus < 0 {
		// As AddNode refuses: a negative total breaks the free-GPU books.
		return fmt.Errorf("node %s: resource yarn.io/gpu must not be negative, got %d", host, gpus)
	}
	a.mu.Lock()
	if _, ok := a.registered[host]; !ok {
		a.registered[host] = n.spec
	}
	a.mu.Unlock()
	l := label(n.spec.Labels)
	if n.state == "RUNNING" {
		s.freeByLabel[l] -= n.freeGPUs()
	}
	n.spec.GPUs = gpus
	if mem > 0 {
		n.spec.MemoryMB = mem
	}
	if vcores > 0 {
		n.spec.VCores = vcores
	}
	if n.state == "RUNNING" {
		s.freeByLabel[l] += n.freeGPUs()
	}
	s.live = nil
	s.scheduleAll()
	return nil
}

// Hadoop IPC serving.

const (
	adminProtocol   = "org.apache.hadoop.yarn.server.api.ResourceManagerAdministrationProtocolPB"
	classStandby    = "org.apache.hadoop.ipc.StandbyException"
	classNoMethod   = "org.apache.hadoop.ipc.RpcNoSuchMethodException"
	classNoProtocol = "org.apache.hadoop.ipc.RpcNoSuchProtocolException"
	classYarn       = "org.apache.hadoop.yarn.exceptions.YarnException"
	classFatal      = "org.apache.hadoop.ipc.IpcException"
)

func (a *AdminServer) serveConn(c net.Conn) {
	r := bufio.NewReader(c)
	var pre [7]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return
	}
	if string(pre[:4]) != "hrpc" || pre[4] != 9 || pre[6] != 0 {
		// A wrong version or SASL: the server answers one fatal header.
		_, _ = c.Write(responseFrame(0xffffffff, 2, classFatal, "gpubroker yarnsim speaks RPC v9 with SIMPLE auth only", nil, nil))
		return
	}
	protocol := ""
	for {
		f, err := readSimFrame(r)
		if err != nil {
			return
		}
		hdr, rest, ok := consumeDelimited(f)
		if !ok {
			return
		}
		callID, clientID := int64(0), []byte(nil)
		_ = walk(hdr, func(num protowire.Number, v uint64, b []byte) {
			switch num {
			case 3:
				callID = protowire.DecodeZigZag(v) // sint32
			case 4:
				clientID = b
			}
		})
		if callID == -3 { // connection context
			ctx, _, ok := consumeDelimited(rest)
			if !ok {
				return
			}
			_ = walk(ctx, func(num protowire.Number, _ uint64, b []byte) {
				if num == 3 {
					protocol = string(b)
				}
			})
			continue
		}
		rh, body, ok := consumeDelimited(rest)
		if !ok {
			return
		}
		method, declared := "", ""
		_ = walk(rh, func(num protowire.Number, _ uint64, b []byte) {
			switch num {
			case 1:
				method = string(b)
			case 2:
				declared = string(b)
			}
		})
		req, _, _ := consumeDelimited(body)
		class, msg := a.dispatch(protocol, declared, method, req)
		status := uint64(0)
		if class != "" {
			status = 1
		}
		var out []byte
		if status == 0 {
			out = responseFrame(uint32(callID), 0, "", "", clientID, []byte{})
		} else {
			out = responseFrame(uint32(callID), 1, class, msg, clientID, nil)
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// dispatch runs one call and returns the exception class and message of a
// failure ("" on success).
func (a *AdminServer) dispatch(protocol, declared, method string, req []byte) (string, string) {
	a.mu.Lock()
	standby := a.standby
	a.mu.Unlock()
	if protocol != adminProtocol || declared != adminProtocol {
		return classNoProtocol, fmt.Sprintf("Unknown protocol: %s", declared)
	}
	if standby {
		return classStandby, "Operation category WRITE is not supported in state standby"
	}
	switch method {
	case "refreshNodes":
		typ, timeout, hasTimeout := 1, time.Duration(0), false
		_ = walk(req, func(num protowire.Number, v uint64, _ []byte) {
			switch num {
			case 1:
				typ = int(v)
			case 2:
				timeout, hasTimeout = time.Duration(int32(v))*time.Second, true
			}
		})
		if err := a.refreshNodes(typ, timeout, hasTimeout); err != nil {
			return classYarn, err.Error()
		}
		return "", ""
	case "updateNodeResource":
		var errs []error
		_ = walk(req, func(num protowire.Number, _ uint64, entry []byte) {
			if num != 1 {
				return
			}
			host, mem, vcores, gpus := "", int64(0), int64(0), 0
			_ = walk(entry, func(num protowire.Number, _ uint64, b []byte) {
				switch num {
				case 1: // NodeIdProto
					_ = walk(b, func(num protowire.Number, _ uint64, s []byte) {
						if num == 1 {
							host = string(s)
						}
					})
				case 2: // ResourceOptionProto
					_ = walk(b, func(num protowire.Number, _ uint64, res []byte) {
						if num != 1 {
							return
						}
						_ = walk(res, func(num protowire.Number, v uint64, info []byte) {
							switch num {
							case 1:
								mem = int64(v)
							case 2:
								vcores = int64(v)
							case 3:
								key, val := "", int64(0)
								_ = walk(info, func(num protowire.Number, v uint64, s []byte) {
									switch num {
									case 1:
										key = string(s)
									case 2:
										val = int64(v)
									}
								})
								if key == "yarn.io/gpu" {
									gpus = int(val)
								}
							}
						})
					})
				}
			})
			errs = append(errs, a.updateNodeResource(host, mem, vcores, gpus))
		})
		if err := errors.Join(errs...); err != nil {
			return classYarn, err.Error()
		}
		return "", ""
	case "addToClusterNodeLabels":
		var labels []ClusterLabel
		_ = walk(req, func(num protowire.Number, _ uint64, b []byte) {
			switch num {
			case 1: // deprecatedNodeLabels: names, exclusive by default
				labels = append(labels, ClusterLabel{Name: string(b), Exclusive: true})
			case 2: // NodeLabelProto
				l := ClusterLabel{Exclusive: true} // isExclusive defaults to true
				_ = walk(b, func(num protowire.Number, v uint64, s []byte) {
					switch num {
					case 1:
						l.Name = string(s)
					case 2:
						l.Exclusive = v != 0
					}
				})
				labels = append(labels, l)
			}
		})
		if err := a.sim.AddClusterLabels(labels); err != nil {
			return classYarn, err.Error()
		}
		return "", ""
	case "removeFromClusterNodeLabels":
		var names []string
		_ = walk(req, func(num protowire.Number, _ uint64, b []byte) {
			if num == 1 {
				names = append(names, string(b))
			}
		})
		if err := a.sim.RemoveClusterLabels(names); err != nil {
			return classYarn, err.Error()
		}
		return "", ""
	case "replaceLabelsOnNodes": // the service method; the request is ReplaceLabelsOnNode
		m, fail := map[string][]string{}, false
		_ = walk(req, func(num protowire.Number, v uint64, b []byte) {
			switch num {
			case 1: // NodeIdToLabelsProto
				host, port := "", uint64(0)
				var ls []string
				_ = walk(b, func(num protowire.Number, _ uint64, s []byte) {
					switch num {
					case 1: // NodeIdProto
						_ = walk(s, func(num protowire.Number, v uint64, h []byte) {
							switch num {
							case 1:
								host = string(h)
							case 2:
								port = v
							}
						})
					case 2:
						ls = append(ls, string(s))
					}
				})
				m[host+":"+strconv.Itoa(int(int32(port)))] = ls
			case 2:
				fail = v != 0
			}
		})
		if err := a.sim.ReplaceNodeLabels(m, fail); err != nil {
			return classYarn, err.Error()
		}
		return "", ""
	}
	return classNoMethod, fmt.Sprintf("Unknown method %s called on %s protocol.", method, adminProtocol)
}

func readSimFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func consumeDelimited(b []byte) ([]byte, []byte, bool) {
	m, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, nil, false
	}
	return m, b[n:], true
}

// walk visits the varint and length-delimited fields of a message.
func walk(b []byte, f func(num protowire.Number, v uint64, s []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		switch typ {
		case protowire.VarintType:
			v, _ := protowire.ConsumeVarint(b)
			f(num, v, nil)
		case protowire.BytesType:
			s, _ := protowire.ConsumeBytes(b)
			f(num, 0, s)
		}
		b = b[m:]
	}
	return nil
}

// responseFrame builds an RpcResponseHeaderProto frame, with body (an
// empty response message) when body is not nil.
func responseFrame(callID uint32, status uint64, class, msg string, clientID, body []byte) []byte {
	var h []byte
	h = protowire.AppendTag(h, 1, protowire.VarintType)
	h = protowire.AppendVarint(h, uint64(callID))
	h = protowire.AppendTag(h, 2, protowire.VarintType)
	h = protowire.AppendVarint(h, status)
	h = protowire.AppendTag(h, 3, protowire.VarintType)
	h = protowire.AppendVarint(h, 9)
	if class != "" {
		h = protowire.AppendTag(h, 4, protowire.BytesType)
		h = protowire.AppendString(h, class)
		h = protowire.AppendTag(h, 5, protowire.BytesType)
		h = protowire.AppendString(h, msg)
		h = protowire.AppendTag(h, 6, protowire.VarintType)
		h = protowire.AppendVarint(h, 2) // ERROR_APPLICATION
	}
	if clientID != nil {
		h = protowire.AppendTag(h, 7, protowire.BytesType)
		h = protowire.AppendBytes(h, clientID)
	}
	var payload []byte
	payload = protowire.AppendBytes(payload, h)
	if body != nil {
		payload = protowire.AppendBytes(payload, body)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}
