package yarn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Listing the running containers of the apps that hold GPUs: the app list
// says what each app holds, not where, so the RM is asked per app for its
// current attempt (/apps/{app}/appattempts) and that attempt's live
// containers (/apps/{app}/appattempts/{attempt}/containers, Hadoop 3.x).
// Answers are kept per app and attempt and reused while the app list shows
// the same allocation and the nodes' GPU use agrees with them, so a poll of
// a large, steady cluster makes few extra calls.

const (
	// containerRefresh bounds how long a cached container list is trusted
	// even when nothing suggests it changed (a container that ended and was
	// replaced by one of the same size on the same node between two polls
	// leaves every count as it was). Each app's list is trusted for
	// between one and two times this, spread by its id, so lists fetched
	// together are not all fetched again together.
	containerRefresh = 5 * time.Minute
	// containerConcurrency bounds the per-app calls in flight.
	containerConcurrency = 16
)

// appContainers is what the cache holds for one app.
type appContainers struct {
	attempt, am string
	fp          allocation
	containers  []Container
	fetched     time.Time
}

// allocation is what the app list says an app holds; when it changes, the
// app's containers are listed again.
type allocation struct {
	containers int
	mb, vcores int64
	gpus       int
	// pending is the GPU containers still asked for: an ask served
	// between polls changes it even when a finished container of the same
	// size on the same node leaves the allocation as it was.
	pending int
}

func allocationOf(a *App) allocation {
	return allocation{containers: a.RunningContainers, mb: a.AllocatedMB, vcores: a.AllocatedVCores,
		gpus: a.AllocatedGPUs, pending: a.PendingContainers()}
}

// trustFor is how long the cached container list of app is trusted.
func trustFor(app string) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(app))
	return containerRefresh + time.Duration(h.Sum32()%1024)*containerRefresh/1024
}

// containerCache is the client's memory of container lists between polls.
type containerCache struct {
	mu   sync.Mutex
	apps map[string]*appContainers
}

// refreshContainers makes the next poll list app's containers, and
// host's NodeManager, again instead of trusting the cached answers: Evict
// stopped one of them, and a replacement of the same size on the same
// node would leave the allocation the cache is checked against as it was.
func (c *Client) refreshContainers(app, host string) {
	c.cache.mu.Lock()
	if e := c.cache.apps[app]; e != nil {
		e.fetched = time.Time{}
	}
	c.cache.mu.Unlock()
	c.nm.mu.Lock()
	if e := c.nm.nodes[host]; e != nil {
		e.fetched = time.Time{}
	}
	c.nm.mu.Unlock()
}

// PathAppAttempts and PathAttemptContainers are the per-app REST paths
// (with %s for the escaped app and attempt ids).
const (
	PathAppAttempts       = "/ws/v1/cluster/apps/%s/appattempts"
	PathAttemptContainers = "/ws/v1/cluster/apps/%s/appattempts/%s/containers"
)

// observeContainers fills Attempt, AMContainer and Containers of every app
// that holds GPUs, from the RM or, when the RM lacks the endpoint, from the
// NodeManagers. Any failed call fails the observation (broker.ErrStale): a
// node whose containers are unknown must not look idle.
func (c *Client) observeContainers(ctx context.Context, obs *Observation) error {
	now := c.cfg.Now()
	if !c.nmMode.Load() {
		err := c.observeAttempts(ctx, obs, now)
		if err == nil {
			c.completeNodes(ctx, obs, now)
			return nil
		}
		if !errors.Is(err, errNoAttemptContainers) {
			return err
		}
		c.cfg.Logger.WarnContext(ctx, "yarn rm does not list the containers of app attempts; reading them from the NodeManagers", "rm", obs.RM, "err", err)
		c.nmMode.Store(true)
	}
	if err := c.observeNodeManagers(ctx, obs, now); err != nil {
		if !errors.Is(err, broker.ErrStale) {
			err = fmt.Errorf("%w: %w", broker.ErrStale, err)
		}
		return err
	}
	c.completeNodes(ctx, obs, now)
	return nil
}

// observeAttempts lists the containers of the GPU apps through the RM,
// reusing cached lists where the allocation and the nodes agree.
func (c *Client) observeAttempts(ctx context.Context, obs *Observation, now time.Time) error {
	var fetch []*App
	c.cache.mu.Lock()
	if c.cache.apps == nil {
		c.cache.apps = map[string]*appContainers{}
	}
	live := make(map[string]bool, len(obs.Apps))
	for i := range obs.Apps {
		a := &obs.Apps[i]
		if !a.HoldsGPUs() {
			continue
		}
		live[a.ID] = true
		e := c.cache.apps[a.ID]
		if e != nil && e.fp == allocationOf(a) && now.Sub(e.fetched) < trustFor(a.ID) {
			// A copy: observations outlive the poll, the cache too.
			a.Attempt, a.AMContainer, a.Containers = e.attempt, e.am, slices.Clone(e.containers)
			continue
		}
		fetch = append(fetch, a)
	}
	for id := range c.cache.apps {
		if !live[id] {
			delete(c.cache.apps, id)
		}
	}
	c.cache.mu.Unlock()

	if err := c.listContainers(ctx, fetch, now); err != nil {
		return err
	}
	fetched := make(map[string]bool, len(fetch))
	for _, a := range fetch {
		fetched[a.ID] = true
	}
	// Cross-check the reused lists against the nodes' GPU use: where a
	// node disagrees, list again every reused app with a container there.
	var again []*App
	for _, host := range disagreeingNodes(obs) {
		for i := range obs.Apps {
			a := &obs.Apps[i]
			if fetched[a.ID] || !slices.ContainsFunc(a.Containers, func(ct Container) bool { return ct.Host == host }) {
				continue
			}
			fetched[a.ID] = true
			again = append(again, a)
		}
	}
	return c.listContainers(ctx, again, now)
}

