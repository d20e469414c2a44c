package yarn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The NodeManager fallback: an RM that does not serve the containers of an
// app attempt (it answers that path with a plain 404 page, not its own
// NotFoundException) leaves the containers to be read from the
// NodeManagers that run them: /ws/v1/node/containers on every node with
// GPUs in use, and /ws/v1/node/resources/yarn.io%2Fgpu (the GPU resource
// plugin) for which container holds which GPU. The NodeManager gives no
// start time and no container priority: such work is of unknown age, the
// worst case for victim choice.

// NodeManager REST paths.
const (
	PathNMContainers = "/ws/v1/node/containers"
	PathNMGPUs       = "/ws/v1/node/resources/yarn.io%2Fgpu"
)

// errNoAttemptContainers marks an RM without the app-attempt containers
// endpoint.
var errNoAttemptContainers = errors.New("this RM does not serve the containers of an app attempt (Hadoop 3.3 and 3.5 do)")

// nmEntry is a node's cached container list.
type nmEntry struct {
	fp         nodeAllocation
	use        nodeUse // the key of Client.others' entries
	containers []nmContainer
	fetched    time.Time
}

type nodeAllocation struct{ gpus, containers int }

type nmContainer struct {
	app string
	Container
}

// nmCache holds the NodeManager answers between polls.
type nmCache struct {
	mu    sync.Mutex
	nodes map[string]*nmEntry
}

// terminalNMStates are NodeManager container states of work that ended.
var terminalNMStates = map[string]bool{
	"DONE": true, "EXITED_WITH_SUCCESS": true, "EXITED_WITH_FAILURE": true,
	"CONTAINER_CLEANEDUP_AFTER_KILL": true, "LOCALIZATION_FAILED": true, "CONTAINER_RESOURCES_CLEANINGUP": true,
}

