package store

import (
	"sort"
	"strconv"
	"sync"

	"github.com/gpubroker/gpubroker/broker"
)

// obsCache remembers, per source, the rows of the last observation this
// Store applied and the observations.generation that apply produced. An
// observation is diffed against it so only new and changed rows travel to
// PostgreSQL and vanished rows are deleted by key.
//
// It is a cache, never the truth: it is used only when the generation read
// under the source's row lock equals the cached one (so no other Store, and
// no restart, applied anything in between), it is dropped for the source on
// any error, and a fresh Store starts empty and takes the full path.
type obsCache struct {
	mu    sync.Mutex // guards the maps
	src   map[broker.Source]*sourceRows
	apply map[broker.Source]*sync.Mutex // held for a whole ApplyObservation of the source
}

// lock serialises the applies of one source on this Store (the sources
// apply in parallel); the returned func unlocks.
func (c *obsCache) lock(src broker.Source) func() {
	c.mu.Lock()
	if c.apply == nil {
		c.apply = make(map[broker.Source]*sync.Mutex)
	}
	m := c.apply[src]
	if m == nil {
		m = &sync.Mutex{}
		c.apply[src] = m
	}
	c.mu.Unlock()
	m.Lock()
	return m.Unlock
}

type sourceRows struct {
	gen  int64
	rows map[string]string // key → encodeRow of the stored attributes
}

func (c *obsCache) get(src broker.Source, gen int64) *sourceRows {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.src[src]; r != nil && r.gen == gen {
		return r
	}
	return nil
}

func (c *obsCache) put(src broker.Source, r *sourceRows) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		c.src = make(map[broker.Source]*sourceRows)
	}
	c.src[src] = r
}

func (c *obsCache) drop(src broker.Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.src, src)
}

// encodeRow is the exact identity of the attributes ApplyObservation writes
// (everything but first_seen and the wait reason), length-prefixed so no two
// different rows encode alike.
// Every slice and map is count-prefixed, so the encoding is injective: it
// may tell apart rows whose JSON is equal (nil and empty), which only costs
// a skipped rewrite, but never confuses two different rows. Constraints are
// encoded here rather than as JSON because encoding/json is the largest
// cost of an observation; TestEncodeRowKnowsEveryField fails when a field is
// added to the types below without being added here.
func encodeRow(d *broker.Demand) string {
	b := make([]byte, 0, 96+len(d.Name)+len(d.Tenant)+len(d.Queue))
	num := func(n int) {
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, ';')
	}
	str := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	strs := func(ss []string) {
		num(len(ss))
		for _, s := range ss {
			str(s)
		}
	}
	str(d.Name)
	str(d.Tenant)
	str(d.Queue)
	b = strconv.AppendInt(b, d.Priority, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(d.GPUsPerUnit), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(d.Units), 10)
	b = strconv.AppendBool(b, d.Gang)
	b = strconv.AppendBool(b, d.Preemptible)
	c := &d.Constraints
	strs(c.GPUModels)
	num(len(c.NodeSelector))
	switch len(c.NodeSelector) {
	case 0:
	case 1:
		for k, v := range c.NodeSelector {
			str(k)
			str(v)
		}
	default:
		keys := make([]string, 0, len(c.NodeSelector))
		for k := range c.NodeSelector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			str(k)
			str(c.NodeSelector[k])
		}
	}
	num(len(c.Affinity))
	for _, t := range c.Affinity {
		num(len(t.Requirements))
		for _, r := range t.Requirements {
			str(r.Key)
			str(r.Operator)
			strs(r.Values)
		}
	}
	num(len(c.Tolerations))
	for _, t := range c.Tolerations {
		str(t.Key)
		str(t.Operator)
		str(t.Value)
		str(t.Effect)
	}
	str(c.NodeLabel)
	str(c.MIGProfile)
	num(c.MinGPUMemoryMiB)
	return string(b)
}