// disagreeingNodes returns the hosts whose GPUs in use, as the RM reports
// them, differ from the GPUs of the containers listed on them.
func disagreeingNodes(obs *Observation) []string {
	sum := map[string]int{}
	for _, a := range obs.Apps {
		for _, ct := range a.Containers {
			sum[ct.Host] += ct.GPUs
		}
	}
	var out []string
	for _, n := range obs.Nodes {
		if sum[n.Host] != n.GPUsUsed {
			out = append(out, n.Host)
		}
	}
	return out
}

// listContainers lists the containers of apps, a bounded number at a time,
// and caches the answers.
func (c *Client) listContainers(ctx context.Context, apps []*App, now time.Time) error {
	err := c.each(ctx, len(apps), func(ctx context.Context, i int) error { return c.appContainers(ctx, apps[i], now) })
	if err != nil {
		return fmt.Errorf("list containers of %d apps: %w", len(apps), err)
	}
	return nil
}

// appContainers lists one app's live containers: its current attempt (the
// cached one while it still has containers), then that attempt's
// containers. An app the RM no longer knows has ended: no containers.
func (c *Client) appContainers(ctx context.Context, a *App, now time.Time) error {
	c.cache.mu.Lock()
	var attempt, am string
	if e := c.cache.apps[a.ID]; e != nil {
		attempt, am = e.attempt, e.am
	}
	c.cache.mu.Unlock()

	cs, err := c.attemptContainers(ctx, a.ID, attempt)
	if attempt != "" && (notFound(err) || (err == nil && len(cs) == 0)) {
		// An attempt that ended lists nothing (or is unknown): the app
		// may be on a new one.
		attempt, err = "", nil
	}
	if err == nil && attempt == "" {
		attempt, am, err = c.currentAttempt(ctx, a.ID)
		if err == nil && attempt != "" {
			cs, err = c.attemptContainers(ctx, a.ID, attempt)
		}
	}
	switch {
	case notFound(err):
		// The app ended between the app list and now.
		attempt, am, cs = "", "", nil
	case err != nil:
		return err
	}
	for i := range cs {
		cs[i].AM = am != "" && cs[i].ID == am
	}
	slices.SortFunc(cs, func(x, y Container) int { return cmp.Compare(x.ID, y.ID) })
	a.Attempt, a.AMContainer, a.Containers = attempt, am, cs
	c.cache.mu.Lock()
	c.cache.apps[a.ID] = &appContainers{attempt: attempt, am: am, fp: allocationOf(a), containers: cs, fetched: now}
	c.cache.mu.Unlock()
	return nil
}

// currentAttempt returns the app's newest attempt and its AM container.
func (c *Client) currentAttempt(ctx context.Context, app string) (attempt, am string, err error) {
	var r appAttemptsResponse
	if _, err := c.Get(ctx, fmt.Sprintf(PathAppAttempts, url.PathEscape(app)), &r); err != nil {
		return "", "", err
	}
	if r.AppAttempts == nil {
		return "", "", nil
	}
	var best *appAttemptInfo
	for i := range r.AppAttempts.AppAttempt {
		at := &r.AppAttempts.AppAttempt[i]
		if best == nil || at.ID > best.ID {
			best = at
		}
	}
	if best == nil {
		return "", "", nil
	}
	attempt = best.AppAttemptID
	if attempt == "" {
		// Before Hadoop 3.0 the attempt id is not rendered: build it.
		attempt = attemptID(app, int(best.ID))
	}
	return attempt, best.ContainerID, nil
}

// attemptID builds appattempt_<cluster>_<app>_<attempt> from an app id.
func attemptID(app string, n int) string {
	return "appattempt_" + strings.TrimPrefix(app, "application_") + fmt.Sprintf("_%06d", n)
}

// attemptContainers lists an attempt's live containers.
func (c *Client) attemptContainers(ctx context.Context, app, attempt string) ([]Container, error) {
	if attempt == "" {
		return nil, nil
	}
	var r containersAnswer
	path := fmt.Sprintf(PathAttemptContainers, url.PathEscape(app), url.PathEscape(attempt))
	if _, err := c.Get(ctx, path, &r); err != nil {
		var se *statusError
		if errors.As(err, &se) && se.code == 404 && se.remote == "" {
			return nil, fmt.Errorf("%w: %w", errNoAttemptContainers, err)
		}
		return nil, err
	}
	return r.containers, nil
}
