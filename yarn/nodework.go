package yarn

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Every container counts. The RM is asked for the containers of the apps
// that hold GPUs only (containers.go): listing every app's would cost two
// calls per app on a large cluster. A GPU node may run containers of other
// apps too (a Spark job's CPU executors, the 0-GPU ApplicationMaster of a
// GPU app not yet holding GPUs), and each of them dies with the node as
// surely. So the RM's own per-node figures (numContainers, usedMemoryMB,
// usedVirtualCores) are compared with the containers listed on each GPU
// node; where they differ, that node's NodeManager is read
// (/ws/v1/node/containers), which names every container it runs. What the
// NodeManager explains is added to its app (or to Observation.Others);
// what still differs becomes work of unknown size in BrokerNodes, never
// idle. A steady cluster whose GPU nodes run only GPU apps' containers
// makes no extra call; a node that runs others is read again only when
// its figures change (or its answer has been trusted for
// containerRefresh), and a node whose figures its NodeManager did not
// explain is read again on every poll.

// nodeUse is what the RM says a node holds, the key of a cached answer.
type nodeUse struct {
	containers int
	mb, vcores int64
	gpus       int
}

func useOf(n *Node) nodeUse {
	return nodeUse{containers: n.Containers, mb: n.UsedMemoryMB, vcores: n.UsedVCores, gpus: n.GPUsUsed}
}

// gpuNode reports whether n is a node the broker manages work on: one
// with GPUs. Other nodes' containers are never listed, so they are not
// cross-checked either.
func gpuNode(n *Node) bool { return n.GPUsTotal > 0 || n.GPUsUsed > 0 }

// listedUse sums the containers listed on each host.
func listedUse(obs *Observation) map[string]nodeUse {
	out := map[string]nodeUse{}
	add := func(ct *Container) {
		u := out[ct.Host]
		u.containers++
		u.mb += ct.MemoryMB
		u.vcores += ct.VCores
		u.gpus += max(ct.GPUs, 0)
		out[ct.Host] = u
	}
	for i := range obs.Apps {
		for j := range obs.Apps[i].Containers {
			add(&obs.Apps[i].Containers[j])
		}
	}
	for i := range obs.Others {
		add(&obs.Others[i])
	}
	return out
}

// explained reports whether the listed containers account for all the RM
// says the node holds.
func explained(n *Node, l nodeUse) bool {
	return l.containers >= n.Containers && l.mb >= n.UsedMemoryMB && l.vcores >= n.UsedVCores
}

// completeNodes adds to obs the containers the NodeManagers of GPU nodes
// run beyond those listed, where the RM's per-node figures say there are
// some. A NodeManager that does not answer leaves its node's figures
// unexplained: BrokerNodes then shows unknown work there (that node is
// not idle) instead of making the whole observation stale.
func (c *Client) completeNodes(ctx context.Context, obs *Observation, now time.Time) {
	listed := listedUse(obs)
	results := make([][]nmContainer, len(obs.Nodes))
	var fetch []int
	keep := map[string]bool{}
	c.others.mu.Lock()
	if c.others.nodes == nil {
		c.others.nodes = map[string]*nmEntry{}
	}
	for i := range obs.Nodes {
		n := &obs.Nodes[i]
		if !gpuNode(n) || !liveNodeState(n.State) || explained(n, listed[n.Host]) {
			continue
		}
		keep[n.Host] = true
		if e := c.others.nodes[n.Host]; e != nil && e.use == useOf(n) && now.Sub(e.fetched) < trustFor(n.Host) {
			results[i] = e.containers
			continue
		}
		fetch = append(fetch, i)
	}
	for h := range c.others.nodes {
		if !keep[h] {
			delete(c.others.nodes, h)
		}
	}
	c.others.mu.Unlock()
	fetched := make([]bool, len(obs.Nodes))
	_ = c.each(ctx, len(fetch), func(ctx context.Context, k int) error {
		i := fetch[k]
		n := &obs.Nodes[i]
		cs, err := c.nodeContainers(ctx, n, nil)
		if err != nil {
			c.cfg.Logger.WarnContext(ctx, "yarn nodemanager does not answer; its containers beyond the listed ones are unknown work", "node", n.Host, "err", err)
			return nil
		}
		results[i], fetched[i] = cs, true
		return nil
	})

	appIdx := make(map[string]int, len(obs.Apps))
	for i := range obs.Apps {
		appIdx[obs.Apps[i].ID] = i
	}
	if len(fetch) == 0 && !slices.ContainsFunc(results, func(cs []nmContainer) bool { return len(cs) > 0 }) {
		return
	}
	known := map[string]bool{}
	for _, a := range obs.Apps {
		for _, ct := range a.Containers {
			known[ct.ID] = true
		}
	}
	for _, ct := range obs.Others {
		known[ct.ID] = true
	}
	touched := map[int]bool{}
	for i := range obs.Nodes {
		n := &obs.Nodes[i]
		if len(results[i]) == 0 && !fetched[i] {
			continue
		}
		l := listed[n.Host]
		for _, ct := range results[i] {
			if known[ct.ID] {
				continue
			}
			known[ct.ID] = true
			l.containers++
			l.mb += ct.MemoryMB
			l.vcores += ct.VCores
			if k, ok := appIdx[ct.app]; ok {
				a := &obs.Apps[k]
				ct.AM = a.AMContainer == ct.ID || a.AMContainer == "" && firstOfAttempt(ct.ID)
				a.Containers = append(a.Containers, ct.Container)
				touched[k] = true
				continue
			}
			ct.Container.App = ct.app
			ct.AM = firstOfAttempt(ct.ID)
			obs.Others = append(obs.Others, ct.Container)
		}
		if fetched[i] {
			// IMPORTANT: an answer is reused only when it explained the
			// node: a container the RM has allocated and the NodeManager
			// not yet launched leaves the figures apart, and the next
			// poll must read the NodeManager again rather than trust an
			// answer that predates the launch.
			c.others.mu.Lock()
			if explained(n, l) {
				c.others.nodes[n.Host] = &nmEntry{use: useOf(n), containers: results[i], fetched: now}
			} else {
				delete(c.others.nodes, n.Host)
			}
			c.others.mu.Unlock()
		}
	}
	for k := range touched {
		slices.SortFunc(obs.Apps[k].Containers, func(x, y Container) int { return cmp.Compare(x.ID, y.ID) })
	}
	slices.SortFunc(obs.Others, func(x, y Container) int { return cmp.Compare(x.ID, y.ID) })
}

// firstOfAttempt reports whether container id is the first of its app
// attempt (container_..._<attempt>_000001): the RM allocates an attempt's
// ApplicationMaster first, so that is its AM unless the AM is unmanaged.
// Taking it for an AM errs on the safe side: an AM is never a victim of
// its own and stands for its whole application.
func firstOfAttempt(id string) bool {
	i := strings.LastIndexByte(id, '_')
	if i < 0 {
		return false
	}
	n, err := strconv.Atoi(id[i+1:])
	return err == nil && n == 1
}