// observeNodeManagers fills the containers of the GPU apps from the
// NodeManagers, and each app's attempt and AM container from the RM.
func (c *Client) observeNodeManagers(ctx context.Context, obs *Observation, now time.Time) error {
	apps := map[string]*App{}
	var attempts []*App
	c.cache.mu.Lock()
	if c.cache.apps == nil {
		c.cache.apps = map[string]*appContainers{}
	}
	for i := range obs.Apps {
		a := &obs.Apps[i]
		a.Containers = nil
		if !a.HoldsGPUs() {
			continue
		}
		apps[a.ID] = a
		if e := c.cache.apps[a.ID]; e != nil && e.fp == allocationOf(a) && now.Sub(e.fetched) < trustFor(a.ID) {
			a.Attempt, a.AMContainer = e.attempt, e.am
		} else {
			attempts = append(attempts, a)
		}
	}
	for id := range c.cache.apps {
		if apps[id] == nil {
			delete(c.cache.apps, id)
		}
	}
	c.cache.mu.Unlock()
	if err := c.each(ctx, len(attempts), func(ctx context.Context, i int) error {
		a := attempts[i]
		attempt, am, err := c.currentAttempt(ctx, a.ID)
		if notFound(err) {
			attempt, am, err = "", "", nil
		}
		if err != nil {
			return err
		}
		a.Attempt, a.AMContainer = attempt, am
		c.cache.mu.Lock()
		c.cache.apps[a.ID] = &appContainers{attempt: attempt, am: am, fp: allocationOf(a), fetched: now}
		c.cache.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}

	live := map[string]bool{}
	c.nm.mu.Lock()
	if c.nm.nodes == nil {
		c.nm.nodes = map[string]*nmEntry{}
	}
	results := make([][]nmContainer, len(obs.Nodes))
	var fetch []int
	for i := range obs.Nodes {
		n := &obs.Nodes[i]
		if n.GPUsUsed == 0 || !liveNodeState(n.State) {
			continue
		}
		live[n.Host] = true
		fp := nodeAllocation{gpus: n.GPUsUsed, containers: n.Containers}
		if e := c.nm.nodes[n.Host]; e != nil && e.fp == fp && now.Sub(e.fetched) < trustFor(n.Host) {
			results[i] = e.containers
			continue
		}
		fetch = append(fetch, i)
	}
	for h := range c.nm.nodes {
		if !live[h] {
			delete(c.nm.nodes, h)
		}
	}
	c.nm.mu.Unlock()
	if err := c.each(ctx, len(fetch), func(ctx context.Context, k int) error {
		i := fetch[k]
		n := &obs.Nodes[i]
		cs, err := c.nodeContainers(ctx, n, apps)
		if err != nil {
			return err
		}
		results[i] = cs
		c.nm.mu.Lock()
		c.nm.nodes[n.Host] = &nmEntry{fp: nodeAllocation{gpus: n.GPUsUsed, containers: n.Containers}, containers: cs, fetched: now}
		c.nm.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	for _, cs := range results {
		for _, ct := range cs {
			if a := apps[ct.app]; a != nil {
				ct.AM = a.AMContainer != "" && ct.ID == a.AMContainer
				a.Containers = append(a.Containers, ct.Container)
			}
		}
	}
	for _, a := range apps {
		slices.SortFunc(a.Containers, func(x, y Container) int { return cmp.Compare(x.ID, y.ID) })
	}
	return nil
}

// nodeContainers reads one NodeManager's live containers of apps and
// their GPUs; with apps nil, every live container, without asking for
// their GPUs (those are of apps that hold none, see completeNodes).
func (c *Client) nodeContainers(ctx context.Context, n *Node, apps map[string]*App) ([]nmContainer, error) {
	if n.HTTPAddress == "" || strings.HasSuffix(n.HTTPAddress, ":0") {
		return nil, fmt.Errorf("nodemanager %s: no web address to read its containers from", n.Host)
	}
	base := n.HTTPAddress
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	var cr nmContainersResponse
	if err := c.getNM(ctx, base+PathNMContainers, &cr); err != nil {
		return nil, fmt.Errorf("nodemanager %s: %w", n.Host, err)
	}
	var gr nmGPUResponse
	plugin := true
	if apps == nil {
		plugin = false
	} else if err := c.getNM(ctx, base+PathNMGPUs, &gr); err != nil {
		var se *statusError
		if !errors.As(err, &se) || se.code >= 500 {
			return nil, fmt.Errorf("nodemanager %s: %w", n.Host, err)
		}
		plugin = false // no GPU resource plugin: GPUs per container unknown
	}
	gpus := map[string]int{}
	for _, d := range gr.AssignedGpuDevices {
		gpus[d.ContainerID]++
	}
	var out []nmContainer
	for _, w := range cr.all() {
		if terminalNMStates[w.State] {
			continue
		}
		app := containerApp(w.ID)
		if apps != nil && apps[app] == nil {
			continue
		}
		out = append(out, nmContainer{app: app, Container: Container{
			ID: w.ID, Host: n.Host, NodeID: cmp.Or(w.NodeID, n.ID), GPUs: gpus[w.ID],
			MemoryMB: int64(w.TotalMemoryNeededMB), VCores: int64(w.TotalVCoresNeeded), State: w.State,
		}})
	}
	if !plugin && apps != nil && len(out) == 1 {
		// Without the plugin, a lone GPU app's container holds what the
		// node reports in use; with several, the GPUs stay unexplained
		// (unknown work), never idle.
		out[0].GPUs = n.GPUsUsed
	}
	return out, nil
}

// getNM reads a NodeManager answer; NodeManagers have no HA to fail over.
func (c *Client) getNM(ctx context.Context, target string, v any) error {
	if c.cfg.User != "-" {
		target += "?user.name=" + url.QueryEscape(c.cfg.User)
	}
	next, err := c.fetch(ctx, target, v)
	if err == nil && next != "" {
		err = fmt.Errorf("redirected to %s", next)
	}
	if err != nil {
		return fmt.Errorf("get %s: %w", target, err)
	}
	return nil
}

// containerApp returns the application id of a container id:
// container_[e<epoch>_]<cluster>_<app>_<attempt>_<n> →
// application_<cluster>_<app>.
func containerApp(id string) string {
	parts := strings.Split(strings.TrimPrefix(id, "container_"), "_")
	if len(parts) > 0 && strings.HasPrefix(parts[0], "e") {
		parts = parts[1:]
	}
	if len(parts) != 4 {
		return ""
	}
	return "application_" + parts[0] + "_" + parts[1]
}

// each runs f for 0..n-1, a bounded number at a time, stopping at the
// first error, which it returns.
func (c *Client) each(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(containerConcurrency, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err })
					cancel()
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
